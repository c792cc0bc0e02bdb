package clientip_test

import (
	"net/netip"
	"testing"

	"github.com/sluicehq/sluice/clientip"
)

func TestCanonical(t *testing.T) {
	tests := []struct {
		addr   string
		prefix int
		want   string
	}{
		{"192.0.2.1", 64, "192.0.2.1"},
		{"192.0.2.1", 0, "192.0.2.1"},
		{"192.0.2.1", 128, "192.0.2.1"},
		{"::ffff:192.0.2.1", 64, "192.0.2.1"},
		{"::ffff:c000:201", 0, "192.0.2.1"},
		{"::FFFF:C000:0201", 128, "192.0.2.1"},
		{"::ffff:192.0.2.1%eth0", 64, "192.0.2.1"},
		{"2001:db8:1:2:3:4:5:6", 64, "2001:db8:1:2::/64"},
		{"2001:DB8:0001:0002:0003:0004:0005:0006", 64, "2001:db8:1:2::/64"},
		{"2001:db8:1:2:3:4:5:6", 0, "::/0"},
		{"2001:db8:1:2:3:4:5:6", 1, "::/1"},
		{"ffff::1", 1, "8000::/1"},
		{"2001:db8:1:2:3:4:5:6", 48, "2001:db8:1::/48"},
		{"2001:db8:1:2:3:4:5:6", 63, "2001:db8:1:2::/63"},
		{"2001:db8:1:3:3:4:5:6", 63, "2001:db8:1:2::/63"},
		{"2001:db8:1:2:3:4:5:6", 128, "2001:db8:1:2:3:4:5:6/128"},
		{"::1", 128, "::1/128"},
		{"::1", 64, "::/64"},
		{"::1", 0, "::/0"},
		// No client has an unspecified address, however it is written.
		{"0.0.0.0", 64, clientip.Unknown},
		{"::", 64, clientip.Unknown},
		{"::", 0, clientip.Unknown},
		{"::", 128, clientip.Unknown},
		{"::ffff:0.0.0.0", 64, clientip.Unknown},
		{"::%eth0", 64, clientip.Unknown},
		{"0.0.0.1", 64, "0.0.0.1"},
		{"::ffff:0:1", 64, "0.0.0.1"},
		{"fe80::1%eth0", 64, "fe80::%eth0/64"},
		{"fe80::1%eth1", 64, "fe80::%eth1/64"},
		{"fe80::1%eth0", 128, "fe80::1%eth0/128"},
		{"fe80::1%eth0", 0, "::%eth0/0"},
		{"fe80::1%a/b", 64, "fe80::%a/b/64"},
		// Out-of-range lengths are clamped.
		{"2001:db8:1:2:3:4:5:6", -1, "::/0"},
		{"2001:db8:1:2:3:4:5:6", 129, "2001:db8:1:2:3:4:5:6/128"},
		{"192.0.2.1", 1000, "192.0.2.1"},
	}
	for _, tt := range tests {
		if got := clientip.Canonical(netip.MustParseAddr(tt.addr), tt.prefix); got != tt.want {
			t.Errorf("Canonical(%s, %d) = %q, want %q", tt.addr, tt.prefix, got, tt.want)
		}
	}
}

func TestCanonicalZeroAddr(t *testing.T) {
	for _, prefix := range []int{0, 64, 128} {
		if got := clientip.Canonical(netip.Addr{}, prefix); got != clientip.Unknown {
			t.Errorf("Canonical(zero Addr, %d) = %q, want %q", prefix, got, clientip.Unknown)
		}
	}
}

// Canonical allocates only its result.
func TestCanonicalAllocs(t *testing.T) {
	for _, s := range []string{"192.0.2.1", "2001:db8:1:2:3:4:5:6", "fe80::1%eth0"} {
		addr := netip.MustParseAddr(s)
		if n := testing.AllocsPerRun(100, func() { clientip.Canonical(addr, 64) }); n > 1 {
			t.Errorf("Canonical(%s): %v allocations, want at most 1", s, n)
		}
	}
}

// Resolving a well-formed request allocates nothing, whichever path it
// takes. (A malformed one may: net/netip returns its parse errors as
// values.)
func TestAddrAllocs(t *testing.T) {
	r := newResolver(t, proxies, 64)
	for _, req := range []struct{ remote, xff string }{
		{"192.0.2.1:52100", ""},
		{"[2001:db8:1:2::5]:443", ""},
		{"10.0.0.1:4000", "198.51.100.1, 203.0.113.7:8080, [2001:db8:ffff::2]:443, 10.0.0.2"},
	} {
		request := request(req.remote, req.xff)
		if n := testing.AllocsPerRun(100, func() { r.Addr(request) }); n != 0 {
			t.Errorf("Addr(%q, XFF %q): %v allocations, want 0", req.remote, req.xff, n)
		}
	}
}
