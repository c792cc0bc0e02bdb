package redisstore_test

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/store/redisstore"
)

// TestRedisOutage takes Redis away under load from 32 goroutines, then
// brings it back, two ways: stopped with SIGSTOP and continued (a server
// that answers nothing, its connections open), and killed and started
// again on its address (connections refused, then a fresh server without
// the function library or any key). While Redis is away every call must
// fail with engine.ErrUnavailable, return no result, and end within the
// store's timeout (300 ms) rather than at the client's read timeout (set
// to 30 s, so that a deadline not honoured would show); once it is back,
// service resumes without any action. The slack over the timeout is
// generous (it absorbs scheduling delays under the race detector), and
// still two orders of magnitude under the read timeout it tells apart.
func TestRedisOutage(t *testing.T) {
	for _, tc := range []struct {
		name     string
		down, up func(t *testing.T, srv *redistest.Server)
	}{
		{"unresponsive",
			func(t *testing.T, srv *redistest.Server) {
				if err := srv.Pause(); err != nil {
					t.Fatal(err)
				}
			},
			func(t *testing.T, srv *redistest.Server) {
				if err := srv.Resume(); err != nil {
					t.Fatal(err)
				}
			}},
		{"killed",
			func(t *testing.T, srv *redistest.Server) { srv.Stop() },
			func(t *testing.T, srv *redistest.Server) { srv.Restart(t) }},
	} {
		t.Run(tc.name, func(t *testing.T) { outage(t, tc.down, tc.up) })
	}
}

func outage(t *testing.T, down, up func(*testing.T, *redistest.Server)) {
	const (
		workers = 32
		timeout = 300 * time.Millisecond
		slack   = 2 * time.Second
	)
	srv := redistest.Start(t)
	opts := srv.Options()
	opts.ReadTimeout, opts.WriteTimeout = 30*time.Second, 30*time.Second
	cfg := freshConfig(nil)
	cfg.Timeout = timeout
	s, err := redisstore.New(redis.NewClient(opts), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	eng := engine.New(s)
	hit := engine.Hit(1, engine.Window{Key: "w", Kind: algo.KindFixed, Limit: 1 << 40, WindowMs: 3_600_000})

	// Phases: 0 before the stop, 1 stopped, 2 continued.
	var phase atomic.Int32
	var okBefore, failedStopped, okAfter atomic.Int64
	var mu sync.Mutex
	var violations []string
	var slowest time.Duration
	violate := func(format string) {
		mu.Lock()
		violations = append(violations, format)
		mu.Unlock()
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			var out engine.StepResult
			for {
				select {
				case <-done:
					return
				default:
				}
				before := phase.Load()
				start := time.Now()
				err := eng.Apply(t.Context(), "p", &out, hit)
				took := time.Since(start)
				after := phase.Load()
				switch {
				case err == nil && before == 1 && after == 1:
					violate("a call answered while Redis was away")
				case err == nil && out.Results[0].Allowed && after == 2:
					okAfter.Add(1)
				case err == nil:
					okBefore.Add(1)
				case !errors.Is(err, engine.ErrUnavailable):
					violate("error not ErrUnavailable: " + err.Error())
				case len(out.Results) != 0:
					violate("a failed call left results in its StepResult")
				case before == 1 && after == 1:
					failedStopped.Add(1)
					mu.Lock()
					slowest = max(slowest, took)
					mu.Unlock()
					if took > timeout+slack {
						violate("a call while Redis was away took " + took.String())
					}
				}
			}
		})
	}
	stop := func() { close(done); wg.Wait() }
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				stop()
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(10 * time.Millisecond) // polling a condition with a deadline
		}
	}

	waitFor("calls to succeed", func() bool { return okBefore.Load() >= 1000 })
	down(t, srv)
	phase.Store(1)
	// Let every worker see several failures.
	waitFor("calls to fail", func() bool { return failedStopped.Load() >= 4*workers })
	phase.Store(2)
	up(t, srv)
	waitFor("service to resume", func() bool { return okAfter.Load() >= 1000 })
	stop()

	for _, v := range violations {
		t.Error(v)
	}
	t.Logf("%d calls answered before the outage, %d failed during it (slowest %v, timeout %v), %d answered after",
		okBefore.Load(), failedStopped.Load(), slowest, timeout, okAfter.Load())
}
