package memstore

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"reflect"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/testclock"
)

// A joint step whose batches are all allowed has the effects and results
// of its batches applied one by one; one that denies any batch, or errs,
// has no effect at all. Three stores on one clock run the same random
// steps: joint steps on one store with the reserve fast path and on
// another with the executor alone, and, on a third, each joint step's
// batches applied alone when the first store committed the step (nothing
// when it did not). After every step all three must answer alike and hold
// the same number of records, so a batch of a denied step that had left a
// trace would show in a later step. Plain batches are mixed in. On one
// shard, which the stores sweep alike, the stores are small enough to
// fill and must also hold the same number of records; on several, whose
// partitions each store spreads by a seed of its own (and so sweeps in
// passing at other moments), they have room for every key and only
// their answers are compared. In some runs every key of a shard hashes
// alike, so that batches of one step on one shard create and remove
// records in the same chain.
func TestJointStepMatchesBatchesAlone(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		clock := testclock.New(time.UnixMilli(1_700_000_000_000))
		shards := rapid.SampledFrom([]int{1, 2, 64}).Draw(t, "shards")
		maxKeys := 1000
		if shards == 1 {
			maxKeys = rapid.IntRange(1, 8).Draw(t, "maxKeys")
		}
		collide := rapid.Bool().Draw(t, "collide")
		newStore := func(fast bool) *Store {
			cfg := DefaultConfig()
			cfg.MaxKeys, cfg.Shards, cfg.Clock = maxKeys, shards, clock
			s, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			s.noFastPath = !fast
			if collide {
				s.narrowHashes(0)
			}
			return s
		}
		joint, slow, alone := newStore(true), newStore(false), newStore(true)
		keys := []string{"a", "b", "c"}
		partitions := []string{"p", "q", "r", "s", "t"}

		batch := func(label string) *engine.Batch {
			b := &engine.Batch{Partition: rapid.SampledFrom(partitions).Draw(t, label+"Partition")}
			budget := func(l string) engine.Budget {
				return engine.Budget{
					Key:      rapid.SampledFrom(keys).Draw(t, l+"Key"),
					Limit:    int64(rapid.IntRange(1, 5).Draw(t, l+"Limit")),
					WindowMs: int64(rapid.IntRange(1, 5).Draw(t, l+"Seconds")) * 1000,
				}
			}
			cost := int64(rapid.IntRange(0, 3).Draw(t, label+"Cost"))
			switch rapid.IntRange(0, 5).Draw(t, label+"Shape") {
			case 0, 1:
				b.Commands = []engine.Command{engine.Reserve("", cost, budget(label+"b1"))}
			case 2:
				b.Commands = []engine.Command{engine.Reserve("", cost, budget(label+"b1"), budget(label+"b2"))}
			case 3:
				w := engine.Window{Key: rapid.SampledFrom(keys).Draw(t, label+"wKey"), Kind: algo.KindFixed, Limit: int64(rapid.IntRange(1, 3).Draw(t, label+"wLimit")), WindowMs: 2000}
				b.Commands = []engine.Command{engine.Hit(cost, w)}
			case 4:
				// A value that is not a counter where a budget may be.
				v := rapid.SampledFrom([]string{"1", "x"}).Draw(t, label+"value")
				b.Commands = []engine.Command{engine.Set(rapid.SampledFrom(keys).Draw(t, label+"setKey"), v, int64(rapid.IntRange(1, 4).Draw(t, label+"setSeconds"))*1000)}
			case 5:
				b.Commands = []engine.Command{engine.Del(rapid.SampledFrom(keys).Draw(t, label+"delKey"))}
			}
			return b
		}

		for i := range rapid.IntRange(1, 50).Draw(t, "steps") {
			clock.Advance(time.Duration(rapid.IntRange(0, 2500).Draw(t, "advanceMs")) * time.Millisecond)
			if rapid.IntRange(0, 3).Draw(t, "plain") == 0 {
				b := batch("plain")
				if b.Validate() != nil {
					continue
				}
				applyAll(t, i, b, []*Store{joint, slow, alone}, []string{"the joint store", "the executor", "the store of batches alone"}, shards == 1)
				continue
			}
			n := rapid.IntRange(1, engine.MaxJointBatches).Draw(t, "batches")
			var bs []*engine.Batch
			for k := range n {
				b := batch(fmt.Sprint("j", k))
				if b.Validate() != nil {
					continue
				}
				bs = append(bs, b)
			}
			if len(bs) == 0 {
				continue
			}
			outsJ, outsS := make([]engine.StepResult, len(bs)), make([]engine.StepResult, len(bs))
			errJ := joint.ApplyJoint(context.Background(), bs, outsJ)
			errS := slow.ApplyJoint(context.Background(), bs, outsS)
			if (errJ == nil) != (errS == nil) || errJ != nil && !sameError(errJ, errS) {
				t.Fatalf("step %d: error %v with the fast path, %v with the executor", i, errJ, errS)
			}
			if errJ != nil {
				if !errors.Is(errJ, engine.ErrCapacity) && !errors.Is(errJ, engine.ErrInvalid) && !errors.Is(errJ, engine.ErrWrongType) && !errors.Is(errJ, engine.ErrCorrupt) {
					t.Fatalf("step %d: unexpected error %v", i, errJ)
				}
				continue // no effect: the third store runs nothing
			}
			denied := false
			for k := range bs {
				if !reflect.DeepEqual(normal(outsJ[k]), normal(outsS[k])) {
					t.Fatalf("step %d, batch %d %+v:\nthe fast path %+v\nthe executor  %+v", i, k, *bs[k], outsJ[k], outsS[k])
				}
				denied = denied || outsJ[k].Denied
			}
			if shards == 1 && joint.Len() != slow.Len() {
				t.Fatalf("step %d: %d records with the fast path, %d with the executor", i, joint.Len(), slow.Len())
			}
			if denied {
				continue // no effect: the third store runs nothing
			}
			for k, b := range bs {
				var out engine.StepResult
				if err := alone.Apply(context.Background(), b, &out); err != nil {
					t.Fatalf("step %d, batch %d %+v alone: %v; in the joint step it committed", i, k, *b, err)
				}
				if !reflect.DeepEqual(normal(out), normal(outsJ[k])) {
					t.Fatalf("step %d, batch %d %+v:\njoint %+v\nalone %+v", i, k, *b, outsJ[k], out)
				}
			}
			if shards == 1 && joint.Len() != alone.Len() {
				t.Fatalf("step %d: %d records after the joint step, %d after its batches alone", i, joint.Len(), alone.Len())
			}
		}
	})
}

// A joint step that would create more keys than the store has room for
// creates none, even where one batch alone would fit.
func TestJointStepAtCapacityCreatesNothing(t *testing.T) {
	for _, fast := range []bool{true, false} {
		t.Run(fmt.Sprint("fast=", fast), func(t *testing.T) {
			s, err := New(Config{MaxKeys: 1, Shards: 4, Clock: testclock.New(time.UnixMilli(1_700_000_000_000))})
			if err != nil {
				t.Fatal(err)
			}
			s.noFastPath = !fast
			budget := engine.Budget{Key: "day", Limit: 10, WindowMs: 60_000}
			bs := []*engine.Batch{
				{Partition: "source", Commands: []engine.Command{engine.Reserve("", 1, budget)}},
				{Partition: "principal", Commands: []engine.Command{engine.Reserve("", 1, budget)}},
			}
			outs := make([]engine.StepResult, 2)
			if err := s.ApplyJoint(context.Background(), bs, outs); !errors.Is(err, engine.ErrCapacity) {
				t.Fatalf("a joint step creating 2 keys in a store of 1: %v, want ErrCapacity", err)
			}
			if s.Len() != 0 {
				t.Fatalf("%d records after a joint step refused for capacity, want 0", s.Len())
			}
			if err := s.ApplyJoint(context.Background(), bs[:1], outs); err != nil || outs[0].Denied {
				t.Fatalf("a joint step of the one batch that fits: %v, denied %v", err, outs[0].Denied)
			}
			if s.Len() != 1 {
				t.Fatalf("%d records, want 1", s.Len())
			}
		})
	}
}

// A joint step at capacity makes room by sweeping every shard it holds,
// not only the shards of the batches that create keys: an expired record
// in the shard of a batch that only reads is room, as it is for a batch
// alone, which sweeps other shards. The reading batch's shard has its
// sweeps in passing paused (a sweep examined 4 × SweepBatch of its records
// and found few expired), so only a sweep for room finds the record.
func TestJointStepSweepsEveryShardItHolds(t *testing.T) {
	clock := testclock.New(time.UnixMilli(1_700_000_000_000))
	const maxKeys = 140
	s, err := New(Config{MaxKeys: maxKeys, Shards: 2, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	// reader and writer are partitions on different shards.
	var names [2]string
	for i := 0; names[0] == "" || names[1] == ""; i++ {
		p := fmt.Sprint("p", i)
		if k := maphash.String(s.seed, p) & s.mask; names[k] == "" {
			names[k] = p
		}
	}
	reader, writer := names[0], names[1]
	eng := engine.New(s)
	apply := func(partition string, cmds ...engine.Command) {
		t.Helper()
		var out engine.StepResult
		if err := eng.Apply(context.Background(), partition, &out, cmds...); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 130; i += 2 {
		apply(reader, engine.Set(fmt.Sprint("live", i), "v", 60_000), engine.Set(fmt.Sprint("live", i+1), "v", 60_000))
	}
	apply(reader, engine.Set("soon", "v", 1000), engine.Set("later", "v", 1050))

	clock.Advance(time.Second) // "soon" has expired
	apply(reader, engine.Get("x"))
	if until := s.shards[maphash.String(s.seed, reader)&s.mask].pausedUntil; until <= engine.UnixMilli(clock) {
		t.Fatalf("the reader's shard is not paused (until %d, now %d)", until, engine.UnixMilli(clock))
	}
	for i := 0; s.Len() < maxKeys; i++ {
		apply(writer, engine.Set(fmt.Sprint("fill", i), "v", 60_000))
	}

	clock.Advance(60 * time.Millisecond) // "later" has expired too
	bs := []*engine.Batch{
		{Partition: reader, Commands: []engine.Command{engine.Get("x")}},
		{Partition: writer, Commands: []engine.Command{engine.Set("new", "v", 60_000)}},
	}
	outs := make([]engine.StepResult, len(bs))
	if err := s.ApplyJoint(context.Background(), bs, outs); err != nil {
		t.Fatalf("a joint step creating a key in a full store holding an expired record in a shard it holds: %v", err)
	}
	if s.Len() > maxKeys {
		t.Fatalf("%d records, max %d", s.Len(), maxKeys)
	}
}
