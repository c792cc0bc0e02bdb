package storetest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/testclock"
)

// check is one conformance check on a fresh store and its clock.
type check func(ctx context.Context, store engine.Store, clock *testclock.Clock) error

// together runs fn(i) for i in [0, n) on n goroutines released at once, and
// returns the first error any of them reported.
func together(n int, fn func(i int) error) error {
	start := make(chan struct{})
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			if err := fn(i); err != nil {
				errs <- err
			}
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	return <-errs // nil when the channel is empty
}

// checkSetNXRace checks that of 50 concurrent kv.set nx on one key exactly
// one wins, every loser sees the winner's record, and the winner's value is
// the one stored. It repeats the race on fresh keys to give a lost update
// several chances to show.
func checkSetNXRace(ctx context.Context, store engine.Store, _ *testclock.Clock) error {
	const racers, rounds = 50, 20
	eng := engine.New(store)
	for round := range rounds {
		key := "k" + strconv.Itoa(round)
		var winners atomic.Int64
		var winner atomic.Value
		err := together(racers, func(i int) error {
			var out engine.StepResult
			value := strconv.Itoa(i)
			if err := eng.Apply(ctx, "race", &out, engine.SetIf(key, value, 60_000, engine.SetNX)); err != nil {
				return err
			}
			r := out.Results[0]
			if r.Allowed {
				winners.Add(1)
				winner.Store(value)
			} else if !r.Found {
				return fmt.Errorf("racer %d lost without seeing a record", i)
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("round %d: %w", round, err)
		}
		if n := winners.Load(); n != 1 {
			return fmt.Errorf("round %d: %d racers won kv.set nx, want exactly 1", round, n)
		}
		var out engine.StepResult
		if err := eng.Apply(ctx, "race", &out, engine.Get(key)); err != nil {
			return err
		}
		if got, want := out.Results[0].Value, winner.Load().(string); !out.Results[0].Found || got != want {
			return fmt.Errorf("round %d: stored value %q (found %t), want the winner's %q", round, got, out.Results[0].Found, want)
		}
	}
	return nil
}

// checkOneKeyLimit releases 256 goroutines at once on one key with a limit
// of 100, in each of 50 windows of the given kind: no window may admit more
// than 100, and at least 99% must admit exactly 100. The clock is set inside
// each window before the goroutines are released, so every hit of a round is
// evaluated at the same instant.
func checkOneKeyLimit(kind algo.Kind) check {
	return func(ctx context.Context, store engine.Store, clock *testclock.Clock) error {
		const (
			goroutines = 256
			limit      = 100
			windows    = 50
			windowMs   = 60_000
		)
		eng := engine.New(store)
		hit := engine.Hit(1, engine.Window{Key: "w", Kind: kind, Limit: limit, WindowMs: windowMs})
		// A sliding window weighs the previous bucket, so its rounds skip a
		// bucket to start from nothing. A log window's grants leave exactly
		// one window later, and a GCRA is fully rested one window after
		// spending its whole burst, so rounds one window apart start from
		// nothing too.
		step := int64(windowMs)
		if kind == algo.KindSliding {
			step = 2 * windowMs
		}
		full := 0
		for round := range windows {
			clock.SetMilli(DefaultEpoch + int64(round)*step + windowMs/2)
			var admitted atomic.Int64
			err := together(goroutines, func(int) error {
				var out engine.StepResult
				if err := eng.Apply(ctx, "one-key", &out, hit); err != nil {
					return err
				}
				if out.Results[0].Allowed {
					admitted.Add(1)
				}
				return nil
			})
			if err != nil {
				return fmt.Errorf("window %d: %w", round, err)
			}
			n := admitted.Load()
			if n > limit {
				return fmt.Errorf("window %d admitted %d hits, limit %d", round, n, limit)
			}
			if n == limit {
				full++
			}
		}
		if full*100 < 99*windows {
			return fmt.Errorf("only %d of %d windows admitted exactly %d", full, windows, limit)
		}
		return nil
	}
}

// checkManyPartitions runs 64 goroutines over 32 partitions that use the
// same key names, each goroutine visiting every partition in its own order
// with a batch of a fixed-window hit and a counter increment. Every
// partition must admit exactly its limit and count every increment:
// partitions neither share state nor lose updates.
func checkManyPartitions(ctx context.Context, store engine.Store, _ *testclock.Clock) error {
	const (
		partitions = 32
		goroutines = 64
		limit      = 10
	)
	eng := engine.New(store)
	name := func(p int) string { return "part-" + strconv.Itoa(p) }
	win := engine.Window{Key: "w", Kind: algo.KindFixed, Limit: limit, WindowMs: 60_000}
	var admitted [partitions]atomic.Int64
	err := together(goroutines, func(g int) error {
		var out engine.StepResult
		for i := range partitions {
			p := (g + i) % partitions
			if err := eng.Apply(ctx, name(p), &out, engine.Hit(1, win), engine.Incr("n", 1, 60_000)); err != nil {
				return err
			}
			if out.Results[0].Allowed {
				admitted[p].Add(1)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	var errs []error
	for p := range partitions {
		if n := admitted[p].Load(); n != limit {
			errs = append(errs, fmt.Errorf("partition %d admitted %d hits, want exactly %d", p, n, limit))
		}
		var out engine.StepResult
		if err := eng.Apply(ctx, name(p), &out, engine.Get("n")); err != nil {
			return err
		}
		if got := out.Results[0].Value; got != strconv.Itoa(goroutines) {
			errs = append(errs, fmt.Errorf("partition %d counted %q increments, want %d", p, got, goroutines))
		}
	}
	return errors.Join(errs...)
}

// checkReusedResult checks the Store contract that a caller may reuse one
// StepResult for every batch: each batch's outcome on reused must equal the
// outcome of the same batch on fresh, a twin store, written into a new
// StepResult, including a replayed step decoded over a result that held
// other fields.
func checkReusedResult(ctx context.Context, reused, fresh engine.Store) error {
	pair := engine.Window{Key: "b", Kind: algo.KindLog, Limit: 1, WindowMs: 1000}
	steps := []struct {
		op       string
		replayed bool
		cmds     []engine.Command
	}{
		{"", false, []engine.Command{engine.Set("k", "v", 60_000)}},
		{"", false, []engine.Command{engine.Hit(1, engine.Window{Key: "a", Kind: algo.KindFixed, Limit: 3, WindowMs: 1000}, pair)}},
		{"", false, []engine.Command{engine.Get("k"), engine.TTL("k")}},
		{"op-1", false, []engine.Command{engine.Incr("n", 1, 60_000)}},
		{"", false, []engine.Command{engine.Get("k"), engine.Hit(1, pair)}},
		{"op-1", true, []engine.Command{engine.Incr("n", 1, 60_000)}},
		{"", false, []engine.Command{engine.Get("missing")}},
	}
	var out engine.StepResult
	for i, st := range steps {
		b := engine.Batch{Partition: "p", Commands: st.cmds, OperationID: st.op}
		if err := b.Validate(); err != nil {
			return err
		}
		if st.op != "" {
			s := engine.Step{Partition: b.Partition, Commands: b.Commands}
			h, err := s.Hash()
			if err != nil {
				return err
			}
			b.Hash = h
		}
		var want engine.StepResult
		if err := fresh.Apply(ctx, &b, &want); err != nil {
			return fmt.Errorf("batch %d on the twin: %w", i, err)
		}
		if want.Replayed != st.replayed {
			return fmt.Errorf("batch %d on the twin: replayed = %t, want %t", i, want.Replayed, st.replayed)
		}
		if err := reused.Apply(ctx, &b, &out); err != nil {
			return fmt.Errorf("batch %d: %w", i, err)
		}
		if !sameStep(&out, &want) {
			return fmt.Errorf("batch %d into a reused StepResult:\n\tgot:  %+v\n\twant: %+v", i, out, want)
		}
	}
	return nil
}

// sameStep compares step results, treating empty and nil slices alike.
func sameStep(a, b *engine.StepResult) bool {
	if a.Skipped != b.Skipped || a.Replayed != b.Replayed || a.Denied != b.Denied || len(a.Results) != len(b.Results) {
		return false
	}
	for i := range a.Results {
		if !sameResult(&a.Results[i], &b.Results[i]) {
			return false
		}
	}
	return true
}

// checkClosed closes store and checks that it then answers ErrClosed.
func checkClosed(ctx context.Context, store engine.Store, _ *testclock.Clock) error {
	if err := store.Close(); err != nil {
		return fmt.Errorf("closing the store: %w", err)
	}
	var out engine.StepResult
	if err := engine.New(store).Apply(ctx, "p", &out, engine.Get("k")); !errors.Is(err, engine.ErrClosed) {
		return fmt.Errorf("an Apply on a closed store: %v, want ErrClosed", err)
	}
	return nil
}
