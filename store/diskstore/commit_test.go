package diskstore

import (
	"errors"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/testclock"
)

// TestRoundsKeepBatchesApart sends many batches at one partition at once,
// so they are combined into rounds, some of them failing: each batch must
// see exactly the writes of the batches before it, and a failing batch must
// leave nothing behind.
func TestRoundsKeepBatchesApart(t *testing.T) {
	for _, policy := range []SyncPolicy{SyncAlways, SyncNever} {
		t.Run(string(policy), func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Clock = testclock.At(t0)
			cfg.Sync = policy
			s := openTest(t, cfg)
			apply(t, s, "p", engine.Set("text", "not a number", 60_000))

			const goroutines, each = 32, 50
			seen := make([][]int64, goroutines)
			var wg sync.WaitGroup
			eng := engine.New(s)
			for g := range goroutines {
				wg.Go(func() {
					var out engine.StepResult
					for range each {
						// A batch that fails half way: its first write must
						// not survive.
						err := eng.Apply(t.Context(), "p", &out, engine.Incr("n", 1000, 60_000), engine.Incr("text", 1, 60_000))
						if !errors.Is(err, engine.ErrWrongType) {
							t.Errorf("incr of a text value: %v, want ErrWrongType", err)
							return
						}
						if err := eng.Apply(t.Context(), "p", &out, engine.Incr("n", 1, 60_000)); err != nil {
							t.Error(err)
							return
						}
						seen[g] = append(seen[g], out.Results[0].Int)
					}
				})
			}
			wg.Wait()
			got := map[int64]bool{}
			for _, ints := range seen {
				for _, n := range ints {
					if got[n] {
						t.Fatalf("two batches both saw the counter reach %d", n)
					}
					got[n] = true
				}
			}
			for n := int64(1); n <= goroutines*each; n++ {
				if !got[n] {
					t.Fatalf("no batch saw the counter reach %d", n)
				}
			}
			if v := apply(t, s, "p", engine.Get("n")).Results[0].Value; v != "1600" {
				t.Errorf("n = %s, want 1600 (failed batches wrote nothing)", v)
			}
		})
	}
}
