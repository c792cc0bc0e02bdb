package pace_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/pace"
)

// capped returns a configuration of a generous rate with a concurrency cap.
func capped(n int, ttl time.Duration) pace.Config {
	cfg := config(1000, time.Second)
	cfg.Concurrency, cfg.LeaseTTL = n, ttl
	return cfg
}

// Never more than the cap of fns run at once, across processes sharing the
// store, and the cap is used in full.
func TestConcurrencyCapHolds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newStore(t)
		setup := pace.NewRegistry(store)
		configure(t, setup, "api", capped(4, 10*time.Second))
		var running, peak, done atomic.Int64
		var wg sync.WaitGroup
		for p := range 3 { // three processes, each with its own registry
			api := pace.Define("api").Bind(pace.NewRegistry(store))
			for i := range 10 {
				wg.Go(func() {
					_, err := pace.Call(t.Context(), api, func(context.Context) (int, error) {
						n := running.Add(1)
						for {
							old := peak.Load()
							if n <= old || peak.CompareAndSwap(old, n) {
								break
							}
						}
						time.Sleep(time.Duration(200+37*((p*10+i)%11)) * time.Millisecond)
						running.Add(-1)
						return 0, nil
					})
					if err != nil {
						t.Error(err)
					}
					done.Add(1)
				})
			}
		}
		wg.Wait()
		if done.Load() != 30 {
			t.Fatalf("%d calls completed, want 30", done.Load())
		}
		if got := peak.Load(); got != 4 {
			t.Errorf("peak concurrency %d, want exactly the cap of 4", got)
		}
	})
}

// A long call keeps its lease by renewing it: a caller elsewhere waits for
// the call to end, not for the lease's TTL.
func TestLeaseIsRenewedWhileFnRuns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newStore(t)
		configure(t, pace.NewRegistry(store), "api", capped(1, 3*time.Second))
		p1 := pace.Define("api").Bind(pace.NewRegistry(store))
		p2 := pace.Define("api").Bind(pace.NewRegistry(store))
		start := time.Now()
		var wg sync.WaitGroup
		wg.Go(func() {
			pace.Call(t.Context(), p1, func(context.Context) (int, error) {
				time.Sleep(10 * time.Second)
				return 0, nil
			})
		})
		synctest.Wait()
		var at time.Duration
		if _, err := pace.Call(t.Context(), p2, func(context.Context) (int, error) {
			at = since(start)
			return 0, nil
		}); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		if at < 10*time.Second || at > 11*time.Second {
			t.Errorf("the second call started at %v, want once the first ended at 10 s", at)
		}
	})
}

// A crashed holder stops renewing: its lease frees at its TTL, and not
// before, and a caller elsewhere takes the slot.
func TestCrashedHoldersLeaseFreesAtItsTTL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newStore(t)
		configure(t, pace.NewRegistry(store), "api", capped(1, 3*time.Second))
		// Process 1 reaches the store through a link that is about to be
		// cut: from then on it is, to everyone else, a crashed process.
		link := &faultStore{Store: store}
		p1 := pace.Define("api").Bind(pace.NewRegistry(link))
		p2 := pace.Define("api").Bind(pace.NewRegistry(store))
		start := time.Now()
		hang := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			pace.Call(t.Context(), p1, func(context.Context) (int, error) {
				<-hang
				return 0, nil
			})
		})
		synctest.Wait()
		time.Sleep(500 * time.Millisecond)
		link.set(func(f *faultStore) { f.down = true }) // before its first renewal at 1 s
		var at time.Duration
		if _, err := pace.Call(t.Context(), p2, func(context.Context) (int, error) {
			at = since(start)
			return 0, nil
		}); err != nil {
			t.Fatal(err)
		}
		close(hang)
		wg.Wait()
		if at < 3*time.Second || at > 4*time.Second {
			t.Errorf("the second call started at %v, want at the lease's expiry (3 s) or within a poll of it", at)
		}
	})
}
