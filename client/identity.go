package client

import (
	"net/netip"

	"github.com/sluicehq/sluice/wire"
)

// UnknownSource is the bucket shared by every caller whose source address
// is missing, unspecified (0.0.0.0, ::) or does not parse, so that they
// share one fairness quota rather than bypass it. It is sent as it is,
// never hashed, so that every client names the same bucket whatever its
// pepper (wire.UnknownSource).
const UnknownSource = wire.UnknownSource

// SourceBucket returns the fairness bucket of a client address: an IPv4
// address (an IPv4-mapped IPv6 address counts as IPv4) is its own bucket;
// an IPv6 address shares its /64, in canonical form and without a zone;
// anything else — an empty or unparsable string, an address with a port,
// an unspecified address — is UnknownSource. An IPv4 address written with
// zero-padded octets ("010.0.0.1") is refused as ambiguous, so it is
// UnknownSource too. WithFairness hashes a known bucket with
// PurposeSource.
func SourceBucket(addr string) string {
	a, ok := sourceAddr(addr)
	if !ok {
		return UnknownSource
	}
	if a.Is4() {
		return a.String()
	}
	return netip.PrefixFrom(a, 64).Masked().String()
}

// SourceTiers returns the aggregate prefixes of a client address that
// admission charges beside its bucket, keyed by tier: for an IPv4 address
// its /24 (wire.TierV4Slash24); for an IPv6 address its /56 and /48
// (wire.TierV6Slash56, wire.TierV6Slash48); for an address in the unknown
// bucket, nil. WithFairness hashes each with PurposeSourceTier (see
// TierIdentity).
func SourceTiers(addr string) map[string]string {
	a, ok := sourceAddr(addr)
	if !ok {
		return nil
	}
	if a.Is4() {
		return map[string]string{wire.TierV4Slash24: netip.PrefixFrom(a, 24).Masked().String()}
	}
	return map[string]string{
		wire.TierV6Slash56: netip.PrefixFrom(a, 56).Masked().String(),
		wire.TierV6Slash48: netip.PrefixFrom(a, 48).Masked().String(),
	}
}

// TierIdentity returns the value hashed with PurposeSourceTier for one
// tier's prefix: the tier name, a zero byte and the prefix, so that equal
// prefixes of different tiers never share a hash.
func TierIdentity(tier, prefix string) string { return tier + "\x00" + prefix }

// sourceAddr parses addr as a fairness source: unmapped, without a zone,
// and never unspecified.
func sourceAddr(addr string) (netip.Addr, bool) {
	a, err := netip.ParseAddr(addr)
	if err != nil {
		return netip.Addr{}, false
	}
	a = a.Unmap().WithZone("")
	if a.IsUnspecified() {
		return netip.Addr{}, false
	}
	return a, true
}

// Identities are the fairness identities a view sends with every request
// (see Client.WithFairness), hashed as the server receives them.
type Identities struct {
	// Source is the hashed source bucket, or UnknownSource as it is.
	Source string
	// SourceTiers are the hashed aggregate prefixes of a known source,
	// keyed by tier; nil for the unknown bucket.
	SourceTiers map[string]string
	// Principal is the hashed principal, or empty.
	Principal string
}

// Identities returns the hashed fairness identities this view sends: all
// empty unless it was made by WithFairness. An operator names them to reset
// a quota (sluice control fairness-reset computes them the same way).
func (c *Client) Identities() Identities {
	return Identities{Source: c.source, SourceTiers: c.tiers, Principal: c.principal}
}

// identities hashes the fairness identities of source and principal.
func (s *shared) identities(source, principal string) Identities {
	var id Identities
	if bucket := SourceBucket(source); bucket == UnknownSource {
		id.Source = UnknownSource
	} else {
		id.Source = s.hash(PurposeSource, bucket)
		tiers := SourceTiers(source)
		id.SourceTiers = make(map[string]string, len(tiers))
		for tier, prefix := range tiers {
			id.SourceTiers[tier] = s.hash(PurposeSourceTier, TierIdentity(tier, prefix))
		}
	}
	if principal != "" {
		id.Principal = s.hash(PurposePrincipal, principal)
	}
	return id
}
