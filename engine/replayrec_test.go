package engine

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
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
		if rapid.Bool().Draw(t, "mirrored") {
			// The window of a hit of one window: the result's own fields,
			// which the record leaves out.
			r.Windows = []WindowResult{r.window()}
		}
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

// TestReplayMirroredLeavesOutRepeatedWindows checks that a record leaves
// out exactly the windows that repeat their results (every hit of one
// window, admitted or denied) and replays them all the same.
func TestReplayMirroredLeavesOutRepeatedWindows(t *testing.T) {
	hit := func(allowed bool, remaining, retry int64) Result {
		r := Result{Allowed: allowed, Remaining: remaining, ResetAt: 1_796_000_000_123, RetryAfterMs: retry}
		r.Windows = []WindowResult{r.window()}
		return r
	}
	var st, bare StepResult
	for i := range 8 {
		st.Results = append(st.Results, hit(i%3 != 0, int64(i*1000), int64(i%3*250)))
		bare.Results = append(bare.Results, st.Results[i])
		bare.Results[i].Windows = nil
	}
	rec := appendReplay(nil, &st)
	if len(rec) != len(appendReplay(nil, &bare)) {
		t.Errorf("8 hits of one window in %d bytes, the same results with no windows in %d: the windows cost bytes",
			len(rec), len(appendReplay(nil, &bare)))
	}
	var hash [32]byte
	out := StepResult{}
	if err := decodeReplay(Record{Kind: RecReplay, Data: append(hash[:], rec...)}, hash, &out); err != nil {
		t.Fatal(err)
	}
	st.Replayed = true
	if !reflect.DeepEqual(out, st) {
		t.Fatalf("replayed %+v\n    want %+v", out, st)
	}

	// A window that differs from its result, in any field, is written.
	for name, change := range map[string]func(*WindowResult){
		"allowed":      func(w *WindowResult) { w.Allowed = !w.Allowed },
		"remaining":    func(w *WindowResult) { w.Remaining++ },
		"resetAt":      func(w *WindowResult) { w.ResetAt++ },
		"retryAfterMs": func(w *WindowResult) { w.RetryAfterMs++ },
	} {
		one := StepResult{Results: []Result{hit(true, 5, 0)}}
		change(&one.Results[0].Windows[0])
		rec := appendReplay(nil, &one)
		out := StepResult{}
		if err := decodeReplay(Record{Kind: RecReplay, Data: append(hash[:], rec...)}, hash, &out); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !reflect.DeepEqual(out.Results, one.Results) {
			t.Errorf("a window of another %s replayed as %+v, want %+v", name, out.Results, one.Results)
		}
	}
}

// TestReplayCompactFormOneStillRead reads a record written in the first
// compact form (replayCompact, before windows that repeat their results
// were left out), as stores written before replayMirrored hold them.
func TestReplayCompactFormOneStillRead(t *testing.T) {
	// Written by appendReplay before replayMirrored: a denied step of an
	// admitted hit of one window, a denied hit of two and a kv.get.
	rec, err := hex.DecodeString("0104032108c0c9909fc568010108c0c9909fc5686000d0af899fc568f403020112c0c9909fc5680200d0af899fc568f4031f00017606904e00")
	if err != nil {
		t.Fatal(err)
	}
	want := StepResult{Replayed: true, Denied: true, Results: []Result{
		{Allowed: true, Remaining: 4, ResetAt: 1_796_000_060_000, Windows: []WindowResult{{Allowed: true, Remaining: 4, ResetAt: 1_796_000_060_000}}},
		{Remaining: 0, ResetAt: 1_796_000_001_000, RetryAfterMs: 250, Windows: []WindowResult{
			{Allowed: true, Remaining: 9, ResetAt: 1_796_000_060_000}, {ResetAt: 1_796_000_001_000, RetryAfterMs: 250}}},
		{Allowed: true, Found: true, Value: "v", Int: 3, TTLMs: 5000},
	}}
	var hash [32]byte
	out := StepResult{}
	if err := decodeReplay(Record{Kind: RecReplay, Data: append(hash[:], rec...)}, hash, &out); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(out, want) {
		t.Fatalf("replayed %+v\n    want %+v", out, want)
	}
	// Written today, the same results take the newer form, and fewer bytes.
	want.Replayed = false
	if now := appendReplay(nil, &want); now[0] != replayMirrored || len(now) >= len(rec) {
		t.Errorf("the same step written now: form %d in %d bytes, want form %d in fewer than %d", now[0], len(now), replayMirrored, len(rec))
	}
}

// FuzzReplayRecord reads arbitrary bytes as a replay record's results: the
// reader must refuse what it cannot read as ErrCorrupt, never panic, and
// whatever it reads must write back, in the current form, to a record that
// replays the same results.
func FuzzReplayRecord(f *testing.F) {
	for _, s := range []string{
		"0104032108c0c9909fc568010108c0c9909fc5686000d0af899fc568f403020112c0c9909fc5680200d0af899fc568f4031f00017606904e00",
		"0200012108c0c9909fc56800",
		"02000121080103",
	} {
		b, _ := hex.DecodeString(s)
		f.Add(b)
	}
	f.Add([]byte(`{"results":[{"allowed":true,"remaining":1,"windows":[{"allowed":true,"remaining":1,"resetAt":2}]}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var hash [32]byte
		var out StepResult
		err := decodeReplay(Record{Kind: RecReplay, Data: append(hash[:], data...)}, hash, &out)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("record %x: %v, want ErrCorrupt", data, err)
			}
			return
		}
		out.Replayed = false // as the step it records ran
		rec := appendReplay(nil, &out)
		var again StepResult
		if err := decodeReplay(Record{Kind: RecReplay, Data: append(hash[:], rec...)}, hash, &again); err != nil {
			t.Fatalf("record %x, written back as %x: %v", data, rec, err)
		}
		again.Replayed = false
		if !reflect.DeepEqual(normalWindows(again), normalWindows(out)) {
			t.Fatalf("record %x replays\n%+v\nwritten back as %x, it replays\n%+v", data, out, rec, again)
		}
	})
}

// normalWindows returns st with empty lists of results and windows nil: a
// record holds no difference between the two.
func normalWindows(st StepResult) StepResult {
	if len(st.Results) == 0 {
		st.Results = nil
	}
	st.Results = slices.Clone(st.Results)
	for i := range st.Results {
		if len(st.Results[i].Windows) == 0 {
			st.Results[i].Windows = nil
		}
	}
	return st
}
