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
// the store answers it once, so the call holds one grant, not two.
func TestLostAnswerIsNotChargedTwice(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api, f, d, reg := faulty(t, config(5, time.Minute))
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
		calls := 0
		if _, err := pace.Call(t.Context(), api, ok(0, &calls)); err != nil {
			t.Fatal(err)
		}
		s, err := reg.Stats(t.Context(), "api")
		if err != nil || s.Remaining != 4 || len(d.events()) != 1 {
			t.Errorf("remaining %d (%v) after %d drops, want 4 after 1", s.Remaining, err, len(d.events()))
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
// dropped, keeps its slot, and runs when the store is back.
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

		// Now an outage over a slot: the caller due at 6 s is dropped,
		// retries at 6.5 s (backoff 500 ms) into the outage again, and at
		// 7.5 s (backoff 1 s) claims the slot it kept and runs.
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
		wg.Go(func() {
			if _, err := pace.Call(t.Context(), api, func(context.Context) (int, error) {
				at3 = since(start)
				return 0, nil
			}); err != nil {
				t.Error(err)
			}
		})
		synctest.Wait() // the third caller holds a slot at 6 s
		f.set(func(f *faultStore) { f.down = true })
		time.Sleep(1700 * time.Millisecond) // down from 5 s to 6.7 s
		f.set(func(f *faultStore) { f.down = false })
		wg.Wait()
		if at3 != 7500*time.Millisecond || len(d.events()) != 2 {
			t.Errorf("the caller due during the outage ran at %v after %d drops, want 7.5 s after 2", at3, len(d.events()))
		}
	})
}
