package engine_test

import (
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/engine"
)

// records is a partition held in a map that is never swept, so expired
// records stay visible to the Executor.
type records map[string]engine.Record

func (r records) Get(key string) (engine.Record, bool) {
	rec, ok := r[key]
	return rec, ok
}

// replayKey is the engine's reserved key of step 0 of operation "op".
const replayKey = "\x00op\x00op\x000"

// TestExecutorIgnoresExpiredRecords checks that the Executor itself treats
// expired records as absent, whether or not its store has swept them: an
// expired "0" is not a stored zero, and an expired replay record neither
// replays nor conflicts.
func TestExecutorIgnoresExpiredRecords(t *testing.T) {
	const now = t0
	cmds := []engine.Command{engine.Get("k"), engine.Incr("k", 5, minute), engine.Hit(1, fixed("w", 1, hour))}
	full := algo.WindowState{Start: now, Count: 1}
	view := records{
		"k":       {Kind: engine.RecValue, ExpireAt: now, Data: []byte("0")},
		"w":       {Kind: engine.RecFixed, ExpireAt: now, Data: full.AppendBinary(algo.KindFixed, nil)},
		replayKey: {Kind: engine.RecReplay, ExpireAt: now, Data: make([]byte, 32)},
	}
	b := engine.Batch{Partition: "p", Commands: cmds, OperationID: "op", Hash: [32]byte{1}}
	var x engine.Executor
	var out engine.StepResult
	writes, err := x.Run(view, now, &b, &out)
	if err != nil {
		t.Fatalf("Run = %v: an expired replay record was taken as live", err)
	}
	if out.Replayed {
		t.Fatal("an expired replay record was replayed")
	}
	get, incr, hit := out.Results[0], out.Results[1], out.Results[2]
	if get.Found || incr.Found || incr.Int != 5 || !hit.Allowed {
		t.Fatalf("results = %+v: expired records were read as live", out.Results)
	}
	if w := written(writes, "k"); w == nil || w.Rec.ExpireAt != now+minute {
		t.Errorf("counter written as %+v, want a fresh one expiring in a minute", w)
	}
	if w := written(writes, replayKey); w == nil || w.Rec.ExpireAt != now+engine.ReplayTTL.Milliseconds() {
		t.Errorf("replay record written as %+v, want one expiring after ReplayTTL", w)
	}

	// One millisecond earlier the same records are live: the window is
	// full, the counter is a stored zero and the replay record conflicts.
	if _, err := x.Run(view, now-1, &b, &out); !errors.Is(err, engine.ErrOperationConflict) {
		t.Fatalf("Run before expiry = %v, want ErrOperationConflict", err)
	}
	b.OperationID = ""
	if _, err := x.Run(view, now-1, &b, &out); err != nil {
		t.Fatal(err)
	}
	get, incr, hit = out.Results[0], out.Results[1], out.Results[2]
	if !get.Found || get.Value != "0" || !incr.Found || incr.Int != 5 || hit.Allowed {
		t.Fatalf("results before expiry = %+v", out.Results)
	}
}

// TestExecutorWritesNothingOnError checks that a failing batch hands its
// store no write to commit.
func TestExecutorWritesNothingOnError(t *testing.T) {
	view := records{"w": {Kind: engine.RecFixed, ExpireAt: t0 + minute, Data: algo.WindowState{Start: t0, Count: 1}.AppendBinary(algo.KindFixed, nil)}}
	b := engine.Batch{Partition: "p", OperationID: "op", Commands: []engine.Command{
		engine.Set("a", "1", minute), engine.Incr("b", 1, minute), engine.Incr("w", 1, minute), engine.Set("c", "1", minute),
	}}
	var x engine.Executor
	var out engine.StepResult
	writes, err := x.Run(view, t0, &b, &out)
	if !errors.Is(err, engine.ErrWrongType) || len(writes) != 0 {
		t.Fatalf("Run = %d writes, %v; want none and ErrWrongType", len(writes), err)
	}
}

func written(writes []engine.Write, key string) *engine.Write {
	for i := len(writes) - 1; i >= 0; i-- {
		if writes[i].Key == key {
			return &writes[i]
		}
	}
	return nil
}

// TestValueSemantics covers the kv rules the package documentation states:
// an expired record reads as absent while a stored "0" is found, incr's TTL
// applies only on creation, keepTtl keeps an expiry, and nx/xx report what
// they found.
func TestValueSemantics(t *testing.T) {
	f := newFixture(t)
	res := f.run(t, "p",
		engine.Incr("zero", 0, 2*second),
		engine.Incr("n", 1, 10*second),
		engine.SetIf("v", "a", 10*second, engine.SetNX),
	).Results
	if res[0].Found || res[0].Int != 0 || res[1].Int != 1 || !res[2].Allowed || res[2].Found {
		t.Fatalf("setup = %+v", res)
	}

	f.clock.Advance(time.Second)
	res = f.run(t, "p",
		engine.Get("zero"),
		engine.Incr("n", 1, hour), // keeps its 10 s
		engine.TTL("n"),
		engine.Command{Op: engine.OpSet, Key: "v", Value: "b", TTLMs: hour, KeepTTL: true, Mode: engine.SetXX},
		engine.TTL("v"),
		engine.Command{Op: engine.OpSet, Key: "fresh", Value: "c", TTLMs: 5 * second, KeepTTL: true},
		engine.TTL("fresh"),
	).Results
	if !res[0].Found || res[0].Value != "0" {
		t.Errorf("stored zero = %+v, want found", res[0])
	}
	if !res[1].Found || res[1].Int != 2 || res[2].TTLMs != 9*second {
		t.Errorf("incr of a live counter = %+v, ttl %d ms; want 2 with 9000 ms left", res[1], res[2].TTLMs)
	}
	if !res[3].Allowed || !res[3].Found || res[4].TTLMs != 9*second {
		t.Errorf("xx keepTtl = %+v, ttl %d ms; want applied with 9000 ms left", res[3], res[4].TTLMs)
	}
	if !res[5].Allowed || res[5].Found || res[6].TTLMs != 5*second {
		t.Errorf("keepTtl on an absent key = %+v, ttl %d ms; want its own 5000 ms", res[5], res[6].TTLMs)
	}

	f.clock.Advance(time.Second) // "zero" expires now
	res = f.run(t, "p",
		engine.Get("zero"),
		engine.TTL("zero"),
		engine.Incr("zero", 3, minute),
		engine.TTL("zero"),
		engine.Set("v", "d", hour), // without keepTtl: a new expiry
		engine.TTL("v"),
	).Results
	if res[0].Found || res[1].Found {
		t.Errorf("expired zero = %+v, %+v; want absent", res[0], res[1])
	}
	if res[2].Found || res[2].Int != 3 || res[3].TTLMs != minute {
		t.Errorf("incr after expiry = %+v, ttl %d; want a new counter of 3 for a minute", res[2], res[3].TTLMs)
	}
	if !res[4].Found || res[5].TTLMs != hour {
		t.Errorf("set over a live value = %+v, ttl %d; want its own hour", res[4], res[5].TTLMs)
	}
}
