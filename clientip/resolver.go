package clientip

import (
	"log/slog"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
)

// Resolver finds the client address of a request and its bucket, as the
// package documentation describes. Make one with New; it is safe for
// concurrent use and must not be copied.
type Resolver struct {
	trust  func(netip.Addr) bool
	prefix int
	header string // in canonical form, to index http.Header directly
	logger *slog.Logger
	warned atomic.Bool // the unknown-client warning has been logged
}

// New returns a Resolver for cfg, or an error wrapping ErrInvalidConfig if
// cfg does not validate.
func New(cfg Config) (*Resolver, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Resolver{
		trust:  cfg.TrustProxy,
		prefix: cfg.IPv6Prefix,
		header: http.CanonicalHeaderKey(cfg.Header),
		logger: logger,
	}, nil
}

// Addr returns the resolved client address, and false when it is unknown:
// the socket peer is missing, does not parse or is unspecified, or the
// client the forwarding header names is unspecified. The address carries
// no port, an IPv4-mapped IPv6 address is returned in IPv4 form, and a
// zone is kept.
func (r *Resolver) Addr(req *http.Request) (netip.Addr, bool) {
	peer, ok := parseHop(req.RemoteAddr)
	if !ok || !knowable(peer) {
		r.warnUnknown(req)
		return netip.Addr{}, false
	}
	if r.trust == nil || !r.trust(peer) {
		return peer, true
	}
	// The chain lives in an array on the stack: resolving allocates nothing.
	var hops [MaxHops]netip.Addr
	n, ok := parseChain(req.Header[r.header], &hops)
	if !ok || n == 0 {
		return peer, true
	}
	// From the nearest hop; the leftmost is the client whether it is
	// trusted or not, so it needs no decision.
	i := n - 1
	for i > 0 && r.trust(hops[i]) {
		i--
	}
	if !knowable(hops[i]) {
		r.warnUnknown(req)
		return netip.Addr{}, false
	}
	return hops[i], true
}

// Key returns the client's bucket: canonical IPv4 ("192.0.2.1"), IPv6 prefix
// ("2001:db8::/64", with a zone kept distinct: "fe80::%eth0/64"), or
// Unknown. See Canonical. The method value r.Key serves wherever a
// func(*http.Request) string key is wanted.
func (r *Resolver) Key(req *http.Request) string {
	addr, ok := r.Addr(req)
	if !ok {
		return Unknown
	}
	return Canonical(addr, r.prefix)
}

// AppendKey appends the client's bucket, as Key returns it, to dst and
// returns the extended buffer: the allocation-free form of Key, for a
// caller that hashes or copies the bucket anyway.
func (r *Resolver) AppendKey(dst []byte, req *http.Request) []byte {
	addr, ok := r.Addr(req)
	if !ok {
		return append(dst, Unknown...)
	}
	return AppendCanonical(dst, addr, r.prefix)
}

// warnUnknown logs, once per Resolver, that a request had no usable client
// address. The value itself is never logged.
func (r *Resolver) warnUnknown(req *http.Request) {
	if r.warned.Load() || !r.warned.CompareAndSwap(false, true) {
		return
	}
	r.logger.WarnContext(req.Context(),
		"clientip: a request has no usable client address (http.Request.RemoteAddr is empty, does not parse or is unspecified, or a trusted proxy forwarded an unspecified one); such requests share one bucket. This is logged once.",
		slog.String("bucket", Unknown))
}

// parseChain parses the forwarding header lines, joined in order, into
// hops. It reports false for a malformed chain, a chain of more than MaxHops
// addresses or one longer than MaxHeaderLen, and 0 addresses for an absent
// or blank header.
func parseChain(lines []string, hops *[MaxHops]netip.Addr) (int, bool) {
	size, blank := 0, true
	for i, line := range lines {
		if i > 0 {
			size += len(", ")
		}
		if size += len(line); size > MaxHeaderLen {
			return 0, false
		}
		if blank && trimOWS(line) != "" {
			blank = false
		}
	}
	if blank {
		return 0, true
	}
	n := 0
	for _, line := range lines {
		for {
			elem, rest, more := strings.Cut(line, ",")
			if n == MaxHops {
				return 0, false
			}
			addr, ok := parseHop(trimOWS(elem))
			if !ok {
				return 0, false
			}
			hops[n] = addr
			n++
			if !more {
				break
			}
			line = rest
		}
	}
	return n, true
}

// trimOWS removes the optional whitespace of RFC 9110 (spaces and tabs)
// around s.
func trimOWS(s string) string {
	return strings.Trim(s, " \t")
}

// parseHop parses one address as a socket peer or a header element writes
// it: bare ("192.0.2.1", "2001:db8::1", "fe80::1%eth0"), bracketed
// ("[2001:db8::1]") or with a port ("192.0.2.1:80", "[2001:db8::1]:443").
// An IPv4-mapped IPv6 address is returned in IPv4 form.
func parseHop(s string) (netip.Addr, bool) {
	// Choose the one parser that can accept s, so that the common shapes
	// never build an error value.
	switch colon := strings.IndexByte(s, ':'); {
	case s == "":
		return netip.Addr{}, false
	case s[0] == '[' && s[len(s)-1] == ']':
		addr, err := netip.ParseAddr(s[1 : len(s)-1])
		if err != nil || !addr.Is6() {
			return netip.Addr{}, false
		}
		return addr.Unmap(), true
	case s[0] == '[' || colon >= 0 && colon == strings.LastIndexByte(s, ':'):
		// "[v6]:port", or "v4:port": an IPv6 address has two colons or more.
		ap, err := netip.ParseAddrPort(s)
		if err != nil {
			return netip.Addr{}, false
		}
		return ap.Addr().Unmap(), true
	default:
		addr, err := netip.ParseAddr(s)
		if err != nil {
			return netip.Addr{}, false
		}
		return addr.Unmap(), true
	}
}
