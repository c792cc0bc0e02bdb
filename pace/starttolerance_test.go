package pace_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/pace"
)

// slowStore wraps a store with the latency of a network and a loaded
// machine: every batch reaches the store after up to 10 ms, and its answer
// reaches the caller after up to 10 ms, or, for one answer in five, after
// 150 ms. Inside a synctest bubble the delays pass on the bubble's clock.
type slowStore struct {
	engine.Store
	mu  sync.Mutex
	rng *rand.Rand
}

func newSlowStore(t *testing.T) *slowStore {
	return &slowStore{Store: newStore(t), rng: rand.New(rand.NewPCG(1, 2))}
}

func (s *slowStore) delays() (there, back time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	there = time.Duration(s.rng.IntN(10_000)) * time.Microsecond
	back = time.Duration(s.rng.IntN(10_000)) * time.Microsecond
	if s.rng.IntN(5) == 0 {
		back = 150 * time.Millisecond
	}
	return there, back
}

func (s *slowStore) Apply(ctx context.Context, b *engine.Batch, out *engine.StepResult) error {
	there, back := s.delays()
	time.Sleep(there) // the request on its way: simulated latency
	err := s.Store.Apply(ctx, b, out)
	time.Sleep(back) // the answer on its way
	return err
}

// startRecord is one attempt's slot and start.
type startRecord struct{ slot, start time.Time }

// stampede runs 40 callers of three calls each through a limiter of 5
// calls per second with the given start tolerance, over a slow store, and
// returns every attempt's slot and start.
func stampede(t *testing.T, tolerance time.Duration) []startRecord {
	t.Helper()
	reg := pace.NewRegistry(newSlowStore(t))
	cfg := config(5, time.Second)
	cfg.StartTolerance = tolerance
	configure(t, reg, "api", cfg)
	api := pace.Define("api").Bind(reg)
	var mu sync.Mutex
	var recs []startRecord
	var wg sync.WaitGroup
	for range 40 {
		wg.Go(func() {
			for range 3 {
				var slot time.Time
				_, err := pace.Call(t.Context(), api, func(context.Context) (int, error) {
					start := time.Now()
					mu.Lock()
					recs = append(recs, startRecord{slot, start})
					mu.Unlock()
					return 0, nil
				}, pace.WithOnStart(func(s pace.Start) { slot = s.Slot }))
				if err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if len(recs) != 120 {
		t.Fatalf("%d calls ran, want 120", len(recs))
	}
	return recs
}

// mostStarts returns the most starts of recs in a rolling window w.
func mostStarts(recs []startRecord, w time.Duration) int {
	var first time.Time
	for _, r := range recs {
		if first.IsZero() || r.start.Before(first) {
			first = r.start
		}
	}
	var st starts
	for _, r := range recs {
		st.add(r.start.Sub(first))
	}
	return maxInWindow(st.sorted(), w)
}

// Callers reach their slots after delays that vary, some longer than the
// start tolerance: with a tolerance of 100 ms no rolling second of starts
// holds more than the limit, every call starts within the tolerance after
// its slot and never before it, and every call runs.
func TestStartsHoldTheLimitWithinTheTolerance(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const tolerance = 100 * time.Millisecond
		recs := stampede(t, tolerance)
		if got := mostStarts(recs, time.Second); got > 5 {
			t.Errorf("a rolling second held %d starts, limit 5", got)
		}
		for _, r := range recs {
			if late := r.start.Sub(r.slot); late < 0 || late > tolerance {
				t.Errorf("a call started %v after its slot, want 0…%v", late, tolerance)
			}
		}
	})
}

// The negative control: without a start tolerance the same delays put more
// than the limit's starts in a rolling second, though the log's windows of
// slots are exact.
func TestStartsExceedTheLimitWithoutATolerance(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		recs := stampede(t, 0)
		var slots starts
		for _, r := range recs {
			slots.add(r.slot.Sub(recs[0].slot.Truncate(time.Hour)))
		}
		if got := maxInWindow(slots.sorted(), time.Second); got > 5 {
			t.Errorf("a rolling second held %d slots, limit 5", got)
		}
		if got := mostStarts(recs, time.Second); got <= 5 {
			t.Errorf("a rolling second held at most %d starts; want more than the limit of 5 without a tolerance", got)
		}
	})
}

// The tolerance is paid in throughput: a saturated limiter of 5 calls per
// second with a tolerance of 100 ms starts 5 calls every 1.1 s. The
// tolerance is stored with the configuration.
func TestStartToleranceCostsThroughput(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := pace.NewRegistry(newStore(t))
		cfg := config(5, time.Second)
		cfg.StartTolerance = 100 * time.Millisecond
		configure(t, reg, "api", cfg)
		if s, err := reg.Stats(t.Context(), "api"); err != nil || s.Config != cfg {
			t.Fatalf("stored %+v (%v), want %+v", s.Config, err, cfg)
		}
		api := pace.Define("api").Bind(reg)
		start := time.Now()
		var st starts
		var wg sync.WaitGroup
		for range 20 {
			wg.Go(func() {
				if _, err := pace.Call(t.Context(), api, func(context.Context) (int, error) {
					st.add(since(start))
					return 0, nil
				}); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		for i, d := range st.sorted() {
			if want := time.Duration(i/5) * 1100 * time.Millisecond; d != want {
				t.Fatalf("call %d started at %v, want %v", i, d, want)
			}
		}
	})
}

// A process whose every grant reaches it later than the start tolerance
// cannot start a call: it gives up ten late grants, takes an eleventh,
// late again, and fails with ErrDropped, having spent one grant a try. It
// does not take slot after slot, spending the limit of every process, for
// as long as its context lasts.
func TestLateGrantsEndInErrDropped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newStore(t)
		cfg := config(100, time.Second)
		cfg.StartTolerance = 5 * time.Millisecond
		configure(t, pace.NewRegistry(store), "api", cfg)
		far := pace.Define("api").Bind(pace.NewRegistry(&slowLink{Store: store, d: 10 * time.Millisecond}))
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		start := time.Now()
		calls := 0
		_, err := pace.Call(ctx, far, ok(0, &calls))
		if !errors.Is(err, pace.ErrDropped) || calls != 0 {
			t.Fatalf("err = %v after %v, fn run %d times; want ErrDropped, fn never run", err, since(start), calls)
		}
		if s, err := pace.NewRegistry(store).Stats(t.Context(), "api"); err != nil || s.Remaining != 100-11 {
			t.Errorf("remaining %d (%v), want %d: one grant spent a try", s.Remaining, err, 100-11)
		}
	})
}
