package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/testclock"
	"github.com/sluicehq/sluice/server"
	"github.com/sluicehq/sluice/store/diskstore"
	"github.com/sluicehq/sluice/store/redisstore"
)

// Thirty requests from one client, released together against a limit of
// five, admit exactly five on every kind of store: the check and the charge
// are one atomic step, so no two requests can both see the last unit. The
// five admitted see the five counts from four to none, each once, and every
// rejection carries Retry-After and the fields.
//
// Redis reads its own TIME, which the test cannot hold still, so the quota
// is a log window of an hour rather than the epoch-aligned minute, whose end
// that clock could pass mid-test: no record expires during the test
// whatever the clock reads. The delays are checked exactly only on the
// stores whose clock stands at epoch, and within the window on Redis.
func TestConcurrentRequestsAdmitExactlyTheLimit(t *testing.T) {
	const limit, requests = 5, 30
	const window = time.Hour
	stores := []struct {
		name    string
		new     func(t *testing.T) engine.Store
		clocked bool // the store's clock stands at epoch
	}{
		{"memstore", func(t *testing.T) engine.Store {
			mem, _ := newMem(t, 100)
			return mem
		}, true},
		{"diskstore", func(t *testing.T) engine.Store {
			cfg := diskstore.DefaultConfig()
			cfg.Dir = t.TempDir()
			cfg.Clock = testclock.New(epoch)
			disk, err := diskstore.Open(cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { disk.Close() })
			return disk
		}, true},
		{"server", newServerStore, true},
		{"redis", newRedisStore, false},
	}
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			cfg := config(st.new(t), limit, "/login")
			cfg.Quota.Kind, cfg.Quota.Window = algo.KindLog, window
			h, ran := stage(t, cfg)

			start := make(chan struct{})
			recs := make([]*httptest.ResponseRecorder, requests)
			var wg sync.WaitGroup
			for i := range requests {
				wg.Go(func() {
					<-start
					recs[i] = serve(h, http.MethodPost, "/login", "203.0.113.7:41000")
				})
			}
			close(start)
			wg.Wait()

			count := map[int]int{}
			for _, rec := range recs {
				count[rec.Code]++
			}
			if count[http.StatusOK] != limit || count[http.StatusTooManyRequests] != requests-limit {
				t.Fatalf("statuses %v, want %d×200 and %d×429", count, limit, requests-limit)
			}
			if got := ran.Load(); got != limit {
				t.Fatalf("protected handler ran %d times, want %d", got, limit)
			}

			// The delays: at most the window; on a store whose clock stands
			// at epoch, exactly the window, since every record was made then.
			windowSeconds := int64(window / time.Second)
			checkDelay := func(what string, s int64) {
				t.Helper()
				if s < 1 || s > windowSeconds || st.clocked && s != windowSeconds {
					t.Fatalf("%s %d s, want %d", what, s, windowSeconds)
				}
			}
			var seen []int64 // the remaining counts the admitted requests saw
			for i, rec := range recs {
				name, p := item(t, rec.Header(), httplimit.FieldPolicy)
				if name != "default" || param(t, p, "q") != limit || param(t, p, "w") != windowSeconds {
					t.Fatalf("request %d: RateLimit-Policy %q", i, rec.Header().Get(httplimit.FieldPolicy))
				}
				_, p = item(t, rec.Header(), httplimit.FieldRateLimit)
				r, reset := param(t, p, "r"), param(t, p, "t")
				checkDelay("RateLimit t", reset)
				if rec.Code == http.StatusOK {
					seen = append(seen, r)
					continue
				}
				if r != 0 {
					t.Fatalf("request %d rejected with r=%d", i, r)
				}
				ra, err := strconv.ParseInt(rec.Header().Get("Retry-After"), 10, 64)
				if err != nil {
					t.Fatalf("request %d: Retry-After %q", i, rec.Header().Get("Retry-After"))
				}
				checkDelay("Retry-After", ra)
				if ra != reset {
					t.Fatalf("request %d: Retry-After %d and RateLimit t=%d differ", i, ra, reset)
				}
				if rec.Body.String() != httplimit.RejectionBody {
					t.Fatalf("request %d: body %q", i, rec.Body)
				}
			}
			slices.Sort(seen)
			if want := []int64{0, 1, 2, 3, 4}; !slices.Equal(seen, want) {
				t.Fatalf("admitted requests saw remaining %v, want %v once each", seen, want)
			}
		})
	}
}

// newRedisStore returns a Redis store on a redis-server of the test's own,
// with Redis TIME as its clock, as in production.
func newRedisStore(t *testing.T) engine.Store {
	srv := redistest.Start(t)
	cfg := redisstore.DefaultConfig()
	// Thirty concurrent calls on a small machine under the race detector
	// must not time out.
	cfg.Timeout = 10 * time.Second
	s, err := redisstore.New(redis.NewClient(srv.Options()), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

const (
	testSecret = "httplimit-test-signing-secret-0123456789"
	testPepper = "httplimit-test-key-pepper-0123456789abcd"
	testToken  = "httplimit-test-operator-token-0123456789"
)

// newServerStore starts a Sluice server over a memory store on a controlled
// clock and returns a client of it: the stage's store is then a remote
// server reached over the signed RPC.
func newServerStore(t *testing.T) engine.Store {
	return newClient(t, startServer(t))
}

// startServer starts a Sluice server over a memory store on a controlled
// clock and returns its URL.
func startServer(t *testing.T) string {
	mem, _ := newMem(t, 10_000)
	scfg := server.DefaultConfig()
	scfg.Secrets = []string{testSecret}
	scfg.OperatorToken = testToken
	srv := httptest.NewServer(server.New(engine.New(mem), scfg))
	t.Cleanup(srv.Close)
	return srv.URL
}

// newClient returns a client of the server at url: a process of the
// fleet, with the fleet's secret and pepper.
func newClient(t *testing.T, url string) engine.Store {
	ccfg := client.DefaultConfig()
	ccfg.URL = url
	ccfg.Secret = testSecret
	ccfg.Pepper = testPepper
	// The longest timeout the client allows: thirty concurrent calls on a
	// small machine under the race detector must not time out.
	ccfg.Timeout = 2 * time.Second
	c := client.New(ccfg)
	if err := c.Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
