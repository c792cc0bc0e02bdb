package clientip

import (
	"net/netip"
	"strconv"
)

// Unknown is the bucket of every request whose client address is unknown:
// its socket peer is missing or does not parse, or the address resolved is
// unspecified (0.0.0.0, ::), which no real peer has. Such requests share
// it, so that together they draw one quota rather than none.
const Unknown = "unknown"

// Canonical returns the bucket of addr for an IPv6 prefix length:
//
//   - an IPv4 address, or an IPv4-mapped IPv6 address, is its own bucket in
//     dotted form ("192.0.2.1"), whatever ipv6Prefix is;
//   - an IPv6 address is its prefix of ipv6Prefix bits in canonical form
//     ("2001:db8:1:2::/64"), with its zone kept in the form of RFC 4007
//     ("fe80::%eth0/64");
//   - the zero Addr and an unspecified address (0.0.0.0, ::, or either
//     mapped or with a zone), which cannot be a client's, are Unknown.
//
// An ipv6Prefix outside 0…128 is clamped into it. Equal addresses give equal
// buckets however they were written. A bucket names exactly one IPv4
// address, or one IPv6 prefix within one zone, so different buckets never
// collide, and no other address falls into Unknown.
func Canonical(addr netip.Addr, ipv6Prefix int) string {
	// One allocation, for the result: the bucket is built in a buffer on
	// the stack (the longest, a zoned IPv6 prefix, fits unless its zone is
	// unusually long).
	var buf [64]byte
	return string(AppendCanonical(buf[:0], addr, ipv6Prefix))
}

// AppendCanonical appends the bucket of addr, as Canonical returns it, to
// dst and returns the extended buffer. It allocates only to grow dst.
func AppendCanonical(dst []byte, addr netip.Addr, ipv6Prefix int) []byte {
	// Unmapping first keeps every mapped IPv4 client in its own bucket
	// rather than masking it into an IPv6 prefix shared with others.
	addr = addr.Unmap()
	if !knowable(addr) {
		return append(dst, Unknown...)
	}
	if addr.Is4() {
		return addr.AppendTo(dst)
	}
	bits := min(max(ipv6Prefix, 0), 128)
	zone := addr.Zone()
	masked := netip.PrefixFrom(addr.WithZone(""), bits).Masked().Addr()
	// The zone is appended here rather than through WithZone, which would
	// intern it.
	dst = masked.AppendTo(dst)
	if zone != "" {
		dst = append(dst, '%')
		dst = append(dst, zone...)
	}
	dst = append(dst, '/')
	return strconv.AppendInt(dst, int64(bits), 10)
}

// knowable reports whether addr can be a client's address: valid and not
// unspecified, whatever its zone. client.SourceBucket draws the same line
// for the fairness buckets of the server's admission.
func knowable(addr netip.Addr) bool {
	return addr.IsValid() && !addr.WithZone("").Unmap().IsUnspecified()
}
