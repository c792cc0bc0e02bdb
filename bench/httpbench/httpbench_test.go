package httpbench

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice/algo"
)

// requests returns n pre-built GET requests from n distinct IPv4 clients.
func requests(n int) []*http.Request {
	reqs := make([]*http.Request, n)
	for i := range reqs {
		reqs[i] = httptest.NewRequest(http.MethodGet, "/api/items", nil)
		reqs[i].RemoteAddr = "10." + strconv.Itoa(i>>16&255) + "." + strconv.Itoa(i>>8&255) + "." + strconv.Itoa(i&255) + ":1234"
	}
	return reqs
}

// BenchmarkMiddleware measures the overhead per request of each stage around
// the same trivial handler, each request answered into a fresh
// httptest.ResponseRecorder, on a rotating set of client addresses shared by
// the goroutines:
//
//	admit       1,000 clients, a limit none reaches: every request runs the
//	            handler
//	admit-many  the same from 20,000 clients: most requests come from a
//	            client not seen recently, whose records are out of the
//	            CPU's caches (and, before decision 0074, out of httplimit's
//	            memo of 4,096 partition names)
//	deny        1,000 clients, a limit of 1, spent before the timer starts:
//	            every request is answered 429
//
// plain is the handler with no stage, the floor.
//
// Besides the time per request, each case reports the CPU time the whole
// process spent per request (cpu-ns/op: every core, the collector's work
// included). On a shared machine it holds much steadier than ns/op, which
// counts the time the benchmark waited for a core as well.
func BenchmarkMiddleware(b *testing.B) {
	b.Run("plain", func(b *testing.B) { run(b, Plain, requests(1000), http.StatusOK) })
	for _, mode := range []struct {
		name    string
		limit   int64
		clients int
		want    int
	}{
		{"admit", algo.MaxLimit / 2, 1000, http.StatusOK},
		{"admit-many", algo.MaxLimit / 2, 20_000, http.StatusOK},
		{"deny", 1, 1000, http.StatusTooManyRequests},
	} {
		for _, st := range Stages {
			b.Run(mode.name+"/"+st.Name, func(b *testing.B) {
				mw, err := st.New(mode.limit)
				if err != nil {
					b.Fatal(err)
				}
				h := mw(Plain)
				reqs := requests(mode.clients)
				if mode.want == http.StatusTooManyRequests {
					for _, r := range reqs {
						h.ServeHTTP(httptest.NewRecorder(), r)
					}
				}
				run(b, h, reqs, mode.want)
			})
		}
	}
}

func run(b *testing.B, h http.Handler, reqs []*http.Request, want int) {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, reqs[0])
	if w.Code != want {
		b.Fatalf("status %d, want %d", w.Code, want)
	}
	var next atomic.Uint64
	b.ReportAllocs()
	b.ResetTimer()
	cpu := processCPU()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			h.ServeHTTP(httptest.NewRecorder(), reqs[next.Add(1)%uint64(len(reqs))])
		}
	})
	if cpu := processCPU() - cpu; cpu > 0 {
		b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
	}
}

// TestAdmitThenDeny checks that every stage, at a limit of 2, admits a
// client's first two requests, denies its third with 429, and still admits
// another client.
func TestAdmitThenDeny(t *testing.T) {
	for _, st := range Stages {
		t.Run(st.Name, func(t *testing.T) {
			mw, err := st.New(2)
			if err != nil {
				t.Fatal(err)
			}
			var ran atomic.Int64
			h := mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { ran.Add(1) }))
			reqs := requests(2)
			for i, want := range []int{http.StatusOK, http.StatusOK, http.StatusTooManyRequests} {
				w := httptest.NewRecorder()
				h.ServeHTTP(w, reqs[0])
				if w.Code != want {
					t.Fatalf("request %d: status %d, want %d", i+1, w.Code, want)
				}
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, reqs[1])
			if w.Code != http.StatusOK {
				t.Fatalf("other client: status %d, want 200", w.Code)
			}
			if n := ran.Load(); n != 3 {
				t.Fatalf("handler ran %d times, want 3", n)
			}
		})
	}
}
