package engine_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/engine"
)

// TestDoMakesResultsOnce checks that Engine.Do makes a request's results,
// and their windows, in a fixed number of allocations: a request of 4
// steps of 8 hits, each hit on 2 windows, allocates no more than one of 4
// steps of 1 hit on 1 window. Growing each step's results and each hit's
// windows one append at a time would cost more allocations the more
// results and windows there are.
func TestDoMakesResultsOnce(t *testing.T) {
	ctx := context.Background()
	allocs := func(cmds, windows int) float64 {
		eng := engine.New(&lockedStore{view: mapView{}, now: benchNow})
		req := &engine.Request{OperationID: "results-once", Steps: make([]engine.Step, 4)}
		for i := range req.Steps {
			req.Steps[i].Partition = "client:" + strconv.Itoa(i)
			for j := range cmds {
				ws := make([]engine.Window, windows)
				for k := range ws {
					ws[k] = engine.Window{Key: "w-" + strconv.Itoa(j) + "-" + strconv.Itoa(k), Kind: algo.KindGCRA, Limit: algo.MaxLimit, WindowMs: algo.MaxWindow}
				}
				req.Steps[i].Commands = append(req.Steps[i].Commands, engine.Hit(1, ws...))
			}
		}
		return testing.AllocsPerRun(200, func() {
			resp, err := eng.Do(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			if got := len(resp.Steps[3].Results[cmds-1].Windows); got != windows {
				t.Fatalf("%d window results, want %d", got, windows)
			}
		})
	}
	// Under the race detector sync.Pool drops a share of what is put
	// back at random, so the step hashes' pooled buffers are sometimes
	// made afresh: the two averages may differ by that noise, a few
	// allocations, where growing results and windows one by one would
	// differ by some 70.
	const noise = 2
	small, large := allocs(1, 1), allocs(8, 2)
	if large > small+noise {
		t.Errorf("4 steps of 8 hits on 2 windows: %v allocations; 4 steps of 1 hit on 1 window: %v", large, small)
	}
}
