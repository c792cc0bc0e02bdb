package pace_test

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/pace"
)

// Configure registers a name and stores a complete configuration that
// every process sharing the store reads back; List lists it.
func TestConfigureAndList(t *testing.T) {
	ctx := context.Background()
	store := newStore(t)
	reg := pace.NewRegistry(store)
	names := []string{"search-api", "billing-api", "a", "read.v2_x"}
	for i, name := range names {
		cfg := config(10*(i+1), time.Minute)
		cfg.Concurrency = i
		cfg.RefillFraction = 0
		cfg.Retry = pace.Retry{Ceiling: 10 * time.Second}
		configure(t, reg, name, cfg)
	}
	configure(t, reg, "a", config(7, time.Second)) // again: replaced, listed once
	got, err := pace.NewRegistry(store).List(ctx)
	want := slices.Sorted(slices.Values(names))
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("List = %q, %v; want %q", got, err, want)
	}
	s, err := pace.NewRegistry(store).Stats(ctx, "billing-api")
	want2 := config(20, time.Minute)
	want2.Concurrency, want2.RefillFraction, want2.Retry = 1, 0, pace.Retry{Ceiling: 10 * time.Second}
	if err != nil || s.Config != want2 {
		t.Errorf("stored %+v (%v), want %+v", s.Config, err, want2)
	}
}

// A bad name or configuration is refused and changes nothing.
func TestConfigureRefusesBadInput(t *testing.T) {
	ctx := context.Background()
	reg := pace.NewRegistry(newStore(t))
	bad := []pace.Config{
		{},
		config(0, time.Second),
		config(pace.MaxLimit+1, time.Second),
		config(1, 0),
		config(1, 1500*time.Microsecond),
		func() pace.Config { c := config(1, time.Second); c.Concurrency = 2; c.LeaseTTL = 0; return c }(),
		func() pace.Config { c := config(1, time.Second); c.RefillFraction = 1.5; return c }(),
		func() pace.Config { c := config(1, time.Second); c.MaxWait = -1; return c }(),
		func() pace.Config { c := config(1, time.Second); c.StartTolerance = -time.Millisecond; return c }(),
		func() pace.Config { c := config(1, time.Second); c.StartTolerance = 1500 * time.Microsecond; return c }(),
		func() pace.Config { c := config(1, pace.MaxDuration); c.StartTolerance = time.Millisecond; return c }(),
		func() pace.Config { c := config(1, time.Second); c.Retry.Factor = 0.5; return c }(),
		func() pace.Config { c := config(1, time.Second); c.Retry.Floor = time.Minute; return c }(), // over the default ceiling
	}
	for i, cfg := range bad {
		if err := reg.Configure(ctx, "api", cfg); !errors.Is(err, pace.ErrInvalidConfig) {
			t.Errorf("config %d: err = %v, want ErrInvalidConfig", i, err)
		}
	}
	for _, name := range []string{"", "has space", "slash/name", ".", "..", string(make([]byte, pace.MaxNameLen+1))} {
		if err := reg.Configure(ctx, name, config(1, time.Second)); !errors.Is(err, pace.ErrInvalidConfig) {
			t.Errorf("name %q: err = %v, want ErrInvalidConfig", name, err)
		}
	}
	if names, err := reg.List(ctx); err != nil || len(names) != 0 {
		t.Errorf("List = %q, %v; want nothing", names, err)
	}
}

// The name is registered first; when the configuration cannot be written
// the registration is undone.
func TestFailedConfigureUndoesTheRegistration(t *testing.T) {
	ctx := context.Background()
	store := newStore(t)
	f := &faultStore{Store: store, fail: func(b *engine.Batch) bool {
		return b.Partition == "pace/api" && hasOp(b, engine.OpSet)
	}}
	reg := pace.NewRegistry(f)
	if err := reg.Configure(ctx, "api", config(1, time.Second)); !errors.Is(err, engine.ErrUnavailable) {
		t.Fatalf("err = %v, want the store's error", err)
	}
	if names, err := pace.NewRegistry(store).List(ctx); err != nil || len(names) != 0 {
		t.Errorf("List = %q, %v; want the registration undone", names, err)
	}
	if _, err := pace.NewRegistry(store).Stats(ctx, "api"); !errors.Is(err, pace.ErrNoSuchLimiter) {
		t.Errorf("Stats: %v, want ErrNoSuchLimiter", err)
	}
}

// Reconfigure patches an existing limiter, and fails if there is none.
func TestReconfigure(t *testing.T) {
	ctx := context.Background()
	reg := pace.NewRegistry(newStore(t))
	if _, err := reg.Reconfigure(ctx, "api", func(c *pace.Config) { c.Limit = 3 }); !errors.Is(err, pace.ErrNoSuchLimiter) {
		t.Fatalf("err = %v, want ErrNoSuchLimiter", err)
	}
	if names, _ := reg.List(ctx); len(names) != 0 {
		t.Errorf("a failed Reconfigure registered %q", names)
	}
	configure(t, reg, "api", config(10, time.Minute))
	got, err := reg.Reconfigure(ctx, "api", func(c *pace.Config) { c.Concurrency = 4 })
	want := config(10, time.Minute)
	want.Concurrency = 4
	if err != nil || got != want {
		t.Errorf("Reconfigure = %+v, %v; want %+v", got, err, want)
	}
	if _, err := reg.Reconfigure(ctx, "api", func(c *pace.Config) { c.Limit = 0 }); !errors.Is(err, pace.ErrInvalidConfig) {
		t.Errorf("invalid patch: %v, want ErrInvalidConfig", err)
	}
	if s, _ := reg.Stats(ctx, "api"); s.Config != want {
		t.Errorf("an invalid patch changed the configuration to %+v", s.Config)
	}
}

// Configuring rejects callers waiting under the old limits: at once in the
// process that configures, when they reach the store elsewhere. A caller
// that had not begun to wait simply adopts the new limits.
func TestConfigureRejectsWaitingCallers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newStore(t)
		here := pace.NewRegistry(store)
		configure(t, here, "api", config(1, 10*time.Second))
		elsewhere := pace.NewRegistry(store)
		start := time.Now()
		call := func(reg *pace.Registry) (time.Duration, error) {
			_, err := pace.Call(t.Context(), pace.Define("api").Bind(reg), func(context.Context) (int, error) { return 0, nil })
			return since(start), err
		}
		if _, err := call(here); err != nil { // takes the window
			t.Fatal(err)
		}
		type outcome struct {
			at  time.Duration
			err error
		}
		var mu sync.Mutex
		var local, remote []outcome
		var wg sync.WaitGroup
		for range 2 {
			wg.Go(func() {
				at, err := call(here)
				mu.Lock()
				local = append(local, outcome{at, err})
				mu.Unlock()
			})
			wg.Go(func() {
				at, err := call(elsewhere)
				mu.Lock()
				remote = append(remote, outcome{at, err})
				mu.Unlock()
			})
		}
		synctest.Wait() // four callers wait for slots at 10, 20, 30 and 40 s
		if s, _ := here.Stats(t.Context(), "api"); s.Waiting != 4 {
			t.Errorf("Stats.Waiting = %d, want 4", s.Waiting)
		}
		time.Sleep(time.Second)
		reconfigure(t, here, "api", func(c *pace.Config) { c.Limit = 2 })
		wg.Wait()
		for _, o := range local {
			if !errors.Is(o.err, pace.ErrReconfigured) || o.at != time.Second {
				t.Errorf("a caller here ended at %v with %v, want ErrReconfigured at once (1 s)", o.at, o.err)
			}
		}
		for _, o := range remote {
			if !errors.Is(o.err, pace.ErrReconfigured) || o.at < 10*time.Second {
				t.Errorf("a caller elsewhere ended at %v with %v, want ErrReconfigured at its slot", o.at, o.err)
			}
		}
		// A new caller elsewhere, whose process last saw the old limits,
		// is not rejected: it had not begun to wait.
		if _, err := call(elsewhere); err != nil {
			t.Errorf("a new caller: %v", err)
		}
	})
}

// Stats reports the remaining allowance, the reset, the penalty deadline,
// the calls in flight and the calls waiting.
func TestStats(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := pace.NewRegistry(newStore(t))
		cfg := config(3, 10*time.Second)
		cfg.Concurrency = 2
		configure(t, reg, "api", cfg)
		api := pace.Define("api").Bind(reg)
		start := time.Now()
		s, err := reg.Stats(t.Context(), "api")
		if err != nil || s.Remaining != 3 || !s.ResetAt.Equal(start) || !s.At.Equal(start) || s.InFlight != 0 || s.Waiting != 0 || !s.PenaltyUntil.IsZero() {
			t.Fatalf("rested: %+v, %v", s, err)
		}
		hold := make(chan struct{})
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				pace.Call(t.Context(), api, func(context.Context) (int, error) {
					<-hold
					return 0, nil
				})
			})
		}
		synctest.Wait() // two run; two wait for a lease
		time.Sleep(2 * time.Second)
		s, _ = reg.Stats(t.Context(), "api")
		if s.Remaining != 1 || !s.ResetAt.Equal(start.Add(10*time.Second)) || s.InFlight != 2 || s.Waiting != 2 {
			t.Errorf("busy: remaining %d, reset %v, in flight %d, waiting %d; want 1, +10s, 2, 2",
				s.Remaining, s.ResetAt.Sub(start), s.InFlight, s.Waiting)
		}
		close(hold)
		wg.Wait()
		pace.Call(t.Context(), api, func(context.Context) (*int, error) { return nil, errors.New("x") },
			pace.WithRateLimitHook(func(any, error) *pace.RateLimit { return &pace.RateLimit{RetryAfter: time.Minute} }),
			pace.WithRetry(pace.Retry{Attempts: 1}))
		s, _ = reg.Stats(t.Context(), "api")
		if !s.PenaltyUntil.Equal(time.Now().Add(time.Minute)) || s.InFlight != 0 || s.Waiting != 0 {
			t.Errorf("penalised: until %v, in flight %d, waiting %d", s.PenaltyUntil.Sub(start), s.InFlight, s.Waiting)
		}
	})
}

// The refill fraction is kept in thousandths: one in thousandths is stored
// and read back as it was given, and a finer one, which the store would
// round (0.0015 to 0.002, reopening a window of 1000 with 2 calls rather
// than at most 1), is refused.
func TestRefillFractionIsKeptInThousandths(t *testing.T) {
	ctx := context.Background()
	reg := pace.NewRegistry(newStore(t))
	cfg := config(1000, time.Second)
	cfg.RefillFraction = 0.0015
	if err := reg.Configure(ctx, "api", cfg); !errors.Is(err, pace.ErrInvalidConfig) {
		t.Errorf("RefillFraction 0.0015: err = %v, want ErrInvalidConfig", err)
	}
	for _, f := range []float64{0, 0.001, 0.29, 0.5, 0.999, 1} {
		cfg.RefillFraction = f
		configure(t, reg, "api", cfg)
		if got, err := reg.Config(ctx, "api"); err != nil || got.RefillFraction != f {
			t.Errorf("RefillFraction %v read back as %v (%v)", f, got.RefillFraction, err)
		}
	}
}

// The names of limiters whose records expired, unused for 120 days, give
// their room in the index to new ones: a share of the index that other
// names keep alive does not fill up with the names of limiters that no
// longer exist. Nor does List name them.
func TestExpiredLimitersMakeRoomInTheIndex(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		reg := pace.NewRegistry(newStore(t))
		// Names of 64 bytes sharing one share of the index: 31 fill it.
		share := func(name string) uint32 {
			h := fnv.New32a()
			h.Write([]byte(name))
			return h.Sum32() % 8
		}
		var names []string
		for i := 0; len(names) < 32; i++ {
			if name := fmt.Sprintf("%064d", i); share(name) == 0 {
				names = append(names, name)
			}
		}
		day := 24 * time.Hour
		configure(t, reg, names[0], config(1, time.Second)) // expires at day 120
		time.Sleep(100 * day)
		configure(t, reg, names[1], config(1, time.Second)) // keeps the share alive
		time.Sleep(30 * day)
		if _, err := reg.Stats(ctx, names[0]); !errors.Is(err, pace.ErrNoSuchLimiter) {
			t.Fatalf("the limiter unused for 130 days: %v, want ErrNoSuchLimiter", err)
		}
		for _, name := range names[2:] {
			if err := reg.Configure(ctx, name, config(1, time.Second)); err != nil {
				t.Fatalf("configuring the name %d of the share: %v", slices.Index(names, name), err)
			}
		}
		got, err := reg.List(ctx)
		if err != nil || !slices.Equal(got, names[1:]) {
			t.Errorf("List = %d names (%v), want the %d live ones", len(got), err, len(names)-1)
		}
	})
}
