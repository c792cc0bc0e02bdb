package storetest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/testclock"
)

// The checks of a store that runs joint steps (engine.JointStore), through
// Engine.ApplyReservedJointDeferred, each followed by Engine.Sync. A store
// that does not implement the interface skips them: its callers fall back
// to one batch per partition.

// jointSteps returns a joint step reserving 1 on budget "b" of each of the
// reserved partitions names, with the given limits.
func jointSteps(names []string, limits []int64) []engine.Step {
	steps := make([]engine.Step, len(names))
	for i, name := range names {
		steps[i] = engine.Step{
			Partition: engine.ReservedPartition(name),
			Commands:  []engine.Command{engine.Reserve("", 1, engine.Budget{Key: "b", Limit: limits[i], WindowMs: 60_000})},
		}
	}
	return steps
}

// counterOf reads budget "b" of the reserved partition name: its count, or
// "" when absent.
func counterOf(ctx context.Context, eng *engine.Engine, name string) (string, error) {
	var out engine.StepResult
	if err := eng.ApplyReserved(ctx, name, &out, engine.Get("b")); err != nil {
		return "", err
	}
	return out.Results[0].Value, nil
}

// checkJointAllOrNothing checks that a joint step commits every batch's
// writes when none is denied, none when one is, reports each batch's
// outcome as evaluated, and refuses a partition named twice without
// effect.
func checkJointAllOrNothing(ctx context.Context, store engine.Store, _ *testclock.Clock) error {
	eng := engine.New(store)
	outs := make([]engine.StepResult, 3)
	names := []string{"joint-a", "joint-b", "joint-c"}
	want := func(counts ...string) error {
		for i, name := range names {
			got, err := counterOf(ctx, eng, name)
			if err != nil {
				return err
			}
			if got != counts[i] {
				return fmt.Errorf("partition %s counts %q, want %q", name, got, counts[i])
			}
		}
		return nil
	}
	run := func(limits ...int64) error {
		if err := eng.ApplyReservedJointDeferred(ctx, jointSteps(names, limits), outs); err != nil {
			return err
		}
		return eng.Sync(ctx)
	}
	// Two steps within every limit: both commit on all three partitions.
	for range 2 {
		if err := run(5, 5, 5); err != nil {
			return err
		}
	}
	for i := range names {
		if r := outs[i].Results[0]; !r.Allowed || r.Remaining != 3 || outs[i].Denied {
			return fmt.Errorf("allowed step: batch %d reported %+v, want allowed with 3 left", i, r)
		}
	}
	if err := want("2", "2", "2"); err != nil {
		return fmt.Errorf("after two allowed steps: %w", err)
	}
	// The middle partition refuses: nothing commits anywhere, and the
	// others report what they would have allowed.
	if err := run(5, 2, 5); err != nil {
		return err
	}
	if !outs[1].Denied || outs[1].Results[0].Allowed || outs[1].Results[0].Remaining != 0 {
		return fmt.Errorf("refusing batch reported %+v, want denied with nothing left", outs[1])
	}
	if !outs[0].Results[0].Allowed || !outs[2].Results[0].Allowed {
		return fmt.Errorf("the other batches reported %+v and %+v, want allowed as evaluated", outs[0].Results[0], outs[2].Results[0])
	}
	if err := want("2", "2", "2"); err != nil {
		return fmt.Errorf("after a step one batch refused: %w", err)
	}
	// A partition named twice is invalid and runs nothing.
	twice := jointSteps([]string{"joint-a", "joint-a"}, []int64{5, 5})
	if err := eng.ApplyReservedJointDeferred(ctx, twice, outs); !errors.Is(err, engine.ErrInvalid) {
		return fmt.Errorf("a partition named twice: %v, want ErrInvalid", err)
	}
	return want("2", "2", "2")
}

// checkJointConcurrency runs joint steps on two partitions from 64
// goroutines, half naming them in one order and half in the other, with
// single batches on each partition in between: no deadlock, and the two
// partitions' counts move together. Partition a allows 100; b allows more
// but is also charged by the single batches, so b's count is a's plus the
// single batches that b admitted.
func checkJointConcurrency(ctx context.Context, store engine.Store, _ *testclock.Clock) error {
	const goroutines, tries, limitA = 64, 4, 100
	eng := engine.New(store)
	var joint, singles atomic.Int64
	err := together(goroutines, func(g int) error {
		names, limits := []string{"pair-a", "pair-b"}, []int64{limitA, 1_000_000}
		if g%2 == 1 {
			names, limits = []string{"pair-b", "pair-a"}, []int64{1_000_000, limitA}
		}
		outs := make([]engine.StepResult, 2)
		for range tries {
			if err := eng.ApplyReservedJointDeferred(ctx, jointSteps(names, limits), outs); err != nil {
				return err
			}
			if !outs[0].Denied && !outs[1].Denied {
				joint.Add(1)
			}
			var out engine.StepResult
			b := engine.Reserve("", 1, engine.Budget{Key: "b", Limit: 1_000_000, WindowMs: 60_000})
			if err := eng.ApplyReserved(ctx, "pair-b", &out, b); err != nil {
				return err
			}
			if out.Results[0].Allowed {
				singles.Add(1)
			}
		}
		return eng.Sync(ctx)
	})
	if err != nil {
		return err
	}
	if got := joint.Load(); got != limitA {
		return fmt.Errorf("%d joint steps committed, want exactly pair-a's %d", got, limitA)
	}
	a, err := counterOf(ctx, eng, "pair-a")
	if err != nil {
		return err
	}
	b, err := counterOf(ctx, eng, "pair-b")
	if err != nil {
		return err
	}
	if a != strconv.Itoa(limitA) || b != strconv.FormatInt(limitA+singles.Load(), 10) {
		return fmt.Errorf("pair-a counts %s and pair-b %s, want %d and %d", a, b, limitA, limitA+singles.Load())
	}
	return nil
}
