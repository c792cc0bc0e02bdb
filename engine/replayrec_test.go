package engine

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"pgregory.net/rapid"
)

// drawStep draws a step's results over the values that matter to the
// encodings: zero (omitted), small, large and negative numbers, empty and
// non-empty values, absent and present windows.
func drawStep(t *rapid.T) StepResult {
	num := rapid.SampledFrom([]int64{0, 1, -1, 999_999, 1_796_000_000_123, 1 << 62, -1 << 63, 1<<63 - 1})
	st := StepResult{Skipped: rapid.Bool().Draw(t, "skipped"), Replayed: rapid.Bool().Draw(t, "replayed"), Denied: rapid.Bool().Draw(t, "denied")}
	st.Results = rapid.SliceOfN(rapid.Custom(func(t *rapid.T) Result {
		r := Result{
			Allowed: rapid.Bool().Draw(t, "allowed"), Found: rapid.Bool().Draw(t, "found"),
			Value: rapid.String().Draw(t, "value"), Int: num.Draw(t, "int"), TTLMs: num.Draw(t, "ttl"),
			Remaining: num.Draw(t, "remaining"), ResetAt: num.Draw(t, "resetAt"),
			RetryAfterMs: num.Draw(t, "retryAfter"), At: num.Draw(t, "at"),
		}
		r.Windows = rapid.SliceOfN(rapid.Custom(func(t *rapid.T) WindowResult {
			return WindowResult{Allowed: rapid.Bool().Draw(t, "allowed"), Remaining: num.Draw(t, "remaining"), ResetAt: num.Draw(t, "resetAt"), RetryAfterMs: num.Draw(t, "retryAfter")}
		}), 0, 4).Draw(t, "windows")
		return r
	}), 1, 8).Draw(t, "results")
	return st
}

// replayOf returns what decodeReplay gives, for a step of hash want, from
// a record holding data after hash, into an out that held other results before (as a reused
// StepResult does).
func replayOf(t *rapid.T, hash, want [32]byte, data []byte) (StepResult, error) {
	out := StepResult{Results: []Result{{Allowed: true, Value: "stale", Windows: []WindowResult{{Remaining: 7}}}, {Int: 9}}}
	out.Results = out.Results[:rapid.IntRange(0, 2).Draw(t, "stale results")]
	rec := Record{Kind: RecReplay, ExpireAt: 1, Data: append(hash[:], data...)}
	err := decodeReplay(rec, want, &out)
	return out, err
}

// TestReplayCompactReadsAsJSON checks that a replay record in the compact
// form replays exactly the results the JSON form (that of records written
// before it, still read) replays.
func TestReplayCompactReadsAsJSON(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		st := drawStep(t)
		var hash [32]byte
		hash[0] = rapid.Byte().Draw(t, "hash")
		fromJSON, err := replayOf(t, hash, hash, st.AppendJSON(nil))
		if err != nil {
			t.Fatalf("JSON record: %v", err)
		}
		compact := appendReplay(nil, &st)
		fromCompact, err := replayOf(t, hash, hash, compact)
		if err != nil {
			t.Fatalf("compact record %x: %v", compact, err)
		}
		if !reflect.DeepEqual(fromCompact, fromJSON) {
			t.Fatalf("compact replay %+v\n   JSON replay %+v", fromCompact, fromJSON)
		}
		if !fromCompact.Replayed {
			t.Fatal("a replay without Replayed")
		}
		// Every cut of the record, and every byte past it, is refused as
		// corrupt rather than misread.
		cut := rapid.IntRange(1, len(compact)-1).Draw(t, "cut")
		if _, err := replayOf(t, hash, hash, compact[:cut]); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("record cut to %d of %d bytes: %v, want ErrCorrupt", cut, len(compact), err)
		}
		if _, err := replayOf(t, hash, hash, append(compact, 0)); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("record with a byte past its end: %v, want ErrCorrupt", err)
		}
		var other [32]byte
		other[0] = hash[0] + 1
		if _, err := replayOf(t, hash, other, compact); !errors.Is(err, ErrOperationConflict) {
			t.Fatalf("another hash: %v, want ErrOperationConflict", err)
		}
	})
}

// TestReplayCompactIsSmaller shows what the compact form saves on the
// records the server writes most: a step of 8 admitted hits.
func TestReplayCompactIsSmaller(t *testing.T) {
	st := StepResult{}
	for range 8 {
		st.Results = append(st.Results, Result{Allowed: true, Remaining: 999_999, ResetAt: 1_796_000_000_123,
			Windows: []WindowResult{{Allowed: true, Remaining: 999_999, ResetAt: 1_796_000_000_123}}})
	}
	j, c := st.AppendJSON(nil), appendReplay(nil, &st)
	if len(c)*4 > len(j) {
		t.Fatalf("compact %d bytes, JSON %d: want at most a quarter", len(c), len(j))
	}
	var back StepResult
	if err := json.Unmarshal(j, &back); err != nil || !reflect.DeepEqual(back, st) {
		t.Fatalf("JSON round trip: %v", err)
	}
	t.Logf("8 hits: JSON %d bytes, compact %d", len(j), len(c))
}
