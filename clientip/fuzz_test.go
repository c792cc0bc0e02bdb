package clientip_test

import (
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/clientip"
)

// refCanonical is the straightforward reading of the bucket rules, built
// on other net/netip calls than Canonical's.
func refCanonical(a netip.Addr, bits int) string {
	if !a.IsValid() || unspecified(a) {
		return clientip.Unknown
	}
	if a.Is4In6() {
		a = netip.AddrFrom4(a.As4())
	}
	if a.Is4() {
		return a.String()
	}
	bits = min(max(bits, 0), 128)
	p, err := a.Prefix(bits) // drops the zone
	if err != nil {
		panic(err)
	}
	s := p.Addr().String()
	if z := a.Zone(); z != "" {
		s += "%" + z
	}
	return s + "/" + strconv.Itoa(bits)
}

// unspecified reports whether a is 0.0.0.0 or ::, whatever its zone and
// however it is written: every byte of the address it carries is zero, as
// no peer's is.
func unspecified(a netip.Addr) bool {
	b := a.AsSlice()
	if a.Is4In6() {
		b = b[12:]
	}
	for _, x := range b {
		if x != 0 {
			return false
		}
	}
	return a.IsValid()
}

// checkKey fails t unless key is a well-formed bucket of addr for bits:
// Unknown for an unspecified address, else the dotted address of an IPv4
// client, or a masked canonical IPv6 prefix that holds addr and keeps its
// zone.
func checkKey(t *testing.T, key string, addr netip.Addr, bits int) {
	t.Helper()
	if unspecified(addr) != (key == clientip.Unknown) {
		t.Fatalf("key %q of %v: only an unspecified address is unknown", key, addr)
	}
	if key == clientip.Unknown {
		return
	}
	addr = addr.Unmap()
	if addr.Is4() {
		if k, err := netip.ParseAddr(key); err != nil || k != addr || k.String() != key {
			t.Fatalf("key %q of IPv4 %v is not its dotted form", key, addr)
		}
		return
	}
	slash := strings.LastIndexByte(key, '/')
	if slash < 0 || key[slash+1:] != strconv.Itoa(min(max(bits, 0), 128)) {
		t.Fatalf("key %q of %v does not end in its prefix length /%d", key, addr, bits)
	}
	k, err := netip.ParseAddr(key[:slash])
	if err != nil || k.String() != key[:slash] || !k.Is6() || k.Is4In6() {
		t.Fatalf("key %q of %v is not a canonical IPv6 prefix", key, addr)
	}
	if k.Zone() != addr.Zone() {
		t.Fatalf("key %q of %v lost its zone", key, addr)
	}
	p := netip.PrefixFrom(k.WithZone(""), min(max(bits, 0), 128))
	if p.Masked() != p || !p.Contains(addr.WithZone("")) {
		t.Fatalf("key %q is not a masked prefix holding %v", key, addr)
	}
	// The prefix's first address names the same bucket, unless it is the
	// unspecified address (::/64 holds ::1, but :: is no client's).
	if again := clientip.Canonical(k, bits); again != key && !unspecified(k) {
		t.Fatalf("Canonical(%v) = %q, but its key %q gives %q", addr, key, k, again)
	}
}

// fuzzBits maps a fuzzed byte to a prefix length, mostly inside 0…128
// and sometimes a little outside it.
func fuzzBits(b uint8) int { return int(b)%140 - 5 }

func FuzzCanonical(f *testing.F) {
	for _, s := range []string{
		"192.0.2.1", "0.0.0.0", "255.255.255.255", "::ffff:192.0.2.1", "::ffff:c000:201",
		"::FFFF:C000:0201", "::ffff:192.0.2.1%eth0", "::192.0.2.1", "64:ff9b::192.0.2.1",
		"2001:db8:1:2:3:4:5:6", "2001:0DB8:0001:0002:0000:0000:0000:ABCD", "::", "::1",
		"fe80::1%eth0", "fe80::1%ETH0", "fe80::1%a/b", "fe80::1%a%b", "ff02::1%1",
		"010.0.0.1", "1.2.3.4%x", "2001:db8::/64", "", "::ffff:255.0.0.0", "::ffff:0.0.0.0%x",
	} {
		for _, bits := range []uint8{5, 5 + 64, 5 + 128, 0, 139} {
			f.Add(s, bits)
		}
	}
	f.Fuzz(func(t *testing.T, s string, b uint8) {
		bits := fuzzBits(b)
		addr, err := netip.ParseAddr(s)
		if err != nil {
			return
		}
		got := clientip.Canonical(addr, bits)
		if want := refCanonical(addr, bits); got != want {
			t.Fatalf("Canonical(%q, %d) = %q, reference %q", s, bits, got, want)
		}
		checkKey(t, got, addr, bits)
		if app := clientip.AppendCanonical([]byte("x:"), addr, bits); string(app) != "x:"+got {
			t.Fatalf("AppendCanonical(x:, %q, %d) = %q, Canonical %q", s, bits, app, got)
		}
		// Spelling never matters: the uppercase form is the same address,
		// except for a zone, which is case-sensitive.
		if addr.Zone() == "" {
			upper, err := netip.ParseAddr(strings.ToUpper(s))
			if err != nil {
				t.Fatalf("netip accepts %q but not %q", s, strings.ToUpper(s))
			}
			if again := clientip.Canonical(upper, bits); again != got {
				t.Fatalf("Canonical(%q) = %q but Canonical(%q) = %q", s, got, strings.ToUpper(s), again)
			}
		}
	})
}

// refHop is the straightforward reading of one hop: an address, a
// bracketed IPv6 address, or either with a port.
func refHop(s string) (netip.Addr, bool) {
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap(), true
	}
	if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
		if a, err := netip.ParseAddr(s[1 : len(s)-1]); err == nil && a.Is6() {
			return a.Unmap(), true
		}
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap(), true
	}
	return netip.Addr{}, false
}

// refResolve is the straightforward reading of the resolution rules: join
// the lines, check the bounds, split, parse every element, walk.
func refResolve(remote string, lines []string, trust func(netip.Addr) bool, bits int) string {
	peer, ok := refHop(remote)
	if !ok || unspecified(peer) {
		return clientip.Unknown
	}
	socket := refCanonical(peer, bits)
	if trust == nil || !trust(peer) || lines == nil {
		return socket
	}
	joined := strings.Join(lines, ", ")
	if len(joined) > clientip.MaxHeaderLen || strings.Trim(joined, " \t") == "" {
		return socket
	}
	elems := strings.Split(joined, ",")
	if len(elems) > clientip.MaxHops {
		return socket
	}
	hops := make([]netip.Addr, len(elems))
	for i, e := range elems {
		if hops[i], ok = refHop(strings.Trim(e, " \t")); !ok {
			return socket
		}
	}
	for i := len(hops) - 1; i >= 0; i-- {
		if !trust(hops[i]) {
			return refCanonical(hops[i], bits)
		}
	}
	return refCanonical(hops[0], bits)
}

// fuzzTrust returns one of four trust policies.
func fuzzTrust(t *testing.T, mode uint8) func(netip.Addr) bool {
	switch mode % 4 {
	case 0:
		return nil
	case 1:
		trust, err := clientip.TrustCIDRs("10.0.0.0/8", "192.0.2.0/24", "2001:db8::/32", "fe80::/10")
		if err != nil {
			t.Fatal(err)
		}
		return trust
	case 2:
		return func(netip.Addr) bool { return true }
	default: // trust by the parity of the last byte
		return func(a netip.Addr) bool {
			b := a.AsSlice()
			return len(b) > 0 && b[len(b)-1]%2 == 0
		}
	}
}

func FuzzResolve(f *testing.F) {
	seeds := []struct {
		remote, header string
	}{
		{"192.0.2.1:52100", ""},
		{"10.0.0.1:4000", "198.51.100.66, 203.0.113.7"},
		{"10.0.0.1:4000", "203.0.113.7:8080, [2001:db8:1:2::7]:443, 10.0.0.2"},
		{"[::ffff:10.0.0.1]:443", "::ffff:c000:201\n10.0.0.2"},
		{"[fe80::1%eth0]:443", "fe80::2%eth1, [2001:DB8:0001::0001]"},
		{"10.0.0.1", "203.0.113.7,,10.0.0.2"},
		{"10.0.0.1", " \t "},
		{"10.0.0.1", "203.0.113.7\n"},
		{"10.0.0.1", "garbage, 203.0.113.7"},
		{"10.0.0.1", chain("203.0.113.7", clientip.MaxHops)},
		{"10.0.0.1", chain("203.0.113.7", clientip.MaxHops+1)},
		{"10.0.0.1", padded("203.0.113.7", clientip.MaxHeaderLen)},
		{"", "203.0.113.7"},
		{"@", ""},
		{"[2001:db8::1]", "[203.0.113.7]:80"},
		{"0.0.0.0:80", ""},
		{"[::]:443", "203.0.113.7"},
		{"10.0.0.1:4000", "0.0.0.0"},
		{"10.0.0.1:4000", "::, 10.0.0.2"},
		{"10.0.0.1:4000", "[::ffff:0.0.0.0]:1, 203.0.113.7"},
		{"[::ffff:255.0.0.0]:1", ""},
	}
	for _, s := range seeds {
		for mode := range uint8(4) {
			f.Add(s.remote, s.header, mode, uint8(5+64))
		}
	}
	f.Fuzz(func(t *testing.T, remote, header string, mode, b uint8) {
		bits := fuzzBits(b)
		if bits < 0 || bits > 128 {
			bits = 64
		}
		var lines []string
		if header != "" {
			lines = strings.Split(header, "\n") // a value cannot hold a line break
		}
		trust := fuzzTrust(t, mode)
		cfg := clientip.DefaultConfig()
		cfg.TrustProxy = trust
		cfg.IPv6Prefix = bits
		r, err := clientip.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		req := &http.Request{RemoteAddr: remote, Header: http.Header{"X-Forwarded-For": lines}}

		got := r.Key(req)
		if want := refResolve(remote, lines, trust, bits); got != want {
			t.Fatalf("Key(%q, XFF %q) = %q, reference %q", remote, lines, got, want)
		}
		if app := r.AppendKey([]byte("x:"), req); string(app) != "x:"+got {
			t.Fatalf("AppendKey(x:, %q, XFF %q) = %q, Key %q", remote, lines, app, got)
		}
		// The key is Unknown exactly when the client is: the socket is
		// missing, malformed or unspecified, or the client the walk reached
		// is unspecified.
		addr, ok := r.Addr(req)
		if !ok {
			if got != clientip.Unknown || addr.IsValid() {
				t.Fatalf("Addr = %v, false but Key = %q", addr, got)
			}
			if peer, ok := refHop(remote); ok && !unspecified(peer) && !inHeaderUnspecified(lines) {
				t.Fatalf("Key(%q, XFF %q) = unknown, yet the socket and every hop are usable", remote, lines)
			}
			return
		}
		if got == clientip.Unknown {
			t.Fatalf("Addr = %v, true but Key = %q", addr, got)
		}
		if got != clientip.Canonical(addr, bits) {
			t.Fatalf("Key = %q but Addr = %v, whose bucket is %q", got, addr, clientip.Canonical(addr, bits))
		}
		checkKey(t, got, addr, bits)

		// The key is the socket's, or that of an address in the header.
		peer, _ := refHop(remote)
		socket := clientip.Canonical(peer, bits)
		if trust == nil && got != socket {
			t.Fatalf("nobody trusted, yet Key = %q, not the socket's %q", got, socket)
		}
		if got != socket && !inHeader(addr, lines) {
			t.Fatalf("Key %q is neither the socket's %q nor from XFF %q", got, socket, lines)
		}
	})
}

// inHeaderUnspecified reports whether an unspecified address is one of the
// hops written in lines.
func inHeaderUnspecified(lines []string) bool {
	for _, line := range lines {
		for e := range strings.SplitSeq(line, ",") {
			if a, ok := refHop(strings.Trim(e, " \t")); ok && unspecified(a) {
				return true
			}
		}
	}
	return false
}

// inHeader reports whether addr is one of the hops written in lines.
func inHeader(addr netip.Addr, lines []string) bool {
	for _, line := range lines {
		for e := range strings.SplitSeq(line, ",") {
			if a, ok := refHop(strings.Trim(e, " \t")); ok && a == addr {
				return true
			}
		}
	}
	return false
}
