package clientip_test

// The cost of resolving a request's bucket, on each path. Run with
//
//	go test -run '^$' -bench . -benchmem ./clientip/
//
// Addr allocates nothing on these paths; Key allocates only its result.

import (
	"net/http"
	"net/netip"
	"testing"

	"github.com/sluicehq/sluice/clientip"
)

var benchRequests = []struct {
	name    string
	trusted []string
	remote  string
	xff     string
}{
	{"socket-ipv4", nil, "192.0.2.1:52100", ""},
	{"socket-ipv6", nil, "[2001:db8:1:2::5]:443", ""},
	{"trusted-1-hop", proxies, "10.0.0.1:4000", "203.0.113.7"},
	{"trusted-4-hops", proxies, "10.0.0.1:4000", "198.51.100.1, 203.0.113.7:8080, [2001:db8:ffff::2]:443, 10.0.0.2"},
	{"trusted-32-hops", proxies, "10.0.0.1:4000", chain("203.0.113.7", clientip.MaxHops)},
	{"oversized", proxies, "10.0.0.1:4000", padded("203.0.113.7", clientip.MaxHeaderLen+1)},
}

func BenchmarkAddr(b *testing.B) {
	for _, bm := range benchRequests {
		b.Run(bm.name, func(b *testing.B) {
			r := newResolver(b, bm.trusted, 64)
			req := request(bm.remote, bm.xff)
			b.ReportAllocs()
			for b.Loop() {
				r.Addr(req)
			}
		})
	}
}

func BenchmarkKey(b *testing.B) {
	for _, bm := range benchRequests {
		b.Run(bm.name, func(b *testing.B) {
			r := newResolver(b, bm.trusted, 64)
			req := request(bm.remote, bm.xff)
			b.ReportAllocs()
			for b.Loop() {
				r.Key(req)
			}
		})
	}
}

// BenchmarkKeyParallel resolves from every P at once, through one
// Resolver, as a server does.
func BenchmarkKeyParallel(b *testing.B) {
	r := newResolver(b, proxies, 64)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		req := &http.Request{RemoteAddr: "10.0.0.1:4000", Header: http.Header{
			"X-Forwarded-For": {"198.51.100.1, 203.0.113.7, 10.0.0.2"},
		}}
		for pb.Next() {
			r.Key(req)
		}
	})
}

func BenchmarkCanonical(b *testing.B) {
	for _, s := range []string{"192.0.2.1", "::ffff:192.0.2.1", "2001:db8:1:2::5", "fe80::1%eth0"} {
		b.Run(s, func(b *testing.B) {
			addr := netip.MustParseAddr(s)
			b.ReportAllocs()
			for b.Loop() {
				clientip.Canonical(addr, 64)
			}
		})
	}
}

// BenchmarkAppendKey is Key into a reused buffer, as a caller hashing the
// bucket uses it.
func BenchmarkAppendKey(b *testing.B) {
	for _, bm := range benchRequests {
		b.Run(bm.name, func(b *testing.B) {
			r := newResolver(b, bm.trusted, 64)
			req := request(bm.remote, bm.xff)
			var buf []byte
			b.ReportAllocs()
			for b.Loop() {
				buf = r.AppendKey(buf[:0], req)
			}
		})
	}
}
