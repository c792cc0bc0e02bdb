package pace_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/pace"
	"github.com/sluicehq/sluice/store/diskstore"
)

// restartable is the embedded durable store behind a stand-in for a
// server: it can be restarted, and answers engine.ErrUnavailable while it
// is down, as a client of a restarting server does.
type restartable struct {
	t   *testing.T
	cfg diskstore.Config
	mu  sync.RWMutex
	s   *diskstore.Store // nil while down
}

func openRestartable(t *testing.T) *restartable {
	cfg := diskstore.DefaultConfig()
	cfg.Dir, cfg.FS = "db", vfs.NewMem()
	r := &restartable{t: t, cfg: cfg}
	r.start()
	return r
}

func (r *restartable) start() {
	s, err := diskstore.Open(r.cfg)
	if err != nil {
		r.t.Fatal(err)
	}
	r.mu.Lock()
	r.s = s
	r.mu.Unlock()
}

func (r *restartable) stop() {
	r.mu.Lock()
	s := r.s
	r.s = nil
	r.mu.Unlock()
	if err := s.Close(); err != nil {
		r.t.Fatal(err)
	}
}

func (r *restartable) Apply(ctx context.Context, b *engine.Batch, out *engine.StepResult) error {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.s == nil {
		return engine.ErrUnavailable
	}
	return r.s.Apply(ctx, b, out)
}

func (r *restartable) Close() error {
	r.stop()
	return nil
}

// Callers sleeping on their reservations while the durable store restarts
// lose neither their place nor a drop, never run early, and the restarted
// store hands out no fresh allowance.
func TestWaitingSurvivesARestartOfTheDurableStore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := openRestartable(t)
		defer store.Close()
		var d drops
		reg := pace.NewRegistry(store)
		configure(t, reg, "api", config(2, time.Second))
		api := pace.Define("api", pace.WithOnDrop(d.observe)).Bind(reg)
		start := time.Now()
		var st starts
		call := func() {
			if _, err := pace.Call(t.Context(), api, func(context.Context) (int, error) {
				st.add(since(start))
				return 0, nil
			}); err != nil {
				t.Error(err)
			}
		}
		var wg sync.WaitGroup
		for range 10 {
			wg.Go(call)
		}
		synctest.Wait() // two ran; eight sleep on slots at 1, 1, 2, 2, 3, 3, 4, 4 s
		time.Sleep(200 * time.Millisecond)
		store.stop()
		time.Sleep(500 * time.Millisecond)
		store.start()
		time.Sleep(4500*time.Millisecond - since(start))
		wg.Go(call) // at 4.5 s the grants at 4 s still fill the window
		wg.Wait()
		at := st.sorted()
		want := []time.Duration{0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5}
		if len(at) != len(want) {
			t.Fatalf("%d calls ran, want %d", len(at), len(want))
		}
		for i := range want {
			if at[i] != want[i]*time.Second {
				t.Fatalf("calls started at %v, want at their slots %v s", at, want)
			}
		}
		if n := len(d.events()); n != 0 {
			t.Errorf("%d drops across the restart, want 0", n)
		}
	})
}

// Callers waiting in the gate's queue while the durable store restarts
// keep their places: they ride the outage out without a drop, and take the
// lease in their order of arrival once the store is back.
func TestQueueSurvivesARestartOfTheDurableStore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := openRestartable(t)
		defer store.Close()
		var d drops
		configure(t, pace.NewRegistry(store), "api", capped(1, 10*time.Second))
		proc := func() *pace.Bound {
			return pace.Define("api", pace.WithOnDrop(d.observe)).Bind(pace.NewRegistry(store))
		}
		var started order
		call := func(id string, fn time.Duration) {
			if _, err := pace.Call(t.Context(), proc(), func(context.Context) (int, error) {
				started.add(id)
				time.Sleep(fn)
				return 0, nil
			}); err != nil {
				t.Error(err)
			}
		}
		var wg sync.WaitGroup
		wg.Go(func() { call("holder", 3*time.Second) })
		synctest.Wait()
		want := []string{"holder"}
		for i := range 4 {
			id := fmt.Sprintf("waiter-%d", i)
			want = append(want, id)
			wg.Go(func() { call(id, 100*time.Millisecond) })
			time.Sleep(100 * time.Millisecond)
		}
		time.Sleep(600 * time.Millisecond)
		store.stop() // from 1 s to 2 s, while all four wait
		time.Sleep(time.Second)
		store.start()
		wg.Wait()
		if got := started.get(); !slices.Equal(got, want) {
			t.Errorf("callers started in the order %v, want their order of arrival %v", got, want)
		}
		if n := len(d.events()); n != 0 {
			t.Errorf("%d drops across the restart, want 0", n)
		}
	})
}

// A call holding its lease through a restart of the store shorter than
// LeaseTTL keeps it: the renewals the outage failed are made again as soon
// as the store is back, before the lease expires, and a caller waiting for
// the lease elsewhere runs only when the call ends.
func TestLeaseSurvivesARestartShorterThanItsTTL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := openRestartable(t)
		defer store.Close()
		configure(t, pace.NewRegistry(store), "api", capped(1, 3*time.Second))
		p1 := pace.Define("api").Bind(pace.NewRegistry(store))
		p2 := pace.Define("api").Bind(pace.NewRegistry(store))
		start := time.Now()
		var wg sync.WaitGroup
		wg.Go(func() {
			if _, err := pace.Call(t.Context(), p1, func(context.Context) (int, error) {
				time.Sleep(10 * time.Second)
				return 0, nil
			}); err != nil {
				t.Error(err)
			}
		})
		synctest.Wait()
		var at time.Duration
		wg.Go(func() {
			if _, err := pace.Call(t.Context(), p2, func(context.Context) (int, error) {
				at = since(start)
				return 0, nil
			}); err != nil {
				t.Error(err)
			}
		})
		time.Sleep(500 * time.Millisecond)
		store.stop() // from 0.5 s to 2.5 s: the renewals due at 1 s and 2 s fail
		time.Sleep(2 * time.Second)
		store.start()
		wg.Wait()
		if at < 10*time.Second {
			t.Errorf("the waiting call started at %v, beside a call whose lease a 2 s outage took (LeaseTTL 3 s); want once that call ended at 10 s", at)
		}
	})
}
