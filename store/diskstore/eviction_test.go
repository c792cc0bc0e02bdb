package diskstore

import (
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/testclock"
)

// workload is a random sequence of batches over a few partitions and every
// kind of record, with the clock moving between them.
type workload struct {
	rng   *rand.Rand
	clock *testclock.Clock
}

func (w *workload) batch() (string, []engine.Command) {
	r := w.rng
	part := fmt.Sprintf("p%d", r.IntN(40))
	key := func(kind string) string { return fmt.Sprintf("%s%d", kind, r.IntN(3)) }
	var cmds []engine.Command
	for range 1 + r.IntN(3) {
		switch r.IntN(12) {
		case 0:
			kinds := []algo.Kind{algo.KindFixed, algo.KindSliding, algo.KindLog, algo.KindGCRA}
			k := kinds[r.IntN(len(kinds))]
			cmds = append(cmds, engine.Hit(1+r.Int64N(2), engine.Window{Key: k.String() + key("w"), Kind: k, Limit: 4, WindowMs: 5_000}))
		case 1:
			cmds = append(cmds, engine.Set(key("v"), fmt.Sprint(r.IntN(100)), 1000+r.Int64N(9000)))
		case 2:
			cmds = append(cmds, engine.SetIf(key("v"), "nx", 3000, engine.SetNX))
		case 3:
			cmds = append(cmds, engine.Get(key("v")), engine.TTL(key("c")))
		case 4:
			cmds = append(cmds, engine.Incr(key("c"), 1+r.Int64N(5), 4000))
		case 5:
			cmds = append(cmds, engine.Del(key("v")))
		case 6:
			cmds = append(cmds, engine.Expire(key("v"), 1000+r.Int64N(9000)))
		case 7:
			cmds = append(cmds, engine.Reserve(key("r"), 1, engine.Budget{Key: key("b"), Limit: 3, WindowMs: 6000, Refundable: true}))
		case 8:
			cmds = append(cmds, engine.Refund(key("r")))
		case 9:
			cmds = append(cmds, engine.Acquire(key("g"), key("lease"), 2, 3000))
		case 10:
			cmds = append(cmds, engine.Release(key("g"), key("lease")))
		case 11:
			cmds = append(cmds, engine.Pace{Key: key("pace"), Limit: 3, WindowMs: 4000}.Take(1, 2000))
		}
	}
	return part, cmds
}

// compare runs the workload's next batch on a and on b, as one batch or,
// one time in four, as a replay-safe request of one or two steps whose
// operation id comes from a small pool (so that requests replay, conflict
// and outlive their records), and fails the test unless both answer alike.
func (w *workload) compare(t *testing.T, i int, a, b *Store) {
	t.Helper()
	ctx := t.Context()
	if w.rng.IntN(4) > 0 {
		part, cmds := w.batch()
		var outA, outB engine.StepResult
		errA := engine.New(a).Apply(ctx, part, &outA, cmds...)
		errB := engine.New(b).Apply(ctx, part, &outB, cmds...)
		if fmt.Sprint(errA) != fmt.Sprint(errB) || !reflect.DeepEqual(outA, outB) {
			t.Fatalf("batch %d on %s %+v:\nfirst store: %+v, %v\nsecond store: %+v, %v", i, part, cmds, outA, errA, outB, errB)
		}
		return
	}
	req := &engine.Request{OperationID: fmt.Sprintf("op-%d", w.rng.IntN(8))}
	for range 1 + w.rng.IntN(2) {
		part, cmds := w.batch()
		req.Steps = append(req.Steps, engine.Step{Partition: part, Commands: cmds})
	}
	respA, errA := engine.New(a).Do(ctx, req)
	respB, errB := engine.New(b).Do(ctx, req)
	if fmt.Sprint(errA) != fmt.Sprint(errB) || !reflect.DeepEqual(respA, respB) {
		t.Fatalf("request %d %+v:\nfirst store: %+v, %v\nsecond store: %+v, %v", i, req, respA, errA, respB, errB)
	}
}

// TestEvictionIsInvisible runs one random workload on a store that evicts
// partitions constantly and on one that never does: every answer must be
// the same.
func TestEvictionIsInvisible(t *testing.T) {
	clock := testclock.At(t0)
	newStore := func() *Store {
		cfg := DefaultConfig()
		cfg.Clock = clock
		cfg.Sync = SyncNever
		return openTest(t, cfg)
	}
	evicting, resident := newStore(), newStore()
	w := &workload{rng: rand.New(rand.NewPCG(1, 2)), clock: clock}
	for i := range 3000 {
		w.compare(t, i, evicting, resident)
		// Every batch on the evicting store reloads its partition.
		evicting.evictIdle(math.MaxInt64, math.MaxInt)
		clock.Advance(time.Duration(w.rng.IntN(500)) * time.Millisecond)
	}
	if n := resident.Resident(); n != 40 {
		t.Errorf("%d partitions resident, want all 40", n)
	}
}
