package httplimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/httplimit"
)

// nopWriter is a ResponseWriter that keeps nothing but its header map,
// cleared between requests, so that the benchmarks measure the stage.
type nopWriter struct{ h http.Header }

func (w *nopWriter) Header() http.Header         { return w.h }
func (w *nopWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *nopWriter) WriteHeader(int)             {}

// BenchmarkHandler measures the stage's overhead per request on a memory
// store, with every request admitted (the limit is never reached):
//
//	path=unselected  a path the stage does not select: the route match alone
//	path=selected    one client's quota checked and charged, fields written
//	clients=N        the same, spread over N client addresses
//	policy=stored    the quota of a stored policy (Policies), read once and
//	                 then from the cache
//	metrics=on       the requests counted (Config.Registerer)
func BenchmarkHandler(b *testing.B) {
	for _, bc := range []struct {
		name    string
		path    string
		clients int
		stored  bool
		metrics bool
	}{
		{"path=unselected", "/static/app.js", 1, false, false},
		{"path=selected/clients=1", "/api/items", 1, false, false},
		{"path=selected/clients=1000", "/api/items", 1000, false, false},
		{"path=selected/clients=1000/metrics=on", "/api/items", 1000, false, true},
		{"path=selected/clients=1000/policy=stored", "/api/items", 1000, true, false},
	} {
		b.Run(bc.name, func(b *testing.B) {
			mem, clock := newMem(b, 1_000_000)
			cfg := config(mem, algo.MaxLimit, "/api/*", "/login")
			cfg.Quota.Window = 24 * time.Hour
			cfg.Quota.Kind = algo.KindFixed
			if bc.stored {
				pols := newPolicies(b, mem, clock, time.Minute)
				if err := pols.Set(context.Background(), "api", cfg.Quota); err != nil {
					b.Fatal(err)
				}
				pol, err := pols.Policy("api")
				if err != nil {
					b.Fatal(err)
				}
				cfg.Policy = pol
			}
			if bc.metrics {
				cfg.Registerer = prometheus.NewRegistry()
			}
			lim, err := httplimit.New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			h := lim.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			reqs := make([]*http.Request, bc.clients)
			for i := range reqs {
				reqs[i] = httptest.NewRequest(http.MethodGet, bc.path, nil)
				reqs[i].RemoteAddr = "10." + strconv.Itoa(i>>16&255) + "." + strconv.Itoa(i>>8&255) + "." + strconv.Itoa(i&255) + ":1234"
			}
			var next atomic.Uint64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				w := &nopWriter{h: http.Header{}}
				for pb.Next() {
					clear(w.h)
					h.ServeHTTP(w, reqs[next.Add(1)%uint64(len(reqs))])
				}
			})
		})
	}
}
