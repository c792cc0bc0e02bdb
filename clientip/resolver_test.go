package clientip_test

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/clientip"
	"github.com/sluicehq/sluice/internal/logtest"
)

// proxies are the trusted networks of most cases below: the documentation
// ranges 192.0.2.0/24, 198.51.100.0/24, 203.0.113.0/24 and 2001:db8:1::/48
// play the clients.
var proxies = []string{"10.0.0.0/8", "2001:db8:ffff::/48"}

// newResolver returns a Resolver trusting the given networks (nil trusts
// nobody) with the given IPv6 prefix length.
func newResolver(t testing.TB, trusted []string, prefix int) *clientip.Resolver {
	t.Helper()
	cfg := clientip.DefaultConfig()
	cfg.IPv6Prefix = prefix
	if trusted != nil {
		trust, err := clientip.TrustCIDRs(trusted...)
		if err != nil {
			t.Fatal(err)
		}
		cfg.TrustProxy = trust
	}
	r, err := clientip.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// request returns a request from remote carrying the given X-Forwarded-For
// lines, in order.
func request(remote string, xff ...string) *http.Request {
	req := &http.Request{RemoteAddr: remote, Header: http.Header{}}
	if xff != nil {
		req.Header["X-Forwarded-For"] = xff
	}
	return req
}

// chain returns n comma-separated hops: the client first, then n−1 trusted
// proxies.
func chain(client string, n int) string {
	hops := []string{client}
	for i := 1; i < n; i++ {
		hops = append(hops, "10.0.0."+strconv.Itoa(i))
	}
	return strings.Join(hops, ", ")
}

// padded returns client followed by spaces up to n characters.
func padded(client string, n int) string {
	return client + strings.Repeat(" ", n-len(client))
}

func TestKeySocketPeer(t *testing.T) {
	tests := []struct {
		name, remote, want string
	}{
		{"IPv4 with port", "192.0.2.1:52100", "192.0.2.1"},
		{"bare IPv4", "192.0.2.1", "192.0.2.1"},
		{"IPv6 with port", "[2001:db8:1:2::5]:443", "2001:db8:1:2::/64"},
		{"bare IPv6", "2001:db8:1:2::5", "2001:db8:1:2::/64"},
		{"bracketed IPv6", "[2001:db8:1:2::5]", "2001:db8:1:2::/64"},
		{"IPv4-mapped with port", "[::ffff:192.0.2.1]:443", "192.0.2.1"},
		{"zone with port", "[fe80::1%eth0]:443", "fe80::%eth0/64"},
		{"empty", "", clientip.Unknown},
		{"host name", "localhost:80", clientip.Unknown},
		{"unix socket", "@", clientip.Unknown},
		{"empty port", "192.0.2.1:", clientip.Unknown},
		{"port out of range", "192.0.2.1:65536", clientip.Unknown},
		{"bracketed IPv4", "[192.0.2.1]:80", clientip.Unknown},
		{"bracketed IPv4 without port", "[192.0.2.1]", clientip.Unknown},
		{"empty brackets", "[]:80", clientip.Unknown},
		{"unclosed bracket", "[2001:db8::1", clientip.Unknown},
		{"unbracketed IPv6 with port is an address", "2001:db8:1:2::5:443", "2001:db8:1:2::/64"},
		{"zero-padded IPv4", "192.0.2.001:80", clientip.Unknown},
		{"spaces", " 192.0.2.1:80", clientip.Unknown},
		{"unspecified IPv4", "0.0.0.0:80", clientip.Unknown},
		{"unspecified IPv6", "[::]:443", clientip.Unknown},
		{"unspecified, bare", "::", clientip.Unknown},
		{"unspecified, mapped", "[::ffff:0.0.0.0]:443", clientip.Unknown},
		{"unspecified with a zone", "[::%eth0]:443", clientip.Unknown},
		{"loopback", "[::1]:443", "::/64"},
	}
	r := newResolver(t, nil, 64)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := r.Key(request(tt.remote)); got != tt.want {
				t.Errorf("Key(RemoteAddr %q) = %q, want %q", tt.remote, got, tt.want)
			}
		})
	}
}

// The header cannot move the key unless the socket peer is a trusted proxy.
func TestKeyIgnoresUntrustedHeader(t *testing.T) {
	tests := []struct {
		name    string
		trusted []string
		remote  string
		xff     []string
		want    string
	}{
		{"nobody trusted: spoofed header", nil, "203.0.113.9:4000", []string{"198.51.100.1"}, "203.0.113.9"},
		{"nobody trusted: proxy-looking peer", nil, "10.0.0.1:4000", []string{"198.51.100.1"}, "10.0.0.1"},
		{"untrusted socket: spoofed header", proxies, "203.0.113.9:4000", []string{"198.51.100.1"}, "203.0.113.9"},
		{"untrusted socket: header naming trusted hops", proxies, "203.0.113.9:4000", []string{"198.51.100.1, 10.0.0.2"}, "203.0.113.9"},
		{"untrusted socket: several lines", proxies, "203.0.113.9:4000", []string{"198.51.100.1", "10.0.0.2"}, "203.0.113.9"},
		{"untrusted IPv6 socket", proxies, "[2001:db8:1:2::9]:4000", []string{"198.51.100.1"}, "2001:db8:1:2::/64"},
		{"missing peer: header from anyone", []string{"0.0.0.0/0", "::/0"}, "", []string{"198.51.100.1"}, clientip.Unknown},
		{"unspecified peer: header from anyone", []string{"0.0.0.0/0", "::/0"}, "0.0.0.0:1", []string{"198.51.100.1"}, clientip.Unknown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newResolver(t, tt.trusted, 64)
			if got := r.Key(request(tt.remote, tt.xff...)); got != tt.want {
				t.Errorf("Key(%q, XFF %q) = %q, want %q", tt.remote, tt.xff, got, tt.want)
			}
		})
	}
}

// Through a trusted socket, the header is walked right to left while each
// hop is trusted.
func TestKeyTrustedWalk(t *testing.T) {
	const proxy = "10.0.0.1:4000"
	tests := []struct {
		name   string
		remote string
		xff    []string
		want   string
	}{
		{"one hop", proxy, []string{"203.0.113.7"}, "203.0.113.7"},
		{"spoofed leftmost value", proxy, []string{"198.51.100.66, 203.0.113.7"}, "203.0.113.7"},
		{"spoofed trusted-looking leftmost value", proxy, []string{"10.9.9.9, 203.0.113.7"}, "203.0.113.7"},
		{"through trusted hops", proxy, []string{"203.0.113.7, 10.0.0.3, 10.0.0.2"}, "203.0.113.7"},
		{"untrusted hop in the middle", proxy, []string{"198.51.100.1, 203.0.113.7, 10.0.0.2"}, "203.0.113.7"},
		{"every hop trusted: leftmost", proxy, []string{"10.0.0.9, 10.0.0.2"}, "10.0.0.9"},
		{"no header: the proxy", proxy, nil, "10.0.0.1"},
		{"empty header: the proxy", proxy, []string{""}, "10.0.0.1"},
		{"blank header: the proxy", proxy, []string{" \t "}, "10.0.0.1"},
		{"IPv6 proxy", "[2001:db8:ffff::1]:443", []string{"2001:db8:1:2::99"}, "2001:db8:1:2::/64"},
		{"IPv6 proxies, IPv4 client", "[2001:db8:ffff::1]:443", []string{"203.0.113.7, 2001:db8:ffff::2"}, "203.0.113.7"},
		{"IPv4-mapped proxy trusted by IPv4 range", "[::ffff:10.0.0.1]:443", []string{"203.0.113.7"}, "203.0.113.7"},
		{"IPv4-mapped trusted hop", proxy, []string{"203.0.113.7, ::ffff:10.0.0.2"}, "203.0.113.7"},
		{"bare proxy address", "10.0.0.1", []string{"203.0.113.7"}, "203.0.113.7"},
		{"unspecified client", proxy, []string{"0.0.0.0"}, clientip.Unknown},
		{"unspecified client through trusted hops", proxy, []string{"::, 10.0.0.2"}, clientip.Unknown},
		{"unspecified spoofed left of the client", proxy, []string{"0.0.0.0, 203.0.113.7"}, "203.0.113.7"},
	}
	r := newResolver(t, proxies, 64)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := r.Key(request(tt.remote, tt.xff...)); got != tt.want {
				t.Errorf("Key(%q, XFF %q) = %q, want %q", tt.remote, tt.xff, got, tt.want)
			}
		})
	}
}

// Each element may carry a port and optional whitespace; anything else
// malformed anywhere in the chain falls back to the socket peer.
func TestKeyHeaderElements(t *testing.T) {
	const proxy = "10.0.0.1:4000"
	tests := []struct {
		name string
		xff  string
		want string
	}{
		{"IPv4 with port", "203.0.113.7:8080", "203.0.113.7"},
		{"IPv6 with port", "[2001:db8:1:2::7]:443", "2001:db8:1:2::/64"},
		{"bracketed IPv6", "[2001:db8:1:2::7]", "2001:db8:1:2::/64"},
		{"trusted hop with port", "203.0.113.7, 10.0.0.2:8080", "203.0.113.7"},
		{"unbracketed IPv6 with port is an address", "2001:db8:1:2::7:443", "2001:db8:1:2::/64"},
		{"spaces and tabs", "  203.0.113.7\t,\t10.0.0.2  ", "203.0.113.7"},
		{"no spaces", "203.0.113.7,10.0.0.2", "203.0.113.7"},
		{"vertical tab is not whitespace", "\v203.0.113.7", "10.0.0.1"},
		{"no-break space is not whitespace", "203.0.113.7\u00a0", "10.0.0.1"},
		{"zone", "fe80::7%eth0", "fe80::%eth0/64"},

		{"unparsable nearest hop", "203.0.113.7, garbage", "10.0.0.1"},
		{"unparsable hop left of the client", "garbage, 203.0.113.7", "10.0.0.1"},
		{"host name", "client.example", "10.0.0.1"},
		{"unknown token", "unknown, 203.0.113.7", "10.0.0.1"},
		{"empty element in the middle", "198.51.100.1,,203.0.113.7", "10.0.0.1"},
		{"blank element", "198.51.100.1, \t ,203.0.113.7", "10.0.0.1"},
		{"trailing comma", "203.0.113.7,", "10.0.0.1"},
		{"leading comma", ", 203.0.113.7", "10.0.0.1"},
		{"only a comma", ",", "10.0.0.1"},
		{"zero-padded IPv4", "203.0.113.007", "10.0.0.1"},
		{"IPv4 with zone", "203.0.113.7%eth0", "10.0.0.1"},
		{"port out of range", "203.0.113.7:65536", "10.0.0.1"},
		{"empty port", "203.0.113.7:", "10.0.0.1"},
		{"bracketed IPv4", "[203.0.113.7]:80", "10.0.0.1"},
		{"bracketed IPv4 without port", "[203.0.113.7]", "10.0.0.1"},
		{"bracketed IPv4-mapped is IPv6", "[::ffff:203.0.113.7]", "203.0.113.7"},
		{"empty brackets", "[]", "10.0.0.1"},
		{"unclosed bracket", "[2001:db8:1:2::7", "10.0.0.1"},
		{"RFC 7239 syntax", "for=203.0.113.7", "10.0.0.1"},
		{"quoted", `"203.0.113.7"`, "10.0.0.1"},
		{"CIDR", "203.0.113.0/24", "10.0.0.1"},
		{"space inside", "203.0.113.7 198.51.100.1", "10.0.0.1"},
		{"over-long field", "2001:0db8:00001::7", "10.0.0.1"},
	}
	r := newResolver(t, proxies, 64)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := r.Key(request(proxy, tt.xff)); got != tt.want {
				t.Errorf("Key(XFF %q) = %q, want %q", tt.xff, got, tt.want)
			}
		})
	}
}

// Several header lines are one list joined in order with ", ": the last
// line holds the nearest hop, and the bounds apply to the joined value.
func TestKeySeveralLines(t *testing.T) {
	const proxy = "10.0.0.1:4000"
	// first+second lines joined with ", " are exactly MaxHeaderLen long.
	first := padded("203.0.113.7", 4000)
	second := padded("10.0.0.2", clientip.MaxHeaderLen-len(first)-len(", "))
	tests := []struct {
		name string
		xff  []string
		want string
	}{
		{"client then proxy", []string{"203.0.113.7", "10.0.0.2"}, "203.0.113.7"},
		{"last line is nearest", []string{"203.0.113.7", "198.51.100.9"}, "198.51.100.9"},
		{"spoof in the first line", []string{"198.51.100.1, 203.0.113.7", "10.0.0.2"}, "203.0.113.7"},
		{"three lines", []string{"198.51.100.1", "203.0.113.7", "10.0.0.3, 10.0.0.2"}, "203.0.113.7"},
		{"every hop trusted: leftmost line", []string{"10.0.0.9", "10.0.0.2"}, "10.0.0.9"},
		{"empty line is an empty element", []string{"203.0.113.7", ""}, "10.0.0.1"},
		{"malformed line", []string{"203.0.113.7", "garbage"}, "10.0.0.1"},
		{"all lines empty", []string{"", ""}, "10.0.0.1"},
		{"32 hops over two lines", []string{chain("203.0.113.7", 16), chain("10.0.0.100", 16)}, "203.0.113.7"},
		{"33 hops over two lines", []string{chain("203.0.113.7", 17), chain("10.0.0.100", 16)}, "10.0.0.1"},
		{"joined length at the bound", []string{first, second}, "203.0.113.7"},
		{"joined length over the bound", []string{first, second + " "}, "10.0.0.1"},
		{"lines under the bound, separators over it", []string{first, padded("10.0.0.2", clientip.MaxHeaderLen-len(first)-1)}, "10.0.0.1"},
	}
	r := newResolver(t, proxies, 64)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := r.Key(request(proxy, tt.xff...)); got != tt.want {
				t.Errorf("Key(XFF %q) = %q, want %q", tt.xff, got, tt.want)
			}
		})
	}
}

func TestKeyBounds(t *testing.T) {
	const proxy = "10.0.0.1:4000"
	tests := []struct {
		name string
		xff  string
		want string
	}{
		{"32 hops", chain("203.0.113.7", clientip.MaxHops), "203.0.113.7"},
		{"33 hops", chain("203.0.113.7", clientip.MaxHops+1), "10.0.0.1"},
		{"33 hops, client near", "198.51.100.1, " + chain("203.0.113.7", clientip.MaxHops), "10.0.0.1"},
		{"8,192 characters", padded("203.0.113.7", clientip.MaxHeaderLen), "203.0.113.7"},
		{"8,193 characters", padded("203.0.113.7", clientip.MaxHeaderLen+1), "10.0.0.1"},
		{"1 MiB", padded("203.0.113.7", 1<<20), "10.0.0.1"},
	}
	r := newResolver(t, proxies, 64)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := r.Key(request(proxy, tt.xff)); got != tt.want {
				t.Errorf("Key(XFF of %d characters) = %q, want %q", len(tt.xff), got, tt.want)
			}
		})
	}
}

// Equal addresses share a bucket however they are written and whichever
// way they arrive; IPv4 clients never share one.
func TestKeyCanonicalisation(t *testing.T) {
	tests := []struct {
		name   string
		prefix int
		addr   string
		want   string
	}{
		{"IPv4", 64, "192.0.2.1", "192.0.2.1"},
		{"IPv4-mapped, dotted", 64, "::ffff:192.0.2.1", "192.0.2.1"},
		{"IPv4-mapped, hex", 64, "::ffff:c000:201", "192.0.2.1"},
		{"IPv4-mapped, uppercase and padded", 64, "0:0:0:0:0:FFFF:C000:0201", "192.0.2.1"},
		{"IPv4-mapped with zone", 64, "::ffff:192.0.2.1%eth0", "192.0.2.1"},
		{"IPv4-compatible is IPv6", 64, "::192.0.2.1", "::/64"},
		{"NAT64 is IPv6", 64, "64:ff9b::192.0.2.1", "64:ff9b::/64"},
		{"IPv6", 64, "2001:db8:1:2::abcd", "2001:db8:1:2::/64"},
		{"IPv6 uppercase", 64, "2001:DB8:1:2::ABCD", "2001:db8:1:2::/64"},
		{"IPv6 zero-padded", 64, "2001:0db8:0001:0002:0000:0000:0000:abcd", "2001:db8:1:2::/64"},
		{"IPv6 rotated interface id", 64, "2001:db8:1:2:dead:beef:1:2", "2001:db8:1:2::/64"},
		{"IPv6 next /64", 64, "2001:db8:1:3::abcd", "2001:db8:1:3::/64"},
		{"zone eth0", 64, "fe80::1%eth0", "fe80::%eth0/64"},
		{"zone eth1", 64, "fe80::1%eth1", "fe80::%eth1/64"},
		{"zone case kept", 64, "fe80::1%ETH0", "fe80::%ETH0/64"},
		{"no zone", 64, "fe80::1", "fe80::/64"},
		{"/0", 0, "2001:db8:1:2::abcd", "::/0"},
		{"/0 keeps zones", 0, "fe80::1%eth0", "::%eth0/0"},
		{"/0 leaves IPv4 alone", 0, "192.0.2.1", "192.0.2.1"},
		{"/0 leaves IPv4-mapped alone", 0, "::ffff:192.0.2.2", "192.0.2.2"},
		{"/48", 48, "2001:db8:1:2::abcd", "2001:db8:1::/48"},
		{"/56", 56, "2001:db8:1:2ff::abcd", "2001:db8:1:200::/56"},
		{"/127", 127, "2001:db8::3", "2001:db8::2/127"},
		{"/128", 128, "2001:db8::1", "2001:db8::1/128"},
		{"/128 uppercase", 128, "2001:DB8::0001", "2001:db8::1/128"},
		{"/128 leaves IPv4 alone", 128, "::ffff:192.0.2.1", "192.0.2.1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			direct := newResolver(t, nil, tt.prefix)
			if got := direct.Key(request(bracketPort(tt.addr))); got != tt.want {
				t.Errorf("socket %q: Key = %q, want %q", bracketPort(tt.addr), got, tt.want)
			}
			if got := direct.Key(request(tt.addr)); got != tt.want {
				t.Errorf("bare socket %q: Key = %q, want %q", tt.addr, got, tt.want)
			}
			proxied := newResolver(t, proxies, tt.prefix)
			if got := proxied.Key(request("10.0.0.1:4000", tt.addr)); got != tt.want {
				t.Errorf("XFF %q: Key = %q, want %q", tt.addr, got, tt.want)
			}
			if got := proxied.Key(request("10.0.0.1:4000", bracketPort(tt.addr))); got != tt.want {
				t.Errorf("XFF %q: Key = %q, want %q", bracketPort(tt.addr), got, tt.want)
			}
		})
	}
}

// bracketPort writes addr with a port, as a listener would.
func bracketPort(addr string) string {
	if strings.Contains(addr, ":") {
		return "[" + addr + "]:443"
	}
	return addr + ":443"
}

// No two distinct IPv4 clients share a bucket under any prefix length,
// whether written natively or mapped.
func TestKeyIPv4NeverShares(t *testing.T) {
	for _, prefix := range []int{0, 1, 32, 64, 96, 104, 127, 128} {
		r := newResolver(t, nil, prefix)
		seen := map[string]string{}
		for _, remote := range []string{
			"192.0.2.1", "192.0.2.2", "[::ffff:192.0.2.3]:1", "[::ffff:c000:204]:1", "0.0.0.0", "255.255.255.255", "[::ffff:0:1]:1",
		} {
			key := r.Key(request(remote))
			if other, ok := seen[key]; ok {
				t.Errorf("/%d: %q and %q share bucket %q", prefix, other, remote, key)
			}
			seen[key] = remote
		}
	}
}

func TestAddr(t *testing.T) {
	tests := []struct {
		name    string
		trusted []string
		remote  string
		xff     []string
		want    netip.Addr
		wantOK  bool
	}{
		{"port removed", nil, "192.0.2.1:80", nil, netip.MustParseAddr("192.0.2.1"), true},
		{"not masked", nil, "[2001:db8:1:2::5]:443", nil, netip.MustParseAddr("2001:db8:1:2::5"), true},
		{"unmapped", nil, "[::ffff:192.0.2.1]:443", nil, netip.MustParseAddr("192.0.2.1"), true},
		{"unmapped, bare", nil, "::ffff:192.0.2.1", nil, netip.MustParseAddr("192.0.2.1"), true},
		{"unmapped, bracketed", nil, "[::ffff:192.0.2.1]", nil, netip.MustParseAddr("192.0.2.1"), true},
		{"zone kept", nil, "[fe80::1%eth0]:443", nil, netip.MustParseAddr("fe80::1%eth0"), true},
		{"from the header", proxies, "10.0.0.1:80", []string{"[::ffff:203.0.113.7]:1"}, netip.MustParseAddr("203.0.113.7"), true},
		{"missing", nil, "", nil, netip.Addr{}, false},
		{"missing, trusting all", []string{"0.0.0.0/0"}, "garbage", []string{"203.0.113.7"}, netip.Addr{}, false},
		{"unspecified", nil, "0.0.0.0:80", nil, netip.Addr{}, false},
		{"unspecified, from the header", proxies, "10.0.0.1:80", []string{"[::]:1"}, netip.Addr{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newResolver(t, tt.trusted, 64)
			got, ok := r.Addr(request(tt.remote, tt.xff...))
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("Addr = %v, %v; want %v, %v", got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

// TrustProxy sees each hop it is asked about in the documented form, and
// is never asked about the header unless the socket is trusted.
func TestTrustProxyCalls(t *testing.T) {
	tests := []struct {
		name   string
		remote string
		xff    []string
		trust  []string // the hops to trust, in the form TrustProxy sees
		want   []string // the calls, in order
	}{
		{"untrusted socket", "203.0.113.9:1", []string{"10.0.0.2"}, nil, []string{"203.0.113.9"}},
		{"walk stops at the first untrusted hop", "10.0.0.1:1", []string{"198.51.100.1, 203.0.113.7, 10.0.0.2"},
			[]string{"10.0.0.1", "10.0.0.2"}, []string{"10.0.0.1", "10.0.0.2", "203.0.113.7"}},
		{"leftmost needs no decision", "10.0.0.1:1", []string{"10.0.0.3, 10.0.0.2"},
			[]string{"10.0.0.1", "10.0.0.2", "10.0.0.3"}, []string{"10.0.0.1", "10.0.0.2"}},
		{"unmapped, zone kept, port removed", "[::ffff:10.0.0.1]:1", []string{"[fe80::1%eth0]:80"},
			[]string{"10.0.0.1"}, []string{"10.0.0.1"}},
		{"malformed chain asks nothing more", "10.0.0.1:1", []string{"203.0.113.7, garbage"},
			[]string{"10.0.0.1"}, []string{"10.0.0.1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var calls []string
			cfg := clientip.DefaultConfig()
			cfg.TrustProxy = func(a netip.Addr) bool {
				calls = append(calls, a.String())
				for _, s := range tt.trust {
					if a.String() == s {
						return true
					}
				}
				return false
			}
			r, err := clientip.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			r.Key(request(tt.remote, tt.xff...))
			if strings.Join(calls, " ") != strings.Join(tt.want, " ") {
				t.Errorf("TrustProxy calls = %q, want %q", calls, tt.want)
			}
		})
	}
}

func TestHeaderName(t *testing.T) {
	tests := []struct {
		name, header, sent, want string
	}{
		{"default", clientip.DefaultHeader, "X-Forwarded-For", "203.0.113.7"},
		{"lowercase name", "x-forwarded-for", "X-Forwarded-For", "203.0.113.7"},
		{"X-Real-IP", "X-Real-IP", "X-Real-Ip", "203.0.113.7"},
		{"another header is not read", "X-Real-IP", "X-Forwarded-For", "10.0.0.1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := clientip.DefaultConfig()
			cfg.Header = tt.header
			cfg.TrustProxy, _ = clientip.TrustCIDRs(proxies...)
			r, err := clientip.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			req := &http.Request{RemoteAddr: "10.0.0.1:80", Header: http.Header{}}
			req.Header.Set(tt.sent, "203.0.113.7")
			if got := r.Key(req); got != tt.want {
				t.Errorf("Key = %q, want %q", got, tt.want)
			}
		})
	}
}

// A missing peer is warned about once per Resolver, however many requests
// and goroutines meet it, and never by requests that have a peer.
func TestMissingPeerWarnsOnce(t *testing.T) {
	tests := []struct {
		name    string
		remotes []string
		want    int
	}{
		{"peers present", []string{"192.0.2.1:80", "[2001:db8::1]:443", "192.0.2.2"}, 0},
		{"one missing", []string{"192.0.2.1:80", "", "192.0.2.2:80"}, 1},
		{"many missing", []string{"", "@", "garbage", "", "192.0.2.1:80", "x:y"}, 1},
		{"unspecified", []string{"192.0.2.1:80", "0.0.0.0:80", "[::]:443"}, 1},
		{"missing and unspecified", []string{"", "0.0.0.0:80", "garbage"}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := &logtest.Recorder{}
			cfg := clientip.DefaultConfig()
			cfg.Logger = slog.New(h)
			r, err := clientip.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			for range 8 {
				for _, remote := range tt.remotes {
					wg.Go(func() { r.Key(request(remote)) })
				}
			}
			wg.Wait()
			if got := h.Len(); got != tt.want {
				t.Fatalf("%d warnings, want %d", got, tt.want)
			}
			for _, rec := range h.Records() {
				if rec.Level != slog.LevelWarn {
					t.Errorf("level %v, want %v", rec.Level, slog.LevelWarn)
				}
			}
		})
	}
}

// Each Resolver warns once of its own; the warning names no raw value.
func TestMissingPeerWarningPerResolver(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&buf, nil))
	cfg := clientip.DefaultConfig()
	cfg.Logger = logger
	a, _ := clientip.New(cfg)
	b, _ := clientip.New(cfg)
	for range 3 {
		a.Key(request("secret-peer-value"))
		b.Key(request("secret-peer-value"))
	}
	if n := strings.Count(buf.String(), "level=WARN"); n != 2 {
		t.Errorf("%d warnings from two resolvers, want 2:\n%s", n, buf.String())
	}
	if strings.Contains(buf.String(), "secret-peer-value") {
		t.Errorf("the warning logs the raw RemoteAddr:\n%s", buf.String())
	}
	if !strings.Contains(buf.String(), "bucket="+clientip.Unknown) {
		t.Errorf("the warning does not name the bucket:\n%s", buf.String())
	}
}

// A nil Logger discards the warning without failing.
func TestMissingPeerNilLogger(t *testing.T) {
	r := newResolver(t, nil, 64)
	if got := r.Key(request("")); got != clientip.Unknown {
		t.Errorf("Key = %q, want %q", got, clientip.Unknown)
	}
}

// An unspecified client forwarded by a trusted proxy is unknown too, and
// warned about once, like a missing peer.
func TestUnspecifiedForwardedClientWarnsOnce(t *testing.T) {
	h := &logtest.Recorder{}
	cfg := clientip.DefaultConfig()
	cfg.Logger = slog.New(h)
	trust, err := clientip.TrustCIDRs(proxies...)
	if err != nil {
		t.Fatal(err)
	}
	cfg.TrustProxy = trust
	r, err := clientip.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if got := r.Key(request("10.0.0.1:4000", "0.0.0.0")); got != clientip.Unknown {
			t.Fatalf("Key = %q, want %q", got, clientip.Unknown)
		}
		if got := r.Key(request("10.0.0.1:4000", "203.0.113.7")); got != "203.0.113.7" {
			t.Fatalf("Key = %q, want 203.0.113.7", got)
		}
	}
	if got := h.Len(); got != 1 {
		t.Fatalf("%d warnings, want 1", got)
	}
}
