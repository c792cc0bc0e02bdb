package engine

import (
	"bytes"
	"encoding/json"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// TestAppendJSONIsJSONMarshal checks the replay record's encoding, and the
// RPC answer's, against json.Marshal on drawn results.
func TestAppendJSONIsJSONMarshal(t *testing.T) {
	num := rapid.SampledFrom([]int64{0, 1, -1, 999_999, 1 << 62, -1 << 63})
	rapid.Check(t, func(t *rapid.T) {
		steps := rapid.SliceOfN(rapid.Custom(func(t *rapid.T) StepResult {
			st := StepResult{Skipped: rapid.Bool().Draw(t, "skipped"), Replayed: rapid.Bool().Draw(t, "replayed"), Denied: rapid.Bool().Draw(t, "denied")}
			if rapid.Bool().Draw(t, "nil results") {
				return st
			}
			st.Results = rapid.SliceOfN(rapid.Custom(func(t *rapid.T) Result {
				r := Result{
					Allowed: rapid.Bool().Draw(t, "allowed"), Found: rapid.Bool().Draw(t, "found"),
					Value: rapid.String().Draw(t, "value"), Int: num.Draw(t, "int"), TTLMs: num.Draw(t, "ttl"),
					Remaining: num.Draw(t, "remaining"), ResetAt: num.Draw(t, "resetAt"),
					RetryAfterMs: num.Draw(t, "retryAfter"), At: num.Draw(t, "at"),
				}
				r.Windows = rapid.SliceOfN(rapid.Custom(func(t *rapid.T) WindowResult {
					return WindowResult{Allowed: rapid.Bool().Draw(t, "allowed"), Remaining: num.Draw(t, "remaining"), ResetAt: num.Draw(t, "resetAt"), RetryAfterMs: num.Draw(t, "retryAfter")}
				}), -1, 4).Draw(t, "windows")
				return r
			}), 0, 8).Draw(t, "results")
			return st
		}), 0, 4).Draw(t, "steps")
		for i := range steps {
			want, _ := json.Marshal(&steps[i])
			if got := steps[i].AppendJSON([]byte("x")); !bytes.Equal(got[1:], want) {
				t.Fatalf("StepResult.AppendJSON = %s\njson.Marshal        %s", got[1:], want)
			}
		}
		r := &Response{Steps: steps}
		if rapid.Bool().Draw(t, "nil steps") {
			r.Steps = nil
		}
		want, _ := json.Marshal(r)
		if got := r.AppendJSON(nil); !bytes.Equal(got, want) {
			t.Fatalf("Response.AppendJSON = %s\njson.Marshal      %s", got, want)
		}
	})
}

// TestAppendMinimalJSON checks the minimal form against its definition, on
// drawn commands and results: json.Marshal of the response without the
// window lists that hold one window equal to their result's own fields; and
// that RestoreWindows, given the commands, gives back the whole response.
func TestAppendMinimalJSON(t *testing.T) {
	num := rapid.SampledFrom([]int64{0, 1, 7, 999_999})
	window := rapid.Custom(func(t *rapid.T) WindowResult {
		return WindowResult{Allowed: rapid.Bool().Draw(t, "allowed"), Remaining: num.Draw(t, "remaining"), ResetAt: num.Draw(t, "resetAt"), RetryAfterMs: num.Draw(t, "retryAfter")}
	})
	rapid.Check(t, func(t *rapid.T) {
		var steps []Step
		resp := &Response{}
		for range rapid.IntRange(0, 3).Draw(t, "steps") {
			var st Step
			var sr StepResult
			for range rapid.IntRange(0, 6).Draw(t, "commands") {
				n := rapid.IntRange(1, MaxWindowsPerHit).Draw(t, "windows")
				var c Command
				switch rapid.IntRange(0, 2).Draw(t, "op") {
				case 0:
					c = Command{Op: OpHit, Windows: make([]Window, n)}
				case 1:
					c = Command{Op: OpReserve, Budgets: make([]Budget, n)}
				default:
					c, n = Command{Op: OpIncr}, 0
				}
				r := Result{Allowed: rapid.Bool().Draw(t, "allowed"), Int: num.Draw(t, "int")}
				if n > 0 {
					r.Windows = rapid.SliceOfN(window, n, n).Draw(t, "window results")
					if rapid.Bool().Draw(t, "as the engine answers") {
						// The result's fields summarise its windows, as the
						// engine's do; for one window they are its own.
						w := r.Windows[0]
						r.Allowed, r.Remaining, r.ResetAt, r.RetryAfterMs = w.Allowed, w.Remaining, w.ResetAt, w.RetryAfterMs
					}
				}
				st.Commands = append(st.Commands, c)
				sr.Results = append(sr.Results, r)
			}
			steps = append(steps, st)
			resp.Steps = append(resp.Steps, sr)
		}

		model := Response{Steps: slices.Clone(resp.Steps)}
		for i, st := range resp.Steps {
			model.Steps[i].Results = slices.Clone(st.Results)
			for j := range model.Steps[i].Results {
				r := &model.Steps[i].Results[j]
				if len(r.Windows) == 1 && r.Windows[0] == (WindowResult{Allowed: r.Allowed, Remaining: r.Remaining, ResetAt: r.ResetAt, RetryAfterMs: r.RetryAfterMs}) {
					r.Windows = nil
				}
			}
		}
		want, _ := json.Marshal(&model)
		got := resp.AppendMinimalJSON([]byte("x"))[1:]
		if !bytes.Equal(got, want) {
			t.Fatalf("AppendMinimalJSON = %s\nwant               %s", got, want)
		}

		var back Response
		if err := json.Unmarshal(got, &back); err != nil {
			t.Fatal(err)
		}
		back.RestoreWindows(steps)
		full, _ := json.Marshal(resp)
		if restored, _ := json.Marshal(&back); !bytes.Equal(restored, full) {
			t.Fatalf("restored %s\nwant     %s", restored, full)
		}
		for i := range back.Steps {
			for j := range back.Steps[i].Results {
				if ws := back.Steps[i].Results[j].Windows; cap(ws) > len(ws) && len(ws) == 1 {
					t.Fatalf("step %d result %d: a restored list of capacity %d; appending to it would write into another's", i, j, cap(ws))
				}
			}
		}
	})
}

// TestRestoreWindowsLeavesOthers checks that RestoreWindows adds a window
// only where the minimal form may have left one out: not to a command of
// several windows, not to a result that holds its list, and not to results
// beyond the commands given.
func TestRestoreWindowsLeavesOthers(t *testing.T) {
	steps := []Step{{Commands: []Command{
		{Op: OpHit, Windows: make([]Window, 2)},
		{Op: OpHit, Windows: make([]Window, 1)},
		{Op: OpGet},
	}}}
	kept := []WindowResult{{Allowed: true, Remaining: 3, ResetAt: 9}}
	resp := Response{Steps: []StepResult{
		{Results: []Result{{Allowed: true, Remaining: 1}, {Allowed: true, Remaining: 2, Windows: kept}, {Allowed: true}, {Allowed: true}}},
		{Results: []Result{{Allowed: true}}},
	}}
	resp.RestoreWindows(steps)
	rs := resp.Steps[0].Results
	if rs[0].Windows != nil || rs[2].Windows != nil || rs[3].Windows != nil || resp.Steps[1].Results[0].Windows != nil {
		t.Fatalf("windows restored where none were left out: %+v", resp)
	}
	if len(rs[1].Windows) != 1 || rs[1].Windows[0] != kept[0] {
		t.Fatalf("a result's own list replaced: %+v", rs[1].Windows)
	}
}
