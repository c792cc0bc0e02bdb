package engine

import (
	"bytes"
	"encoding/json"
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
