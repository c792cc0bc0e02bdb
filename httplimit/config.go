package httplimit

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/clientip"
	"github.com/sluicehq/sluice/engine"
)

// Defaults and bounds.
const (
	// DefaultMaxKeys caps the memory store a Limiter creates when
	// Config.Store is nil: one key per client (per quota) and window.
	DefaultMaxKeys = 10_000
	// DefaultQuotaName names the quota in the RateLimit fields when
	// Quota.Name is empty.
	DefaultQuotaName = "default"
	// MaxPrefixLen is the longest Config.Prefix, in bytes.
	MaxPrefixLen = 256
	// MaxQuotaNameLen is the longest Quota.Name, in bytes.
	MaxQuotaNameLen = 64
	// MaxWindow is the longest window a quota may have: 120 days.
	MaxWindow = time.Duration(algo.MaxWindow) * time.Millisecond
)

// ErrInvalidConfig is wrapped by every error of Config.Validate,
// Quota.Validate and New.
var ErrInvalidConfig = errors.New("httplimit: invalid configuration")

// Config configures a Limiter: one stage, protecting a set of routes with
// one quota (or one Policy) per client.
//
// Start from DefaultConfig, which does not validate until Routes, Prefix and
// Quota.Limit are set: only the application knows what to protect, how much
// to allow, and under which name its counters live.
type Config struct {
	// Routes selects the request paths the stage limits; every other path
	// passes through without touching the store. An exact path ("/login")
	// matches every method. A path ending in "/*" ("/device/*") matches its
	// root ("/device") and everything under it ("/device/", "/device/poll"),
	// never a sibling that merely shares the prefix ("/devices"); "/*"
	// matches every path. Paths are compared with the request's decoded
	// URL.Path, byte for byte, and with that path as net/http's ServeMux
	// cleans it (repeated slashes and dot segments resolved, a final slash
	// kept, the empty path read as "/"), since a router that cleans paths
	// routes the one as the other: "/login" also selects "//login" and
	// "/x/../login". A request sent with escapes is compared with its
	// escaped path (URL.RawPath) cleaned, then decoded, too, as chi's
	// CleanPath routes it: "/login" also selects "/a%2Fb/../login".
	// A trailing slash stays significant: list each
	// spelling your router also routes to the handler ("/login/" behind
	// chi's CleanPath or StripSlashes, which route it as "/login").
	// All selected routes share one quota per client.
	Routes []string

	// Prefix names the stage's counters: every partition the stage writes
	// is the prefix followed by a hash of the client's key. Give each
	// stage and policy sharing a store a prefix of its own ("login",
	// "device-flow/anonymous"), and give every instance of one stage the
	// same prefix, so that they share one quota per client. At most
	// MaxPrefixLen bytes of printable UTF-8.
	Prefix string

	// Quota is the limit of every selected request. It is ignored when
	// Policy is set.
	Quota Quota

	// Policy, if set, chooses the quota of each selected request instead of
	// Quota: per tenant, per plan, or from a configuration held elsewhere.
	// Policies.Policy gives the quota an operator keeps in the store.
	Policy Policy

	// Store holds the counters. Every process sharing a quota must share
	// the store: a Sluice server through the client package, Redis, or
	// the embedded store behind one server. Nil means a memory store of
	// this Limiter alone, capped at DefaultMaxKeys keys, on the system
	// clock; it suits one process, tests and development.
	//
	// The store's clock decides windows and every delay the stage reports.
	Store engine.Store

	// Key returns the client key of a request: the identity that one
	// quota is counted for. Nil means the client address, resolved by a
	// clientip.Resolver configured by ClientIP. A key is used verbatim
	// (an empty key is one bucket like any other) and is hashed before it
	// reaches the store.
	Key func(*http.Request) string

	// ClientIP configures the resolver of the default Key: which proxies
	// may set X-Forwarded-For (TrustProxy; nobody by default) and the
	// prefix by which IPv6 clients are grouped (/64 by default). It is
	// ignored when Key is set. A nil ClientIP.Logger means Logger.
	ClientIP clientip.Config

	// Pepper keys the hash of client keys (a SipHash-2-4 keyed with 128
	// bits derived from the pepper and the prefix). Set it, at least
	// 32 characters and the same in every process sharing the store,
	// wherever the store outlives the process or is reachable by others
	// (the embedded store, Redis): without it the hash is unkeyed, and
	// whoever reads the store can test guesses, which for IPv4 addresses
	// takes minutes. Empty means unkeyed.
	Pepper string

	// Headers selects the rate-limit fields written on every response of
	// a selected route, allowed or rejected. Zero writes none.
	Headers Headers

	// OnError answers a request whose quota could not be checked: the
	// store failed or is full (engine.ErrCapacity, engine.ErrUnavailable,
	// ...), or the Policy failed. The protected handler never runs for
	// such a request, whatever OnError does. Nil means WriteUnavailable:
	// 503 with a problem document.
	OnError func(w http.ResponseWriter, r *http.Request, err error)

	// Registerer, if set, receives the stage's counts: the requests on
	// its routes by outcome (sluice_httplimit_requests_total, labelled by
	// Prefix and allowed, limited or error). Stages registered on one
	// registry share the counter, each under its prefix.
	Registerer prometheus.Registerer
	// Logger receives a warning when checks start failing and a notice
	// when they succeed again, and, unless ClientIP.Logger is set, the
	// one warning of package clientip about requests without a usable
	// peer; it never receives a client key. Nil discards.
	Logger *slog.Logger
}

// DefaultConfig returns a configuration with a fixed, epoch-aligned window
// of one minute named "default", the draft RateLimit fields, and client
// addresses taken from the socket peer with IPv6 grouped by /64. It does
// not validate until Routes, Prefix and Quota.Limit are set.
func DefaultConfig() Config {
	return Config{
		Quota:    Quota{Name: DefaultQuotaName, Kind: algo.KindFixed, Window: time.Minute},
		Headers:  HeadersIETF,
		ClientIP: clientip.DefaultConfig(),
	}
}

// Validate reports every problem of c, each wrapping ErrInvalidConfig, or
// nil.
func (c Config) Validate() error {
	var errs []error
	if len(c.Routes) == 0 {
		errs = append(errs, fmt.Errorf("%w: no Routes selected (use \"/*\" for every path)", ErrInvalidConfig))
	}
	for _, r := range c.Routes {
		if err := validateRoute(r); err != nil {
			errs = append(errs, err)
		}
	}
	if err := validatePrefix(c.Prefix); err != nil {
		errs = append(errs, err)
	}
	if c.Policy == nil {
		if err := c.Quota.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if c.Key == nil {
		if err := c.ClientIP.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("%w: ClientIP: %w", ErrInvalidConfig, err))
		}
	}
	if c.Pepper != "" && len(c.Pepper) < minPepperLen {
		errs = append(errs, fmt.Errorf("%w: Pepper is %d characters (minimum %d)", ErrInvalidConfig, len(c.Pepper), minPepperLen))
	}
	if c.Headers&^(HeadersIETF|HeadersX) != 0 {
		errs = append(errs, fmt.Errorf("%w: unknown Headers bits %#x", ErrInvalidConfig, uint8(c.Headers&^(HeadersIETF|HeadersX))))
	}
	return errors.Join(errs...)
}

// minPepperLen is the shortest Pepper, as for the client's pepper.
const minPepperLen = 32

func validatePrefix(p string) error {
	switch {
	case p == "":
		return fmt.Errorf("%w: Prefix is empty (name the stage's counters, e.g. \"login\")", ErrInvalidConfig)
	case len(p) > MaxPrefixLen:
		return fmt.Errorf("%w: Prefix is %d bytes (maximum %d)", ErrInvalidConfig, len(p), MaxPrefixLen)
	case !utf8.ValidString(p):
		return fmt.Errorf("%w: Prefix is not valid UTF-8", ErrInvalidConfig)
	case strings.ContainsFunc(p, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return fmt.Errorf("%w: Prefix %q holds a control character", ErrInvalidConfig, p)
	}
	return nil
}

// Quota is a limit of requests per client and window.
type Quota struct {
	// Name identifies the quota in the RateLimit and RateLimit-Policy
	// fields, and keeps the counters of differently named quotas of one
	// stage apart. Printable ASCII, at most MaxQuotaNameLen bytes; empty
	// means DefaultQuotaName.
	Name string
	// Limit is the number of requests a client may make per window:
	// 1 … 2^40 (1 … 4,096 for algo.KindLog).
	Limit int64
	// Window is the window's length: whole seconds, as the RateLimit fields
	// speak seconds, from 1 s to MaxWindow.
	Window time.Duration
	// Kind is the window algorithm. Zero means algo.KindFixed: windows
	// aligned to the Unix epoch, so every client's window of one minute
	// ends at the top of a minute; up to twice the limit can pass around
	// a boundary. algo.KindSliding, algo.KindLog and algo.KindGCRA smooth
	// that burst (see package algo).
	Kind algo.Kind
}

// Validate reports every problem of q, each wrapping ErrInvalidConfig, or
// nil.
func (q Quota) Validate() error {
	var errs []error
	if err := validateQuotaName(q.Name); err != nil {
		errs = append(errs, err)
	}
	switch {
	case q.Window < time.Second || q.Window > MaxWindow:
		errs = append(errs, fmt.Errorf("%w: Window %v is outside 1s…%v", ErrInvalidConfig, q.Window, MaxWindow))
	case q.Window%time.Second != 0:
		errs = append(errs, fmt.Errorf("%w: Window %v is not a whole number of seconds", ErrInvalidConfig, q.Window))
	}
	lim := algo.Limit{Kind: q.kind(), Limit: q.Limit, Window: algo.MaxWindow}
	if err := lim.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("%w: %w", ErrInvalidConfig, err))
	}
	return errors.Join(errs...)
}

func validateQuotaName(name string) error {
	if len(name) > MaxQuotaNameLen {
		return fmt.Errorf("%w: quota Name is %d bytes (maximum %d)", ErrInvalidConfig, len(name), MaxQuotaNameLen)
	}
	for i := range len(name) {
		if c := name[i]; c < 0x20 || c > 0x7e {
			return fmt.Errorf("%w: quota Name %q is not printable ASCII", ErrInvalidConfig, name)
		}
	}
	return nil
}

func (q Quota) kind() algo.Kind {
	if q.Kind == 0 {
		return algo.KindFixed
	}
	return q.Kind
}

func (q Quota) name() string {
	if q.Name == "" {
		return DefaultQuotaName
	}
	return q.Name
}

// Policy chooses the quota of each selected request. Use it when the limit
// depends on the request (a tenant's plan, an API key's tier) or is
// configured outside the code (Policies keeps quotas in the store); a fixed
// limit needs only Config.Quota.
//
// Quota is called once per selected request, before the store is, and
// must be safe for concurrent use. Differently named quotas are counted
// apart. A quota whose limit changes keeps its count; one whose window
// changes keeps it only where the window's state carries over: a fixed or
// sliding window keeps it while its bucket begins where the old one did, a
// log the requests within the old window, GCRA its debt. An error, or a
// quota that does not validate, is handed to Config.OnError and the
// protected handler does not run.
type Policy interface {
	Quota(r *http.Request) (Quota, error)
}

// PolicyFunc adapts a function to a Policy.
type PolicyFunc func(r *http.Request) (Quota, error)

// Quota returns f(r).
func (f PolicyFunc) Quota(r *http.Request) (Quota, error) { return f(r) }

// Headers selects the rate-limit fields of a response. Combine them with |.
type Headers uint8

const (
	// HeadersIETF writes the RateLimit-Policy and RateLimit fields of
	// draft-ietf-httpapi-ratelimit-headers-11, as Structured Fields:
	//
	//	RateLimit-Policy: "default";q=10;w=60
	//	RateLimit: "default";r=3;t=42
	//
	// q is the limit and w the window in seconds; r is the requests left.
	// t is the seconds, rounded up, until the window is empty again (for
	// a fixed window, its end) or, on a rejection, until the request would
	// be admitted: the Retry-After.
	HeadersIETF Headers = 1 << iota
	// HeadersX writes the older, unstandardised dialect that many clients
	// still read: X-RateLimit-Limit, X-RateLimit-Remaining, and
	// X-RateLimit-Reset as the Unix time in seconds (by the store's clock)
	// at which the window is next empty.
	HeadersX
)
