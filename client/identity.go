package client

import "net/netip"

// UnknownSource is the bucket shared by every caller whose source address
// is missing or does not parse, so that they share one fairness quota
// rather than bypass it.
const UnknownSource = "unknown"

// SourceBucket returns the fairness bucket of a client address: an IPv4
// address (an IPv4-mapped IPv6 address counts as IPv4) is its own bucket;
// an IPv6 address shares its /64; anything else is UnknownSource. The
// result is what WithFairness hashes with PurposeSource.
func SourceBucket(addr string) string {
	a, err := netip.ParseAddr(addr)
	if err != nil {
		return UnknownSource
	}
	a = a.Unmap()
	if a.Is4() {
		return a.String()
	}
	p, err := a.WithZone("").Prefix(64)
	if err != nil {
		return UnknownSource
	}
	return p.String()
}
