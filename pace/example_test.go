package pace_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/sluicehq/sluice/pace"
	"github.com/sluicehq/sluice/store/memstore"
)

// A limiter is defined once, at package level: defining does no I/O.
var exampleAPI = pace.Define("example-api")

// exampleRegistry returns the registry of an in-process store with
// "example-api" configured at 60 calls a minute, 5 at a time. A fleet
// passes the store it shares instead: the embedded store behind
// `sluice serve`, reached through the client package.
func exampleRegistry() *pace.Registry {
	store, err := memstore.New(memstore.DefaultConfig())
	if err != nil {
		log.Fatal(err)
	}
	reg := pace.NewRegistry(store)
	cfg := pace.DefaultConfig()
	cfg.Limit, cfg.Window = 60, time.Minute // the upstream's limit, verbatim
	cfg.Concurrency = 5
	if err := reg.Configure(context.Background(), "example-api", cfg); err != nil {
		log.Fatal(err)
	}
	return reg
}

// Call runs the caller's own function when the shared limiter allows; its
// result comes straight back.
func Example() {
	api := exampleAPI.Bind(exampleRegistry())
	total, err := pace.Call(context.Background(), api, func(ctx context.Context) (int, error) {
		return 40 + 2, nil // build and send the request here, afresh for each attempt
	})
	fmt.Println(total, err)
	// Output: 42 <nil>
}

// A limiter that was never configured fails at once: there is no default
// configuration to fall back on, so a mistyped name cannot silently become
// a second limiter.
func ExampleCall_noSuchLimiter() {
	reg := exampleRegistry()
	_, err := pace.Call(context.Background(), pace.Define("exmaple-api").Bind(reg), func(ctx context.Context) (int, error) {
		return 0, nil
	})
	fmt.Println(errors.Is(err, pace.ErrNoSuchLimiter))
	// Output: true
}

// Pace every request of an http.Client without touching its call sites.
func ExampleRoundTripper() {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "hello")
	}))
	defer upstream.Close()

	client := &http.Client{Transport: pace.RoundTripper(nil, exampleAPI.Bind(exampleRegistry()))}
	resp, err := client.Get(upstream.URL)
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.StatusCode, string(body))
	// Output: 200 hello
}

// An upstream that reports its rate limit in a 200 body: a hook on the
// limiter recognises it, so one caller's verdict pauses every caller.
func ExampleWithRateLimitHook() {
	quota := pace.Define("example-api", pace.WithRateLimitHook(func(v any, err error) *pace.RateLimit {
		if s, ok := v.(string); ok && s == `{"error":"RATE_LIMIT_EXCEEDED"}` {
			return &pace.RateLimit{RetryAfter: time.Minute}
		}
		return nil
	}))
	reg := exampleRegistry()
	_, err := pace.Call(context.Background(), quota.Bind(reg), func(ctx context.Context) (string, error) {
		return `{"error":"RATE_LIMIT_EXCEEDED"}`, nil
	}, pace.WithRetry(pace.Retry{Attempts: 1}))
	fmt.Println(errors.Is(err, pace.ErrRateLimited))
	stats, _ := reg.Stats(context.Background(), "example-api")
	fmt.Println("paused for", stats.PenaltyUntil.Sub(stats.At).Round(time.Second))
	// Output:
	// true
	// paused for 1m0s
}

// Stats reads a limiter's state as the store sees it.
func ExampleRegistry_Stats() {
	reg := exampleRegistry()
	api := exampleAPI.Bind(reg)
	for range 3 {
		pace.Call(context.Background(), api, func(ctx context.Context) (int, error) { return 0, nil })
	}
	s, err := reg.Stats(context.Background(), "example-api")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%d of %d left, %d in flight, %d waiting\n", s.Remaining, s.Config.Limit, s.InFlight, s.Waiting)
	// Output: 57 of 60 left, 0 in flight, 0 waiting
}

// Reconfigure patches a live limiter; every process sharing the store
// follows.
func ExampleRegistry_Reconfigure() {
	reg := exampleRegistry()
	cfg, err := reg.Reconfigure(context.Background(), "example-api", func(c *pace.Config) {
		c.Concurrency = 10
		c.Retry.Attempts = 2 // the other retry fields keep their defaults
	})
	fmt.Println(cfg.Limit, cfg.Concurrency, cfg.Retry.Attempts, err)
	// Output: 60 10 2 <nil>
}

// WithOnStart observes each attempt as fn starts, with the slot the store
// admitted it at: the material for metrics of waits and admissions, and
// the place to count attempts without touching fn.
func ExampleWithOnStart() {
	api := exampleAPI.Bind(exampleRegistry())
	_, err := pace.Call(context.Background(), api, func(ctx context.Context) (int, error) {
		return 0, nil
	}, pace.WithOnStart(func(s pace.Start) {
		// A histogram of waits would observe the time since the call began,
		// labelled with s.Limiter.
		fmt.Println(s.Limiter, "attempt", s.Attempt)
	}))
	fmt.Println(err)
	// Output:
	// example-api attempt 1
	// <nil>
}
