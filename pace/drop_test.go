package pace_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/pace"
)

// drops collects drop events.
type drops struct {
	mu sync.Mutex
	ev []pace.Drop
}

func (d *drops) observe(e pace.Drop) {
	d.mu.Lock()
	d.ev = append(d.ev, e)
	d.mu.Unlock()
}

func (d *drops) events() []pace.Drop {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]pace.Drop(nil), d.ev...)
}

// faulty returns a limiter "api" (5 per second) reached through a store
// that fails on demand, observing drops.
func faulty(t *testing.T, cfg pace.Config, opts ...pace.Option) (*pace.Bound, *faultStore, *drops, *pace.Registry) {
	t.Helper()
	store := newStore(t)
	configure(t, pace.NewRegistry(store), "api", cfg)
	f := &faultStore{Store: store}
	var d drops
	reg := pace.NewRegistry(f)
	return pace.Define("api", append([]pace.Option{pace.WithOnDrop(d.observe)}, opts...)...).Bind(reg), f, &d, pace.NewRegistry(store)
}

// A store failure before fn started is a drop: retried, observed, and fn
// runs once.
func TestDropBeforeFnStartedIsRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api, f, d, _ := faulty(t, config(5, time.Second))
		f.set(func(f *faultStore) { f.failNext = 3 })
		calls := 0
		if _, err := pace.Call(t.Context(), api, ok(0, &calls)); err != nil {
			t.Fatal(err)
		}
		ev := d.events()
		if calls != 1 || len(ev) != 3 {
			t.Fatalf("%d calls, %d drops; want 1 and 3", calls, len(ev))
		}
		for i, e := range ev {
			if e.Drops != i+1 || !e.WillRetry || e.Limiter != "api" || !errors.Is(e.Err, engine.ErrUnavailable) {
				t.Errorf("drop %d: %+v", i, e)
			}
		}
	})
}

// When every drop retry is spent the call fails with ErrDropped, fn never
// having run: the default is 5 retries, 6 drops; 0 retries fails at the
// first.
func TestDropsRunOutWithErrDropped(t *testing.T) {
	for _, tc := range []struct {
		opts  []pace.Option
		drops int
	}{{nil, 6}, {[]pace.Option{pace.WithDropRetries(0)}, 1}, {[]pace.Option{pace.WithDropRetries(2)}, 3}} {
		synctest.Test(t, func(t *testing.T) {
			api, f, d, _ := faulty(t, config(5, time.Second), tc.opts...)
			f.set(func(f *faultStore) { f.down = true })
			calls := 0
			_, err := pace.Call(t.Context(), api, ok(0, &calls))
			if !errors.Is(err, pace.ErrDropped) || !errors.Is(err, engine.ErrUnavailable) {
				t.Fatalf("err = %v, want ErrDropped wrapping the store's error", err)
			}
			ev := d.events()
			if calls != 0 || len(ev) != tc.drops {
				t.Fatalf("%d calls, %d drops; want 0 and %d", calls, len(ev), tc.drops)
			}
			for i, e := range ev {
				if e.WillRetry != (i < tc.drops-1) {
					t.Errorf("drop %d: WillRetry %v", i+1, e.WillRetry)
				}
			}
		})
	}
}

// A failure after fn started is never a drop: fn is not run again, and
// its result is returned.
func TestNoDropAfterFnStarted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := config(5, time.Second)
		cfg.Concurrency = 2
		api, f, d, _ := faulty(t, cfg)
		calls := 0
		v, err := pace.Call(t.Context(), api, func(context.Context) (string, error) {
			calls++
			f.set(func(f *faultStore) { f.down = true }) // the release will fail
			return "done", nil
		})
		if v != "done" || err != nil || calls != 1 || len(d.events()) != 0 {
			t.Errorf("got %q, %v after %d calls and %d drops; want the result of one call, no drop", v, err, calls, len(d.events()))
		}
	})
}

// A take whose answer is lost is sent again under the same operation id:
// the store answers it once, so a call reserving a slot holds one grant,
// not two, and runs at it.
func TestLostAnswerIsNotChargedTwice(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api, f, d, reg := faulty(t, config(5, time.Minute))
		start := time.Now()
		calls := 0
		for range 5 { // fill the window
			if _, err := pace.Call(t.Context(), api, ok(0, &calls)); err != nil {
				t.Fatal(err)
			}
		}
		loseNextTake(f)
		var at time.Duration
		if _, err := pace.Call(t.Context(), api, func(context.Context) (int, error) {
			at = since(start)
			return 0, nil
		}); err != nil {
			t.Fatal(err)
		}
		s, err := reg.Stats(t.Context(), "api")
		if err != nil || s.Remaining != 4 || len(d.events()) != 1 || at != time.Minute {
			t.Errorf("ran at %v, remaining %d (%v) after %d drops; want at its slot (1m0s), 4 remaining after 1 drop",
				at, s.Remaining, err, len(d.events()))
		}
	})
}

// A grant whose answer comes back only after the store failed is late: the
// call does not start at once, after its slot, but takes a new slot and
// starts at it. The grant it missed stays in the log, unused.
func TestLateGrantIsNotUsed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api, f, d, reg := faulty(t, config(5, time.Minute))
		start := time.Now()
		loseNextTake(f)
		var at time.Duration
		var slot time.Time
		if _, err := pace.Call(t.Context(), api, func(context.Context) (int, error) {
			at = since(start)
			return 0, nil
		}, pace.WithOnStart(func(s pace.Start) { slot = s.Slot })); err != nil {
			t.Fatal(err)
		}
		// The drop's backoff is 500 ms: the replayed grant, at 0 s, is late.
		if at != 500*time.Millisecond || !slot.Equal(start.Add(at)) {
			t.Errorf("ran at %v with its slot at %v, want both at 500ms", at, slot.Sub(start))
		}
		s, err := reg.Stats(t.Context(), "api")
		if err != nil || s.Remaining != 3 || len(d.events()) != 1 {
			t.Errorf("remaining %d (%v) after %d drops; want 3 (the late grant unused) after 1", s.Remaining, err, len(d.events()))
		}
	})
}

// loseNextTake makes f apply the next pace.take and lose its answer.
func loseNextTake(f *faultStore) {
	var once sync.Once
	f.set(func(f *faultStore) {
		f.lose = true
		f.fail = func(b *engine.Batch) bool {
			lost := false
			if hasOp(b, engine.OpPaceTake) {
				once.Do(func() { lost = true })
			}
			return lost
		}
	})
}

// A name never configured fails at once with ErrNoSuchLimiter: no wait, no
// retry, no drop.
func TestUnconfiguredNameFailsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, _, d, reg := faulty(t, config(5, time.Second))
		start := time.Now()
		for _, name := range []string{"apl", "", "with space", "über"} {
			calls := 0
			_, err := pace.Call(t.Context(), pace.Define(name, pace.WithOnDrop(d.observe)).Bind(reg), ok(0, &calls))
			if !errors.Is(err, pace.ErrNoSuchLimiter) || calls != 0 {
				t.Errorf("%q: err %v after %d calls, want ErrNoSuchLimiter and none", name, err, calls)
			}
		}
		if since(start) != 0 || len(d.events()) != 0 {
			t.Errorf("took %v with %d drops, want at once and none", since(start), len(d.events()))
		}
	})
}

// Waiting survives a store outage: callers sleeping on their reservations
// while the store restarts lose neither their place nor a drop, and never
// run before their slots; a caller whose slot comes during the outage is
// not dropped either: it waits for the store, and then, not starting late,
// takes the next slot.
func TestWaitingSurvivesAStoreRestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api, f, d, _ := faulty(t, config(2, time.Second))
		start := time.Now()
		var st starts
		var wg sync.WaitGroup
		for range 10 {
			wg.Go(func() {
				if _, err := pace.Call(t.Context(), api, func(context.Context) (int, error) {
					st.add(since(start))
					return 0, nil
				}); err != nil {
					t.Error(err)
				}
			})
		}
		synctest.Wait() // slots at 0, 0, 1, 1, 2, 2, 3, 3, 4, 4 s
		time.Sleep(100 * time.Millisecond)
		f.set(func(f *faultStore) { f.down = true })
		time.Sleep(800 * time.Millisecond) // down from 0.1 s to 0.9 s
		f.set(func(f *faultStore) { f.down = false })
		wg.Wait()
		want := []time.Duration{0, 0, 1, 1, 2, 2, 3, 3, 4, 4}
		at := st.sorted()
		for i := range want {
			if at[i] != want[i]*time.Second {
				t.Fatalf("calls started at %v, want each at its slot %v s", at, want)
			}
		}
		if len(d.events()) != 0 {
			t.Errorf("%d drops while callers slept through the outage, want 0", len(d.events()))
		}

		// Now an outage over a slot: the caller due at 6 s finds the store
		// down, retries it (10 ms, doubling, to 1 s) without a drop, reaches
		// it again at the first retry after 6.7 s, and takes a new slot:
		// there and then, since the window holds only its missed grant.
		time.Sleep(5*time.Second - since(start))
		wg.Go(func() {
			if _, err := pace.Call(t.Context(), api, func(context.Context) (int, error) { return 0, nil }); err != nil {
				t.Error(err)
			}
		})
		wg.Go(func() {
			if _, err := pace.Call(t.Context(), api, func(context.Context) (int, error) { return 0, nil }); err != nil {
				t.Error(err)
			}
		})
		synctest.Wait() // the two take the window at 5 s
		var at3 time.Duration
		var slot3 time.Time
		wg.Go(func() {
			if _, err := pace.Call(t.Context(), api, func(context.Context) (int, error) {
				at3 = since(start)
				return 0, nil
			}, pace.WithOnStart(func(s pace.Start) { slot3 = s.Slot })); err != nil {
				t.Error(err)
			}
		})
		synctest.Wait() // the third caller holds a slot at 6 s
		f.set(func(f *faultStore) { f.down = true })
		time.Sleep(1700 * time.Millisecond) // down from 5 s to 6.7 s
		f.set(func(f *faultStore) { f.down = false })
		wg.Wait()
		back := 6700 * time.Millisecond
		if at3 < back || at3 > back+time.Second || !slot3.Equal(start.Add(at3)) || len(d.events()) != 0 {
			t.Errorf("the caller due during the outage ran at %v at a slot of %v after %d drops, want at a new slot within a second of 6.7s, no drop",
				at3, slot3.Sub(start), len(d.events()))
		}
	})
}

// A drop hook that panics while its call holds a lease does not take the
// lease with it: the call gives the lease back as the panic leaves it, and
// stops renewing it.
func TestPanickingDropHookGivesTheLeaseBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := config(5, time.Second)
		cfg.Concurrency, cfg.LeaseTTL = 1, time.Second
		api, f, _, reg := faulty(t, cfg, pace.WithOnDrop(func(pace.Drop) { panic("hook") }))
		// The take fails, and goes on failing past LeaseTTL: a drop.
		f.set(func(f *faultStore) { f.fail = func(b *engine.Batch) bool { return hasOp(b, engine.OpPaceTake) } })
		func() {
			defer func() {
				if recover() == nil {
					t.Error("the drop hook's panic did not reach the caller")
				}
			}()
			pace.Call(t.Context(), api, func(context.Context) (int, error) { return 0, nil })
		}()
		s, err := reg.Stats(t.Context(), "api")
		if err != nil || s.InFlight != 0 {
			t.Errorf("%d leases in flight (%v) after the call panicked; want 0", s.InFlight, err)
		}
	})
}
