package clientip_test

import (
	"fmt"
	"log"
	"net/http/httptest"
	"net/netip"

	"github.com/sluicehq/sluice/clientip"
)

// By default the client is the socket peer, and a forwarding header sent by
// the client itself changes nothing.
func Example() {
	r, err := clientip.New(clientip.DefaultConfig())
	if err != nil {
		log.Fatal(err)
	}
	req := httptest.NewRequest("GET", "/device/start", nil)
	req.RemoteAddr = "203.0.113.7:52100"
	req.Header.Set("X-Forwarded-For", "198.51.100.1") // spoofed: nobody is trusted

	fmt.Println(r.Key(req))

	req.RemoteAddr = "" // a host that does not pass the peer on
	fmt.Println(r.Key(req))
	// Output:
	// 203.0.113.7
	// unknown
}

// Behind load balancers, trust their networks: the header is walked from
// the nearest hop and stops at the first address they did not write.
func ExampleTrustCIDRs() {
	trust, err := clientip.TrustCIDRs("10.0.0.0/8", "2001:db8:ffff::/48")
	if err != nil {
		log.Fatal(err)
	}
	cfg := clientip.DefaultConfig()
	cfg.TrustProxy = trust
	r, err := clientip.New(cfg)
	if err != nil {
		log.Fatal(err)
	}

	// The client sent "X-Forwarded-For: 198.51.100.1" hoping for a fresh
	// quota; the edge proxy appended the client's real address and the
	// inner proxy its own.
	req := httptest.NewRequest("GET", "/device/start", nil)
	req.RemoteAddr = "10.0.0.2:4000"
	req.Header.Set("X-Forwarded-For", "198.51.100.1, 203.0.113.7, 10.0.0.9")
	fmt.Println(r.Key(req))

	// The same header from a client that reaches the service directly is
	// not read at all.
	req.RemoteAddr = "203.0.113.8:5000"
	fmt.Println(r.Key(req))
	// Output:
	// 203.0.113.7
	// 203.0.113.8
}

// IPv6 clients are grouped by their /64, so a host rotating its interface
// id keeps its bucket; IPv4 clients, however written, are never grouped.
func Example_ipv6Grouping() {
	for _, prefix := range []int{64, 128} {
		cfg := clientip.DefaultConfig()
		cfg.IPv6Prefix = prefix
		r, err := clientip.New(cfg)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("/%d:\n", prefix)
		for _, remote := range []string{
			"[2001:db8:1:2::a]:443",
			"[2001:DB8:1:2:9f3c:77e1:4a0:1]:443",
			"[::ffff:192.0.2.1]:443",
		} {
			req := httptest.NewRequest("GET", "/", nil)
			req.RemoteAddr = remote
			fmt.Printf("  %-36s %s\n", remote, r.Key(req))
		}
	}
	// Output:
	// /64:
	//   [2001:db8:1:2::a]:443                2001:db8:1:2::/64
	//   [2001:DB8:1:2:9f3c:77e1:4a0:1]:443   2001:db8:1:2::/64
	//   [::ffff:192.0.2.1]:443               192.0.2.1
	// /128:
	//   [2001:db8:1:2::a]:443                2001:db8:1:2::a/128
	//   [2001:DB8:1:2:9f3c:77e1:4a0:1]:443   2001:db8:1:2:9f3c:77e1:4a0:1/128
	//   [::ffff:192.0.2.1]:443               192.0.2.1
}

func ExampleCanonical() {
	for _, s := range []string{
		"192.0.2.1",
		"::ffff:c000:201", // IPv4-mapped: the bucket of 192.0.2.1
		"2001:0DB8:0000:0000:0000:0000:0000:0001",
		"fe80::1%eth0", // scopes stay apart
		"fe80::1%eth1",
	} {
		fmt.Println(clientip.Canonical(netip.MustParseAddr(s), 64))
	}
	fmt.Println(clientip.Canonical(netip.Addr{}, 64))
	// Output:
	// 192.0.2.1
	// 192.0.2.1
	// 2001:db8::/64
	// fe80::%eth0/64
	// fe80::%eth1/64
	// unknown
}
