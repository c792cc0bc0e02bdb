package clientip

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"strings"
)

// Defaults and bounds.
const (
	// DefaultIPv6Prefix is the prefix length by which IPv6 clients are
	// grouped unless Config.IPv6Prefix says otherwise.
	DefaultIPv6Prefix = 64
	// DefaultHeader is the forwarding header read from trusted proxies.
	DefaultHeader = "X-Forwarded-For"
	// MaxHops is the largest number of addresses a forwarding header may
	// hold; a longer chain is ignored in favour of the socket peer.
	MaxHops = 32
	// MaxHeaderLen is the longest forwarding header, in characters, that is
	// read: the length of all its lines joined with ", ". A longer header is
	// ignored in favour of the socket peer.
	MaxHeaderLen = 8192
)

// ErrInvalidConfig is wrapped by every error of Config.Validate, New and
// TrustCIDRs.
var ErrInvalidConfig = errors.New("clientip: invalid configuration")

// Config configures a Resolver. Start from DefaultConfig: the zero Config is
// invalid (its Header is empty), so that a forgotten field never silently
// groups every IPv6 client under /0.
type Config struct {
	// TrustProxy reports whether a hop may be trusted to have written the
	// forwarding header. Nil trusts nobody: the socket peer is the client,
	// which is right for a service that clients reach directly. Use
	// TrustCIDRs for a list of networks.
	//
	// It is called with the socket peer and, if that is trusted, with the
	// header's addresses from the right for as long as the walk goes: ports
	// removed, IPv4-mapped IPv6 addresses in IPv4 form, zones kept. It must
	// be safe for concurrent use.
	TrustProxy func(netip.Addr) bool
	// IPv6Prefix groups IPv6 clients by this prefix length, 0…128 (default
	// 64). IPv4 clients are never grouped.
	IPv6Prefix int
	// Header is the forwarding header (default "X-Forwarded-For"). It must
	// hold a comma-separated list of addresses, such as X-Forwarded-For or
	// X-Real-IP; the Forwarded header of RFC 7239 has another syntax and is
	// refused. It is read only from trusted proxies.
	Header string
	// Logger receives the one-time warning about a missing peer. Nil
	// discards.
	Logger *slog.Logger
}

// DefaultConfig returns the default configuration: trust nobody, so the
// socket peer is the client; group IPv6 clients by /64; read
// X-Forwarded-For once a proxy is trusted; log nothing.
func DefaultConfig() Config {
	return Config{
		IPv6Prefix: DefaultIPv6Prefix,
		Header:     DefaultHeader,
	}
}

// Validate reports every problem of c, each wrapping ErrInvalidConfig, or
// nil.
func (c Config) Validate() error {
	var errs []error
	if c.IPv6Prefix < 0 || c.IPv6Prefix > 128 {
		errs = append(errs, fmt.Errorf("%w: IPv6Prefix %d is outside 0…128", ErrInvalidConfig, c.IPv6Prefix))
	}
	switch {
	case c.Header == "":
		errs = append(errs, fmt.Errorf("%w: Header is empty (start from DefaultConfig)", ErrInvalidConfig))
	case !isToken(c.Header):
		errs = append(errs, fmt.Errorf("%w: Header %q is not a valid field name", ErrInvalidConfig, c.Header))
	case http.CanonicalHeaderKey(c.Header) == "Forwarded":
		errs = append(errs, fmt.Errorf("%w: Header Forwarded (RFC 7239) is not a list of addresses; use X-Forwarded-For", ErrInvalidConfig))
	}
	return errors.Join(errs...)
}

// isToken reports whether s is an RFC 9110 token, the syntax of a field
// name.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := range len(s) {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// TrustCIDRs returns a Config.TrustProxy predicate that trusts the hops in
// any of the given networks. Each entry is a prefix ("10.0.0.0/8",
// "2001:db8:ffff::/48"; host bits are ignored) or a bare address, which
// trusts that address alone; spaces around an entry are ignored. An
// IPv4-mapped entry ("::ffff:10.0.0.0/104") is read in IPv4 form
// (10.0.0.0/8), as hops are; other IPv6 entries match IPv6 hops only, so list
// IPv4 ranges in IPv4 form. Zones are not accepted in entries, and a hop's
// zone is ignored when it is matched. With no entries, nobody is trusted.
//
// An entry that does not parse is an error wrapping ErrInvalidConfig.
func TrustCIDRs(cidrs ...string) (func(netip.Addr) bool, error) {
	prefixes := make([]netip.Prefix, 0, len(cidrs))
	for _, s := range cidrs {
		p, err := parseTrusted(strings.TrimSpace(s))
		if err != nil {
			return nil, fmt.Errorf("%w: trusted proxy %q: %w", ErrInvalidConfig, s, err)
		}
		prefixes = append(prefixes, p)
	}
	return func(addr netip.Addr) bool {
		addr = addr.Unmap().WithZone("")
		for _, p := range prefixes {
			if p.Contains(addr) {
				return true
			}
		}
		return false
	}, nil
}

// parseTrusted parses one TrustCIDRs entry into a masked prefix, with
// IPv4-mapped prefixes in IPv4 form.
func parseTrusted(s string) (netip.Prefix, error) {
	var p netip.Prefix
	if strings.Contains(s, "/") {
		var err error
		if p, err = netip.ParsePrefix(s); err != nil {
			return netip.Prefix{}, err
		}
	} else {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return netip.Prefix{}, err
		}
		if a.Zone() != "" {
			return netip.Prefix{}, errors.New("zones are not accepted")
		}
		p = netip.PrefixFrom(a, a.BitLen())
	}
	if p.Addr().Is4In6() && p.Bits() >= 96 {
		p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
	}
	return p.Masked(), nil
}
