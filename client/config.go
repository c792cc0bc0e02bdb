package client

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/wire"
)

// Timeouts of one call. A configured timeout outside [MinTimeout,
// MaxTimeout] is clamped into it; zero means DefaultTimeout.
const (
	DefaultTimeout = 750 * time.Millisecond
	MinTimeout     = 100 * time.Millisecond
	MaxTimeout     = 2 * time.Second
)

// DefaultFamily is the admission family a client sends when its
// configuration names none.
const DefaultFamily = "default"

// The environment variables read by ConfigFromEnv.
const (
	EnvURL       = "SLUICE_URL"        // the server's origin: https://host[:port], or http:// on loopback only
	EnvSecret    = "SLUICE_SECRET"     // the request-signing secret, at least 32 characters
	EnvPepper    = "SLUICE_PEPPER"     // the key-hashing pepper, at least 32 characters
	EnvTimeoutMs = "SLUICE_TIMEOUT_MS" // per-call timeout in milliseconds: default 750, clamped to 100–2000
	EnvFamily    = "SLUICE_FAMILY"     // the family this process sends by default
	EnvFamilies  = "SLUICE_FAMILIES"   // comma list of the families this process assigns to the server
	EnvBackend   = "SLUICE_BACKEND"    // "off" reports the store unavailable to every caller
	// EnvHTTPVersion selects the HTTP version: "2" or "1.1" (default: see
	// HTTPVersion).
	EnvHTTPVersion = "SLUICE_HTTP_VERSION"
	// EnvCoalesce is Config.Coalesce: the RPCs in flight beyond which
	// concurrent calls are coalesced into envelopes, 1…MaxCoalesce, or
	// "off" (default DefaultCoalesce).
	EnvCoalesce = "SLUICE_COALESCE"
)

// Coalescing of concurrent calls (see Config.Coalesce).
const (
	// DefaultCoalesce is the default number of RPCs a client has in
	// flight before it coalesces calls. On a 2-core machine over loopback,
	// 64 concurrent callers of one decision each made more decisions per
	// second with 2 than with 4, their envelopes sharing each fsync among
	// more calls; heavier calls get more RPCs in flight on their own (see
	// Config.Coalesce, and docs/decisions/0083-coalescing-by-weight.md).
	DefaultCoalesce = 2
	// MaxCoalesce is the largest accepted Config.Coalesce.
	MaxCoalesce = 1024
	// CoalesceOff sends every call at once as an RPC of its own.
	CoalesceOff = -1
)

// HTTPVersion selects the HTTP version a Client speaks to its server. The
// zero HTTPVersion, the default, speaks HTTP/2 over https where the server
// offers it by ALPN, and HTTP/1.1 over plain http: on loopback, Go's
// HTTP/1.1 costs less CPU per call than HTTP/2 with prior knowledge (h2c),
// whose server runs every request on a fresh goroutine
// (docs/decisions/0050-rpc-codec-and-transport.md).
type HTTPVersion string

// The HTTP versions.
const (
	// HTTP2 multiplexes every call over one connection (and opens more
	// when the server's limit of concurrent streams is reached). Over
	// https it is negotiated by ALPN, falling back to HTTP/1.1 with a
	// server that does not offer it; over plain http it is spoken with
	// prior knowledge (h2c), which the server must accept, as sluice serve
	// does.
	HTTP2 HTTPVersion = "2"
	// HTTP1 sends each call on a pooled keep-alive HTTP/1.1 connection of
	// its own: as many connections as concurrent calls, over https too.
	HTTP1 HTTPVersion = "1.1"
)

// Config configures a Client. Start from DefaultConfig or ConfigFromEnv.
//
// A Config that does not validate still yields a Client from New: one that
// is off, answering every call with ErrUnavailable and the reasons. A
// misconfigured process therefore applies each caller's fail mode, loudly,
// and never silently runs without its limits.
type Config struct {
	// URL is the server's origin: https://host[:port]. Plain http is
	// accepted only for a loopback host (localhost, 127.0.0.0/8, ::1). It
	// carries no path, query, fragment or credentials.
	URL string
	// Secret signs every request (see wire.Sign): at least 32 characters,
	// and one of the server's accepted secrets.
	Secret string
	// Pepper keys the hash that replaces every partition name, key and
	// identity before it leaves the process: at least 32 characters, and
	// different from Secret. Every process sharing a quota must use the
	// same pepper; changing it starts every counter afresh. A pepper from
	// NewPepper (as sluice serve creates) gives names of 22 characters;
	// any pepper not beginning with CompactPrefix gives names of 64, as
	// before (see Client.Hash).
	Pepper string
	// Timeout bounds one call, from sending to the decoded answer. Zero
	// means DefaultTimeout; other values are clamped to MinTimeout …
	// MaxTimeout.
	Timeout time.Duration
	// Family is the admission family sent with every request unless a view
	// (Client.WithFamily) names another. Empty means DefaultFamily.
	Family string
	// Families lists the families this process has assigned to the server
	// (see Client.Assigned). It does not restrict what a client may send.
	Families []string
	// Off reports the store unavailable to every caller, so each applies its
	// fail mode, without contacting the server. The connection settings
	// are then not required.
	Off bool

	// HTTPVersion selects the HTTP version of the client's own transport
	// (see HTTPVersion; empty is the default); it does not apply to an
	// HTTPClient given below.
	HTTPVersion HTTPVersion

	// Coalesce bounds the RPCs the client has in flight at once before it
	// coalesces calls. While fewer are in flight, a call is sent at once,
	// alone; a call made while Coalesce are waits, and the next RPC to
	// finish sends the calls waiting then, up to wire.MaxEnvelope, as one
	// envelope (POST /v1/rpcs), the server answering each as if it had
	// come alone. Calls waiting that already fill half an envelope's body
	// (wire.MaxEnvelopeBody) do not wait for an RPC to finish: they go at
	// once, as one more envelope, up to 4 × Coalesce RPCs in flight. No
	// timer is involved: an idle client adds no delay, and a busy one
	// spends less CPU per call on both sides. Timeout bounds a call's wait
	// and its envelope together. Zero means
	// DefaultCoalesce; CoalesceOff sends every call at once, alone. A
	// server without envelopes (older than the feature) is detected by
	// its 404 or by Ping, and every call is then sent alone.
	Coalesce int

	// HTTPClient sends the requests. Nil means a client of the package's
	// own with pooled keep-alive connections; a client given here must not
	// follow redirects or retry.
	HTTPClient *http.Client
	// Now is the clock of request timestamps. Nil means time.Now.
	Now func() time.Time
	// Logger receives the client's logs. Nil discards them.
	Logger *slog.Logger

	// problems are the malformed environment variables ConfigFromEnv met;
	// Validate reports them, so they turn the client off.
	problems []error
}

// DefaultConfig returns a configuration with the default timeout and family
// and no server: it does not validate until URL, Secret and Pepper are set.
func DefaultConfig() Config {
	return Config{Timeout: DefaultTimeout, Family: DefaultFamily}
}

// ConfigFromEnv returns DefaultConfig overlaid with the SLUICE_* variables
// (see the Env constants). The error reports every problem at once — a
// malformed variable as well as what Validate reports — and the returned
// Config carries the malformed variables, so New still turns it into an
// off client rather than one running on a default the operator did not set.
func ConfigFromEnv() (Config, error) {
	cfg := DefaultConfig()
	cfg.URL = os.Getenv(EnvURL)
	cfg.Secret = os.Getenv(EnvSecret)
	cfg.Pepper = os.Getenv(EnvPepper)
	if v, ok := os.LookupEnv(EnvTimeoutMs); ok && strings.TrimSpace(v) != "" {
		// A whole number beyond int64 parses as the nearest bound, with
		// ErrRange: it is clamped like any other.
		ms, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if errors.Is(err, strconv.ErrRange) {
			err = nil
		}
		if err != nil {
			cfg.problems = append(cfg.problems, fmt.Errorf("%s=%q is not a whole number of milliseconds", EnvTimeoutMs, v))
		} else {
			// Clamp in milliseconds: ms·1e6 could overflow a Duration.
			ms = min(max(ms, MinTimeout.Milliseconds()), MaxTimeout.Milliseconds())
			cfg.Timeout = time.Duration(ms) * time.Millisecond
		}
	}
	if v := os.Getenv(EnvFamily); v != "" {
		cfg.Family = v
	}
	for name := range strings.SplitSeq(os.Getenv(EnvFamilies), ",") {
		if name = strings.TrimSpace(name); name != "" {
			cfg.Families = append(cfg.Families, name)
		}
	}
	if v, ok := os.LookupEnv(EnvHTTPVersion); ok {
		cfg.HTTPVersion = HTTPVersion(strings.TrimSpace(v))
	}
	if v := strings.TrimSpace(os.Getenv(EnvCoalesce)); v != "" {
		if n, err := strconv.Atoi(v); err == nil && n >= 1 {
			cfg.Coalesce = n
		} else if v == "off" {
			cfg.Coalesce = CoalesceOff
		} else {
			cfg.problems = append(cfg.problems, fmt.Errorf("%s=%q (want off or 1…%d)", EnvCoalesce, v, MaxCoalesce))
		}
	}
	switch v := os.Getenv(EnvBackend); v {
	case "":
	case "off":
		cfg.Off = true
	default:
		cfg.problems = append(cfg.problems, fmt.Errorf("%s=%q (want off or unset)", EnvBackend, v))
	}
	return cfg, cfg.Validate()
}

// Validate reports every problem of c at once, each naming what to fix. A
// client built from a Config that does not validate is off.
func (c Config) Validate() error {
	errs := append([]error(nil), c.problems...)
	if !c.Off {
		if err := validateURL(c.URL); err != nil {
			errs = append(errs, err)
		}
		if len(c.Secret) < wire.MinSecretLen {
			errs = append(errs, fmt.Errorf("signing secret is %d characters (minimum %d)", len(c.Secret), wire.MinSecretLen))
		}
		if len(c.Pepper) < wire.MinSecretLen {
			errs = append(errs, fmt.Errorf("key pepper is %d characters (minimum %d)", len(c.Pepper), wire.MinSecretLen))
		}
		if c.Pepper != "" && c.Pepper == c.Secret {
			errs = append(errs, errors.New("key pepper equals the signing secret (use two independent values)"))
		}
	}
	switch c.HTTPVersion {
	case "", HTTP2, HTTP1:
	default:
		errs = append(errs, fmt.Errorf("HTTP version %q (want %s or %s)", c.HTTPVersion, HTTP2, HTTP1))
	}
	if c.Coalesce < CoalesceOff || c.Coalesce > MaxCoalesce {
		errs = append(errs, fmt.Errorf("coalesce %d (want %d for off, 0 for the default, or 1…%d)", c.Coalesce, CoalesceOff, MaxCoalesce))
	}
	if c.Family != "" {
		if err := validateFamily(c.Family); err != nil {
			errs = append(errs, err)
		}
	}
	for _, f := range c.Families {
		if err := validateFamily(f); err != nil {
			errs = append(errs, fmt.Errorf("assigned %w", err))
		}
	}
	return errors.Join(errs...)
}

// timeout returns the effective per-call timeout.
func (c Config) timeout() time.Duration {
	if c.Timeout == 0 {
		return DefaultTimeout
	}
	return clampTimeout(c.Timeout)
}

// coalesce returns the effective Coalesce: 0 when off.
func (c Config) coalesce() int {
	switch c.Coalesce {
	case 0:
		return DefaultCoalesce
	case CoalesceOff:
		return 0
	}
	return c.Coalesce
}

func clampTimeout(d time.Duration) time.Duration {
	return min(max(d, MinTimeout), MaxTimeout)
}

// validateURL checks that u is an origin the client may send secrets-signed
// requests and hashed identities to.
func validateURL(raw string) error {
	if raw == "" {
		return errors.New("no server URL configured")
	}
	// No message quotes raw: it may carry a password. url.Parse's error
	// quotes it whole, so only its cause is kept.
	u, err := url.Parse(raw)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		return fmt.Errorf("server URL does not parse: %w", err)
	}
	// Messages name the scheme and host alone: a path, query or fragment
	// may carry a credential as well as the user information.
	origin := u.Scheme + "://" + u.Host
	switch {
	case u.User != nil:
		return errors.New("server URL carries credentials (use the signing secret)")
	case u.Opaque != "":
		return fmt.Errorf("server URL of scheme %q has no host (want %s://host)", u.Scheme, u.Scheme)
	case u.Hostname() == "":
		return fmt.Errorf("server URL of scheme %q has no host", u.Scheme)
	case u.Path != "" && u.Path != "/", u.RawQuery != "", u.Fragment != "", u.ForceQuery, strings.Contains(raw, "#"):
		// The paths are appended to raw: an empty fragment ("#") would
		// turn them into one.
		return fmt.Errorf("server URL of %q carries a path, query or fragment (it must be an origin)", origin)
	}
	switch u.Scheme {
	case "https":
		return nil
	case "http":
		if isLoopback(u.Hostname()) {
			return nil
		}
		return fmt.Errorf("server URL %q is plain http on a non-loopback host (use https)", origin)
	}
	return fmt.Errorf("server URL %q: scheme %q (want https, or http on loopback)", origin, u.Scheme)
}

func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.IsLoopback()
}

// validateFamily checks a family name: 1 … wire.MaxFamily bytes of ASCII
// letters, digits, '.', '_' and '-'.
func validateFamily(name string) error {
	if name == "" || len(name) > wire.MaxFamily {
		return fmt.Errorf("family name of %d bytes (want 1…%d)", len(name), wire.MaxFamily)
	}
	for i := 0; i < len(name); i++ {
		switch ch := name[i]; {
		case 'a' <= ch && ch <= 'z', 'A' <= ch && ch <= 'Z', '0' <= ch && ch <= '9', ch == '.', ch == '_', ch == '-':
		default:
			return fmt.Errorf("family %q: only letters, digits, '.', '_' and '-' are allowed", name)
		}
	}
	return nil
}
