package engine_test

// The engine's share of a decision, without a store's locking and lookup:
// validation, the Executor on a map, the replay record's encoding and the
// step hash. store/memstore's BenchmarkHit measures whole decisions; these
// say where their time goes.
//
//	for i in 1 2 3 4 5; do go test -run '^$' -bench . -benchmem -cpu 1,2 ./engine/; done | tee engine.txt
//	benchstat engine.txt
//
// docs/benchmarks.md records the figures.

import (
	"context"
	"runtime"
	"strconv"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/engine"
)

// goroutines is the number of callers in every run=parallel benchmark.
const goroutines = 64

func setParallelism(b *testing.B) {
	b.SetParallelism(max(1, goroutines/runtime.GOMAXPROCS(0)))
}

func benchHit(kind algo.Kind) []engine.Command {
	return []engine.Command{engine.Hit(1, engine.Window{
		Key: "rps", Kind: kind, Limit: algo.MaxLimit, WindowMs: algo.MaxWindow,
	})}
}

// mapView is the least a store can be: one partition's records in a map.
type mapView map[string]engine.Record

func (v mapView) Get(key string) (engine.Record, bool) {
	r, ok := v[key]
	return r, ok
}

// commit applies writes the way memstore does, copying each record's data
// into the buffer it replaces, so a steady state allocates nothing. Replay
// records are dropped: the replay benchmark measures their encoding, and a
// view that kept them would grow without bound.
func (v mapView) commit(writes []engine.Write) {
	for _, w := range writes {
		switch {
		case w.Delete:
			delete(v, w.Key)
		case w.Rec.Kind == engine.RecReplay:
		default:
			rec := w.Rec
			rec.Data = append(v[w.Key].Data[:0], rec.Data...)
			v[w.Key] = rec
		}
	}
}

// benchNow is a fixed instant: the Executor takes time as an argument.
const benchNow = 1_700_000_000_000

func BenchmarkValidate(b *testing.B) {
	batch := &engine.Batch{Partition: "client:1", Commands: benchHit(algo.KindGCRA)}
	b.Run("run=serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := batch.Validate(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("run=parallel", func(b *testing.B) {
		b.ReportAllocs()
		setParallelism(b)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := batch.Validate(); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// BenchmarkExecutor measures Executor.Run of one single-window hit on a
// live record, committed to a map. A reused Executor and StepResult make it
// allocation-free; replay=on adds the encoding of a replay record.
func BenchmarkExecutor(b *testing.B) {
	cases := []struct {
		name   string
		kind   algo.Kind
		replay bool
	}{
		{"kind=fixed/replay=off", algo.KindFixed, false},
		{"kind=gcra/replay=off", algo.KindGCRA, false},
		{"kind=fixed/replay=on", algo.KindFixed, true},
	}
	for _, c := range cases {
		newRun := func() func(now int64) error {
			var (
				x    engine.Executor
				out  engine.StepResult
				view = mapView{}
			)
			batch := &engine.Batch{Partition: "client:1", Commands: benchHit(c.kind)}
			if c.replay {
				// The view never keeps the record, so one id serves every
				// run without replaying.
				batch.OperationID = engine.NewOperationID()
				batch.Hash = [32]byte{1}
			}
			return func(now int64) error {
				writes, err := x.Run(view, now, batch, &out)
				if err != nil {
					return err
				}
				view.commit(writes)
				return nil
			}
		}
		b.Run(c.name+"/run=serial", func(b *testing.B) {
			b.ReportAllocs()
			run := newRun()
			now := int64(benchNow)
			for b.Loop() {
				now++
				if err := run(now); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(c.name+"/run=parallel", func(b *testing.B) {
			b.ReportAllocs()
			setParallelism(b)
			b.RunParallel(func(pb *testing.PB) {
				run := newRun()
				now := int64(benchNow)
				for pb.Next() {
					now++
					if err := run(now); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// lockedStore is the least a Store can be: one mutex over one Executor and
// one map, so BenchmarkEngine measures the engine's own overhead.
type lockedStore struct {
	mu   sync.Mutex
	x    engine.Executor
	view mapView
	now  int64
}

func (s *lockedStore) Apply(_ context.Context, b *engine.Batch, out *engine.StepResult) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.now++
	writes, err := s.x.Run(s.view, s.now, b, out)
	if err == nil {
		s.view.commit(writes)
	}
	return err
}

func (s *lockedStore) Close() error { return nil }

// BenchmarkEngine measures Engine.Apply and Engine.Do of one single-window
// hit on a minimal store.
func BenchmarkEngine(b *testing.B) {
	ctx := context.Background()
	newEngine := func() *engine.Engine {
		return engine.New(&lockedStore{view: mapView{}, now: benchNow})
	}
	b.Run("call=apply", func(b *testing.B) {
		b.ReportAllocs()
		eng := newEngine()
		// The commands and the StepResult are built once and reused; that
		// is what makes Apply allocation-free.
		cmds := benchHit(algo.KindFixed)
		var out engine.StepResult
		for b.Loop() {
			if err := eng.Apply(ctx, "client:1", &out, cmds...); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("call=do", func(b *testing.B) {
		b.ReportAllocs()
		eng := newEngine()
		req := &engine.Request{Steps: []engine.Step{{Partition: "client:1", Commands: benchHit(algo.KindFixed)}}}
		for b.Loop() {
			if _, err := eng.Do(ctx, req); err != nil {
				b.Fatal(err)
			}
		}
	})
	// The request bound's shape, as the server runs it: 4 steps of 8
	// hits, each hit on a window of its own, with an operation id.
	b.Run("call=do/steps=4x8", func(b *testing.B) {
		b.ReportAllocs()
		eng := newEngine()
		req := &engine.Request{Steps: make([]engine.Step, 4)}
		for i := range req.Steps {
			req.Steps[i].Partition = "client:" + strconv.Itoa(i)
			for j := range 8 {
				req.Steps[i].Commands = append(req.Steps[i].Commands, engine.Hit(1, engine.Window{
					Key: "rps-" + strconv.Itoa(j), Kind: algo.KindGCRA, Limit: algo.MaxLimit, WindowMs: algo.MaxWindow,
				}))
			}
		}
		for b.Loop() {
			req.OperationID = engine.NewOperationID()
			if _, err := eng.Do(ctx, req); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkStepHash measures the hash that names a step in its replay
// record, paid by every Engine.Do with an operation id.
func BenchmarkStepHash(b *testing.B) {
	b.ReportAllocs()
	st := &engine.Step{Partition: "client:1", Commands: benchHit(algo.KindFixed)}
	for b.Loop() {
		if _, err := st.Hash(); err != nil {
			b.Fatal(err)
		}
	}
}
