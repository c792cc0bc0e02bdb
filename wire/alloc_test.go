package wire

import (
	"encoding/json"
	"testing"
)

// TestDecodeResponseAllocationsDoNotGrow checks that an answer's steps,
// results and window results are decoded into backing arrays sized once
// from the body: an answer of 4 steps of 8 results, each with its window,
// takes no more allocations than one of a single result.
func TestDecodeResponseAllocationsDoNotGrow(t *testing.T) {
	allocs := func(steps, cmds int) float64 {
		body, err := json.Marshal(benchResponse(steps, cmds))
		if err != nil {
			t.Fatal(err)
		}
		return testing.AllocsPerRun(50, func() {
			var r Response
			if err := DecodeResponse(body, &r); err != nil {
				t.Fatal(err)
			}
			if got := len(r.Steps[steps-1].Results[cmds-1].Windows); got != 1 {
				t.Fatalf("%d window results, want 1", got)
			}
		})
	}
	if small, large := allocs(1, 1), allocs(4, 8); large > small {
		t.Errorf("4 steps of 8 results: %v allocations; 1 result: %v", large, small)
	}
}
