package diskstore

import (
	"hash/maphash"
	"math"
	"slices"
	"testing"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/testclock"
)

// TestReplayMarks checks the filters by bucket: a partition is a candidate
// in the buckets it was marked in that have not ended, and in no other; a
// slot given to a new bucket forgets the old one's marks; a mark for a
// bucket older than its slot's spoils the filters.
func TestReplayMarks(t *testing.T) {
	m := newReplayMarks()
	// Hashes 1, 2 and 3 set bits in three different blocks: no false
	// positive between them.
	m.mark(10, 1)
	m.mark(11, 2)
	m.mark(11, 1)
	for _, tc := range []struct {
		h     uint64
		ended int64
		want  []int64
	}{
		{1, 9, []int64{10, 11}},
		{2, 9, []int64{11}},
		{1, 10, []int64{11}}, // bucket 10 has ended
		{3, 9, nil},
	} {
		if got, all := m.candidates(nil, tc.h, tc.ended); all || !slices.Equal(got, tc.want) {
			t.Errorf("candidates of %d after bucket %d = %v (all %v), want %v", tc.h, tc.ended, got, all, tc.want)
		}
	}

	m.mark(10+replaySlots, 3) // bucket 10's slot
	if got, _ := m.candidates(nil, 1, 10+replaySlots-1); len(got) != 0 {
		t.Errorf("candidates of 1 once bucket 10's slot went to bucket %d = %v, want none", 10+replaySlots, got)
	}
	if got, _ := m.candidates(nil, 3, 10+replaySlots-1); !slices.Equal(got, []int64{10 + replaySlots}) {
		t.Errorf("candidates of 3 = %v, want [%d]", got, 10+replaySlots)
	}

	m.mark(10, 1) // the clock moved back past the slots' span
	if _, all := m.candidates(nil, 2, 9); !all {
		t.Error("a mark older than its slot's bucket left the filters trusted")
	}
}

// TestLoadSeeksOnlyMarkedBuckets checks that a partition written without
// an operation id is a candidate in no bucket, so its load seeks no
// replay record, while one with a replay record is; and that the
// latter, evicted and loaded again, answers a retry from its record,
// with the marks trusted and with them spoilt.
func TestLoadSeeksOnlyMarkedBuckets(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Clock = testclock.At(t0)
	cfg.SweepInterval = 1 << 62
	s := openTest(t, cfg)
	eng := engine.New(s)
	req := &engine.Request{OperationID: "op-1", Steps: []engine.Step{{
		Partition: "replayed", Commands: []engine.Command{engine.Incr("n", 1, 3_600_000)},
	}}}
	first, err := eng.Do(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	apply(t, s, "plain", engine.Incr("n", 1, 3_600_000))

	ended := lastEnded(engine.UnixMilli(s.clock))
	for name, want := range map[string]int{"replayed": 1, "plain": 0} {
		if got, all := s.replayMarks.candidates(nil, maphash.String(s.seed, name), ended); all || len(got) != want {
			t.Errorf("partition %q is a candidate in buckets %v (all %v), want %d", name, got, all, want)
		}
	}

	for _, spoilt := range []bool{false, true} {
		s.replayMarks.spoilt.Store(spoilt)
		checkpoint(t, s)
		s.evictIdle(math.MaxInt64, 1<<20)
		if resident(s, "replayed") != nil {
			t.Fatal("the partition was not evicted: the test would prove nothing")
		}
		again, err := eng.Do(t.Context(), req)
		if err != nil {
			t.Fatal(err)
		}
		if got := again.Steps[0]; !got.Replayed || got.Results[0].Int != first.Steps[0].Results[0].Int {
			t.Errorf("spoilt %v: the retry after a reload = %+v, want the recorded result %d, replayed", spoilt, got, first.Steps[0].Results[0].Int)
		}
	}
	if got := apply(t, s, "replayed", engine.Incr("n", 1, 3_600_000)).Results[0].Int; got != 2 {
		t.Errorf("the counter reads %d after one charge and two retries, then one more charge; want 2", got)
	}
}
