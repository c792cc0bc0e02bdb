package memstore

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/testclock"
	"github.com/sluicehq/sluice/store/storetest"
)

// The executor alone still passes the conformance suite, so that a batch
// the fast path leaves to it, and every other store sharing it, is held to
// the same cases.
func TestConformanceWithoutFastPath(t *testing.T) {
	storetest.Run(t, func(t *testing.T, clock engine.Clock) engine.Store {
		cfg := DefaultConfig()
		cfg.Clock = clock
		s, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		s.noFastPath = true
		return s
	})
}

// The fast path gives exactly the results, errors and effects of the
// executor: two stores on one clock, one of them with the fast path off,
// run the same random batches and must answer alike after every one, and
// hold the same number of keys. The batches mix the fast path's shape (one
// window, perhaps a kv.ttl of its key) with its neighbours (a log window,
// two windows, a kv.ttl of another key, a replay record) and with records
// of other kinds under the window keys, on a store small enough to fill.
// The same holds for the reserve fast path: a res.reserve of one or two
// budgets, with and without a receipt, over counters that exist, are
// missing, have expired, do not parse or are windows. The clock moves on,
// and at times steps back.
func TestFastPathMatchesExecutor(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		clock := testclock.New(time.UnixMilli(1_700_000_000_000))
		maxKeys := rapid.IntRange(1, 6).Draw(t, "maxKeys")
		newStore := func(fast bool) *Store {
			cfg := DefaultConfig()
			cfg.MaxKeys, cfg.Shards, cfg.Clock = maxKeys, 1, clock // one shard: the stores sweep alike
			s, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			s.noFastPath = !fast
			return s
		}
		fast, slow := newStore(true), newStore(false)
		kinds := []algo.Kind{algo.KindFixed, algo.KindSliding, algo.KindGCRA, algo.KindLog}
		keys := []string{"a", "b"}
		partitions := []string{"p", "q", "r"}
		// Half the runs are mostly reserves, over windows and values.
		reserves := rapid.Bool().Draw(t, "reserves")

		for i := range rapid.IntRange(1, 60).Draw(t, "batches") {
			clock.Advance(time.Duration(rapid.IntRange(-3000, 3000).Draw(t, "advanceMs")) * time.Millisecond)
			window := func(label string) engine.Window {
				return engine.Window{
					Key:      rapid.SampledFrom(keys).Draw(t, label+"Key"),
					Kind:     rapid.SampledFrom(kinds).Draw(t, label+"Kind"),
					Limit:    int64(rapid.IntRange(1, 4).Draw(t, label+"Limit")),
					WindowMs: int64(rapid.IntRange(1, 5).Draw(t, label+"Seconds")) * 1000,
				}
			}
			w := window("w")
			cost := int64(rapid.IntRange(0, 3).Draw(t, "cost"))
			b := engine.Batch{Partition: rapid.SampledFrom(partitions).Draw(t, "partition")}
			budget := func(label string) engine.Budget {
				return engine.Budget{
					Key:      rapid.SampledFrom(keys).Draw(t, label+"Key"),
					Limit:    int64(rapid.IntRange(1, 5).Draw(t, label+"Limit")),
					WindowMs: int64(rapid.IntRange(1, 5).Draw(t, label+"Seconds")) * 1000,
				}
			}
			shape := rapid.IntRange(0, 6).Draw(t, "shape")
			if reserves {
				shape = rapid.IntRange(5, 12).Draw(t, "reserveShape")
			}
			switch shape {
			case 0, 1:
				b.Commands = []engine.Command{engine.Hit(cost, w)}
			case 2, 3:
				b.Commands = []engine.Command{engine.Hit(cost, w), engine.TTL(w.Key)}
			case 4:
				b.Commands = []engine.Command{engine.Hit(cost, w), engine.TTL(rapid.SampledFrom(keys).Draw(t, "ttlKey"))}
			case 5:
				// Another kind of record where a window may be.
				b.Commands = []engine.Command{engine.Set(w.Key, "v", int64(rapid.IntRange(1, 4).Draw(t, "setSeconds"))*1000)}
			case 6:
				b.Commands = []engine.Command{engine.Hit(cost, w)}
				b.OperationID, b.Step = "op", i
			case 7, 8:
				b.Commands = []engine.Command{engine.Reserve("", cost, budget("b1"))}
			case 9, 10:
				b.Commands = []engine.Command{engine.Reserve("", cost, budget("b1"), budget("b2"))}
			case 11:
				// A receipt, which the fast path leaves to the executor.
				b.Commands = []engine.Command{engine.Reserve("rcpt", cost, budget("b1"))}
			case 12:
				// A counter, or a value that is not one, where a budget may be.
				v := rapid.SampledFrom([]string{"0", "3", "-2", "x", "07"}).Draw(t, "value")
				b.Commands = []engine.Command{engine.Set(rapid.SampledFrom(keys).Draw(t, "setKey"), v, int64(rapid.IntRange(1, 4).Draw(t, "setSeconds"))*1000)}
			}
			if err := b.Validate(); err != nil {
				continue // a cost the window's kind refuses, or a repeated key
			}
			applyBoth(t, i, &b, fast, "the fast path", slow, "the executor")
		}
	})
}

// sameError reports whether a and b are the same engine error.
func sameError(a, b error) bool {
	for _, sentinel := range []error{engine.ErrCapacity, engine.ErrWrongType, engine.ErrCorrupt, engine.ErrInvalid} {
		if errors.Is(a, sentinel) != errors.Is(b, sentinel) {
			return false
		}
	}
	return a.Error() == b.Error()
}

// normal returns out with empty Windows slices made nil, so that a result
// whose slice was reused compares equal to a fresh one.
func normal(out engine.StepResult) engine.StepResult {
	out.Results = append([]engine.Result(nil), out.Results...)
	for i := range out.Results {
		if len(out.Results[i].Windows) == 0 {
			out.Results[i].Windows = nil
		}
	}
	return out
}

// applyBoth applies b, the i-th batch of a test, to two stores that must
// agree on every batch, and fails unless they give the same error or the
// same results and hold the same number of records after it.
func applyBoth(t interface{ Fatalf(string, ...any) }, i int, b *engine.Batch, x *Store, xName string, y *Store, yName string) {
	applyAll(t, i, b, []*Store{x, y}, []string{xName, yName}, true)
}

// applyAll applies b, the i-th batch of a test, to stores that must agree
// on every batch, and fails unless they give the same error or the same
// results and, if counted, hold the same number of records after it.
func applyAll(t interface{ Fatalf(string, ...any) }, i int, b *engine.Batch, stores []*Store, names []string, counted bool) {
	outs, errs := make([]engine.StepResult, len(stores)), make([]error, len(stores))
	for k, s := range stores {
		errs[k] = s.Apply(context.Background(), b, &outs[k])
	}
	for k := 1; k < len(stores); k++ {
		if (errs[0] == nil) != (errs[k] == nil) || errs[0] != nil && !sameError(errs[0], errs[k]) {
			t.Fatalf("batch %d %+v: error %v with %s, %v with %s", i, *b, errs[0], names[0], errs[k], names[k])
		}
		if errs[0] == nil && !reflect.DeepEqual(normal(outs[0]), normal(outs[k])) {
			t.Fatalf("batch %d %+v:\n%s %+v\n%s %+v", i, *b, names[0], outs[0], names[k], outs[k])
		}
		if counted && stores[0].Len() != stores[k].Len() {
			t.Fatalf("batch %d %+v: %d records with %s, %d with %s", i, *b, stores[0].Len(), names[0], stores[k].Len(), names[k])
		}
	}
}
