package httplimit_test

import (
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/store/memstore"
)

// stoppedClock reads one instant forever.
type stoppedClock struct{ t time.Time }

func (c stoppedClock) Now() time.Time { return c.t }

// exampleStore returns a memory store whose clock is stopped 15 seconds
// into a minute, so that the examples print the same delays whenever they
// run. A service leaves Config.Store nil, or passes the store its fleet
// shares.
func exampleStore() engine.Store {
	cfg := memstore.DefaultConfig()
	cfg.Clock = stoppedClock{time.Date(2026, 1, 1, 0, 0, 15, 0, time.UTC)}
	store, err := memstore.New(cfg)
	if err != nil {
		log.Fatal(err)
	}
	return store
}

// send serves one request from a fixed client address and prints the
// answer.
func send(h http.Handler, method, path string) {
	req := httptest.NewRequest(method, path, nil)
	req.RemoteAddr = "203.0.113.7:52100"
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	fmt.Printf("%s %s: %d", method, path, rec.Code)
	if v := rec.Header().Get("RateLimit"); v != "" {
		fmt.Printf(" RateLimit: %s", v)
	}
	if v := rec.Header().Get("Retry-After"); v != "" {
		fmt.Printf(" Retry-After: %s %s", v, rec.Body)
	}
	fmt.Println()
}

// Two device-flow routes share two requests per client per epoch-aligned
// minute; other routes pass through untouched.
func ExampleLimiter_Handler() {
	cfg := httplimit.DefaultConfig()
	cfg.Routes = []string{"/device/*"}
	cfg.Prefix = "device-flow"
	cfg.Quota.Limit = 2
	cfg.Store = exampleStore()
	lim, err := httplimit.New(cfg)
	if err != nil {
		log.Fatal(err)
	}

	mux := http.NewServeMux()
	mux.HandleFunc("POST /device/start", func(w http.ResponseWriter, r *http.Request) {})
	mux.HandleFunc("POST /device/poll", func(w http.ResponseWriter, r *http.Request) {})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {})
	h := lim.Handler(mux)

	send(h, "POST", "/device/start")
	send(h, "POST", "/device/poll")
	send(h, "POST", "/device/poll")
	send(h, "GET", "/healthz")
	// Output:
	// POST /device/start: 200 RateLimit: "default";r=1;t=45
	// POST /device/poll: 200 RateLimit: "default";r=0;t=45
	// POST /device/poll: 429 RateLimit: "default";r=0;t=45 Retry-After: 45 {"error":"RATE_LIMITED"}
	// GET /healthz: 200
}

// A Policy gives each request the quota of its client's plan. Quotas with
// different names are counted apart.
func ExamplePolicyFunc() {
	cfg := httplimit.DefaultConfig()
	cfg.Routes = []string{"/api/*"}
	cfg.Prefix = "api"
	cfg.Store = exampleStore()
	cfg.Key = func(r *http.Request) string { return r.Header.Get("X-Api-Key") }
	cfg.Policy = httplimit.PolicyFunc(func(r *http.Request) (httplimit.Quota, error) {
		if r.Header.Get("X-Api-Key") == "k-enterprise" {
			return httplimit.Quota{Name: "enterprise", Limit: 1000, Window: time.Hour}, nil
		}
		return httplimit.Quota{Name: "free", Limit: 100, Window: 24 * time.Hour}, nil
	})
	lim, err := httplimit.New(cfg)
	if err != nil {
		log.Fatal(err)
	}
	h := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))

	for _, key := range []string{"k-enterprise", "k-hobby"} {
		req := httptest.NewRequest("GET", "/api/reports", nil)
		req.Header.Set("X-Api-Key", key)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		fmt.Printf("%s: %s\n", key, rec.Header().Get("RateLimit-Policy"))
	}
	// Output:
	// k-enterprise: "enterprise";q=1000;w=3600
	// k-hobby: "free";q=100;w=86400
}
