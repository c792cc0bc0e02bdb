package engine_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/testclock"
	"github.com/sluicehq/sluice/store/memstore"
)

// t0 is the instant every test clock starts at, 2026-01-01T00:00:00Z: a
// multiple of every window length the tests use, so fixed windows start
// with the test.
const t0 = int64(1_767_225_600_000)

const (
	second = int64(1000)
	minute = 60 * second
	hour   = 60 * minute
)

// countingStore wraps a store and counts the batches it is asked to apply.
type countingStore struct {
	engine.Store
	applies atomic.Int64
}

func (s *countingStore) Apply(ctx context.Context, b *engine.Batch, out *engine.StepResult) error {
	s.applies.Add(1)
	return s.Store.Apply(ctx, b, out)
}

// fixture is an engine over a memstore driven by a test clock.
type fixture struct {
	clock *testclock.Clock
	mem   *memstore.Store
	store *countingStore
	eng   *engine.Engine
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	clock := testclock.At(t0)
	cfg := memstore.DefaultConfig()
	cfg.MaxKeys, cfg.Shards, cfg.Clock = 4096, 4, clock
	mem, err := memstore.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mem.Close() })
	cs := &countingStore{Store: mem}
	return &fixture{clock: clock, mem: mem, store: cs, eng: engine.New(cs)}
}

// do runs r and fails the test on error.
func (f *fixture) do(t testing.TB, r *engine.Request) *engine.Response {
	t.Helper()
	resp, err := f.eng.Do(context.Background(), r)
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
	return resp
}

// run runs one batch on partition and returns its only step's result.
func (f *fixture) run(t testing.TB, partition string, cmds ...engine.Command) engine.StepResult {
	t.Helper()
	var out engine.StepResult
	if err := f.eng.Apply(context.Background(), partition, &out, cmds...); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	return out
}

func step(partition string, cmds ...engine.Command) engine.Step {
	return engine.Step{Partition: partition, Commands: cmds}
}

func request(steps ...engine.Step) *engine.Request {
	return &engine.Request{Steps: steps}
}

func window(key string, kind algo.Kind, limit, windowMs int64) engine.Window {
	return engine.Window{Key: key, Kind: kind, Limit: limit, WindowMs: windowMs}
}

func fixed(key string, limit, windowMs int64) engine.Window {
	return window(key, algo.KindFixed, limit, windowMs)
}

func ptr[T any](v T) *T { return &v }

// probe returns a win.hit that reads w without charging it: a cost of the
// whole limit is denied by any window already holding a charge, and a
// denial charges nothing. Callers check that the probe was denied.
func probe(w engine.Window) engine.Command { return engine.Hit(w.Limit, w) }
