package pace_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/engine"
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

// order records the order in which callers started.
type order struct {
	mu  sync.Mutex
	ids []string
}

func (o *order) add(id string) {
	o.mu.Lock()
	o.ids = append(o.ids, id)
	o.mu.Unlock()
}

func (o *order) get() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.ids)
}

// Waiters for a lease are served in order of arrival, across processes:
// callers arriving while the head of the queue has waited long enough to
// poll only once a second, and polling every few milliseconds themselves,
// cannot overtake it, nor one another.
func TestCheapWaitersCannotOvertakeTheHead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newStore(t)
		configure(t, pace.NewRegistry(store), "api", capped(1, 10*time.Second))
		proc := func() *pace.Bound { return pace.Define("api").Bind(pace.NewRegistry(store)) }
		var started order
		call := func(b *pace.Bound, id string, d time.Duration) {
			if _, err := pace.Call(t.Context(), b, func(context.Context) (int, error) {
				started.add(id)
				time.Sleep(d)
				return 0, nil
			}); err != nil {
				t.Error(err)
			}
		}
		var wg sync.WaitGroup
		wg.Go(func() { call(proc(), "holder", 10*time.Second) })
		synctest.Wait()
		wg.Go(func() { call(proc(), "head", 100*time.Millisecond) })
		time.Sleep(9500 * time.Millisecond) // the head now polls once a second
		want := []string{"holder", "head"}
		for i := range 5 { // then, every 100 ms, a fresh caller elsewhere
			id := fmt.Sprintf("late-%d", i)
			want = append(want, id)
			wg.Go(func() { call(proc(), id, 100*time.Millisecond) })
			time.Sleep(100 * time.Millisecond)
		}
		wg.Wait()
		if got := started.get(); !slices.Equal(got, want) {
			t.Errorf("callers started in the order %v, want their order of arrival %v", got, want)
		}
	})
}

// A waiter that gives up (its context ends) leaves the queue at once: the
// caller behind it gets the lease as soon as it frees.
func TestWaiterGivingUpIsSkippedAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newStore(t)
		configure(t, pace.NewRegistry(store), "api", capped(1, 10*time.Second))
		proc := func() *pace.Bound { return pace.Define("api").Bind(pace.NewRegistry(store)) }
		start := time.Now()
		var wg sync.WaitGroup
		wg.Go(func() {
			pace.Call(t.Context(), proc(), func(context.Context) (int, error) {
				time.Sleep(2 * time.Second)
				return 0, nil
			})
		})
		synctest.Wait()
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		wg.Go(func() {
			if _, err := pace.Call(ctx, proc(), func(context.Context) (int, error) { return 0, nil }); !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("the waiter that gave up: %v, want its context's error", err)
			}
		})
		synctest.Wait()
		var at time.Duration
		if _, err := pace.Call(t.Context(), proc(), func(context.Context) (int, error) {
			at = since(start)
			return 0, nil
		}); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		// The lease frees at 2 s; the caller behind polls once a second at
		// most by then.
		if at < 2*time.Second || at > 3*time.Second {
			t.Errorf("the caller behind one that gave up started at %v, want when the lease freed (2 s), within a poll", at)
		}
	})
}

// A waiter that crashes holds the queue up only until its ticket's record
// expires, LeaseTTL after its last poll: the caller behind it then skips
// it.
func TestCrashedWaiterIsSkippedAfterItsTTL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newStore(t)
		configure(t, pace.NewRegistry(store), "api", capped(1, 3*time.Second))
		start := time.Now()
		var wg sync.WaitGroup
		wg.Go(func() {
			pace.Call(t.Context(), pace.Define("api").Bind(pace.NewRegistry(store)), func(context.Context) (int, error) {
				time.Sleep(time.Second)
				return 0, nil
			})
		})
		synctest.Wait()
		// The next waiter reaches the store through a link cut at 500 ms:
		// from then on it is, to everyone else, a crashed process.
		link := &faultStore{Store: store}
		crashed, cancel := context.WithCancel(t.Context())
		wg.Go(func() {
			pace.Call(crashed, pace.Define("api").Bind(pace.NewRegistry(link)), func(context.Context) (int, error) {
				t.Error("the crashed waiter ran")
				return 0, nil
			})
		})
		synctest.Wait()
		time.Sleep(200 * time.Millisecond)
		var at time.Duration
		behind, stop := context.WithTimeout(t.Context(), time.Minute)
		defer stop()
		wg.Go(func() {
			if _, err := pace.Call(behind, pace.Define("api").Bind(pace.NewRegistry(store)), func(context.Context) (int, error) {
				at = since(start)
				return 0, nil
			}); err != nil {
				t.Error(err)
			}
		})
		time.Sleep(300 * time.Millisecond)
		link.set(func(f *faultStore) { f.down = true })
		time.Sleep(10 * time.Second)
		cancel()
		wg.Wait()
		// Its last poll was before 500 ms, so its record expired by 3.5 s;
		// the caller behind marks it at a poll and skips it at the next, a
		// second apart at most.
		if at < 3*time.Second || at > 5500*time.Millisecond {
			t.Errorf("the caller behind a crashed waiter started at %v, want once the crashed one's ticket expired (3 s…3.5 s), within two polls", at)
		}
	})
}

// Configuring rejects the calls waiting in the gate's queue, here at once
// and elsewhere at their next poll, and their tickets do not hold up the
// calls that come after: the next caller takes the lease as soon as it
// frees.
func TestConfigureRejectsQueuedCallers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newStore(t)
		here := pace.NewRegistry(store)
		configure(t, here, "api", capped(1, 10*time.Second))
		start := time.Now()
		var wg sync.WaitGroup
		wg.Go(func() {
			pace.Call(t.Context(), pace.Define("api").Bind(here), func(context.Context) (int, error) {
				time.Sleep(5 * time.Second)
				return 0, nil
			})
		})
		synctest.Wait()
		for _, reg := range []*pace.Registry{here, pace.NewRegistry(store), here, pace.NewRegistry(store)} {
			wg.Go(func() {
				if _, err := pace.Call(t.Context(), pace.Define("api").Bind(reg), func(context.Context) (int, error) { return 0, nil }); !errors.Is(err, pace.ErrReconfigured) {
					t.Errorf("a queued caller: %v, want ErrReconfigured", err)
				}
			})
		}
		time.Sleep(time.Second)
		reconfigure(t, here, "api", func(c *pace.Config) { c.Limit = 500 })
		var at time.Duration
		if _, err := pace.Call(t.Context(), pace.Define("api").Bind(pace.NewRegistry(store)), func(context.Context) (int, error) {
			at = since(start)
			return 0, nil
		}); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		if at < 5*time.Second || at > 6*time.Second {
			t.Errorf("the caller after the rejected ones started at %v, want when the lease freed (5 s), within a poll", at)
		}
		if s, err := here.Stats(t.Context(), "api"); err != nil || s.Waiting != 0 || s.InFlight != 0 {
			t.Errorf("after: %+v, %v; want nothing waiting or in flight", s, err)
		}
	})
}

// A waiter that gives up after a poll of the gate whose answer it never
// received releases the lease that poll may have taken: the next caller
// runs at once, not when that lease's TTL runs out.
func TestWaiterGivingUpReleasesALeaseItNeverHeardOf(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newStore(t)
		configure(t, pace.NewRegistry(store), "api", capped(1, 10*time.Second))
		proc := func(s engine.Store) *pace.Bound { return pace.Define("api").Bind(pace.NewRegistry(s)) }
		start := time.Now()
		var wg sync.WaitGroup
		wg.Go(func() {
			if _, err := pace.Call(t.Context(), proc(store), func(context.Context) (int, error) {
				time.Sleep(time.Second)
				return 0, nil
			}); err != nil {
				t.Error(err)
			}
		})
		synctest.Wait()
		// The waiter's link applies its polls of the gate but loses their
		// answers from 0.5 s: the poll after the holder ends at 1 s takes
		// the lease, and the waiter gives up at 2 s without knowing it.
		link := &faultStore{Store: store, lose: true}
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		wg.Go(func() {
			if _, err := pace.Call(ctx, proc(link), func(context.Context) (int, error) { return 0, nil }); !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("the waiter that gave up: %v, want its context's error", err)
			}
		})
		time.Sleep(500 * time.Millisecond)
		link.set(func(f *faultStore) { f.fail = func(b *engine.Batch) bool { return hasOp(b, engine.OpAcquire) } })
		wg.Wait()
		time.Sleep(3*time.Second - since(start))
		var at time.Duration
		if _, err := pace.Call(t.Context(), proc(store), func(context.Context) (int, error) {
			at = since(start)
			return 0, nil
		}); err != nil {
			t.Fatal(err)
		}
		if at != 3*time.Second {
			t.Errorf("a caller arriving at 3 s, after the waiter gave up, started at %v, want at once", at)
		}
	})
}

// A caller that gives up after taking its ticket on the queue's fast path,
// whose answer it never received, marks that ticket abandoned too: the
// caller behind it takes the lease as soon as it frees, not once the
// ticket's record expires, LeaseTTL later.
func TestWaiterGivingUpMarksATicketItNeverHeardOf(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newStore(t)
		configure(t, pace.NewRegistry(store), "api", capped(1, 10*time.Second))
		proc := func(s engine.Store) *pace.Bound { return pace.Define("api").Bind(pace.NewRegistry(s)) }
		start := time.Now()
		var wg sync.WaitGroup
		wg.Go(func() {
			if _, err := pace.Call(t.Context(), proc(store), func(context.Context) (int, error) {
				time.Sleep(2 * time.Second)
				return 0, nil
			}); err != nil {
				t.Error(err)
			}
		})
		synctest.Wait()
		// The waiter takes ticket 2 and finds the gate full, but loses the
		// answer; it gives up during the drop's backoff, before sending
		// the request again.
		link := &faultStore{Store: store, lose: true, fail: func(b *engine.Batch) bool { return hasOp(b, engine.OpAcquire) }}
		ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		defer cancel()
		wg.Go(func() {
			if _, err := pace.Call(ctx, proc(link), func(context.Context) (int, error) { return 0, nil }); !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("the waiter that gave up: %v, want its context's error", err)
			}
		})
		time.Sleep(time.Second)
		var at time.Duration
		if _, err := pace.Call(t.Context(), proc(store), func(context.Context) (int, error) {
			at = since(start)
			return 0, nil
		}); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		if at < 2*time.Second || at > 3*time.Second {
			t.Errorf("the caller behind one that gave up started at %v, want when the lease freed (2 s), within a poll", at)
		}
	})
}

// A call whose lease expired while it waited for its slot, the store out of
// its reach for longer than LeaseTTL, does not start fn without a lease:
// the lease is another caller's by then, and it waits for a lease again.
func TestCallWhoseLeaseExpiredBeforeFnStartedWaitsForAnother(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newStore(t)
		configure(t, pace.NewRegistry(store), "api", capped(1, time.Second))
		// Process 1 takes its lease, then loses the store for its take and
		// its renewals until 3 s: its lease expires at about 1 s.
		var cut atomic.Bool
		cut.Store(true)
		link := &faultStore{Store: store, fail: func(b *engine.Batch) bool {
			return cut.Load() && (hasOp(b, engine.OpPaceTake) || hasOp(b, engine.OpRenew))
		}}
		p1 := pace.Define("api").Bind(pace.NewRegistry(link))
		p2 := pace.Define("api").Bind(pace.NewRegistry(store))
		var running, peak atomic.Int64
		call := func(b *pace.Bound, d time.Duration) {
			if _, err := pace.Call(t.Context(), b, func(context.Context) (int, error) {
				n := running.Add(1)
				if n > peak.Load() {
					peak.Store(n)
				}
				time.Sleep(d)
				running.Add(-1)
				return 0, nil
			}); err != nil {
				t.Error(err)
			}
		}
		var wg sync.WaitGroup
		wg.Go(func() { call(p1, time.Second) })
		time.Sleep(2 * time.Second) // the lease of process 1 has expired
		wg.Go(func() { call(p2, 10*time.Second) })
		time.Sleep(time.Second)
		cut.Store(false)
		wg.Wait()
		if got := peak.Load(); got != 1 {
			t.Errorf("%d calls ran at once under a cap of 1", got)
		}
	})
}
