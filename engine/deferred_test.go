package engine_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/engine"
)

// deferringStore wraps a store as an engine.DeferredSyncStore and logs the
// calls the engine makes: "apply P", "defer P" (ApplyDeferred) and "sync".
// A deferred batch counts as durable only once a later Sync returned.
type deferringStore struct {
	engine.Store
	mu       sync.Mutex
	calls    []string
	unsynced int // deferred batches not yet covered by a Sync
	syncErr  error
}

func (s *deferringStore) log(c string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, c)
}

func (s *deferringStore) Apply(ctx context.Context, b *engine.Batch, out *engine.StepResult) error {
	s.log("apply " + b.Partition)
	return s.Store.Apply(ctx, b, out)
}

func (s *deferringStore) ApplyDeferred(ctx context.Context, b *engine.Batch, out *engine.StepResult) error {
	s.log("defer " + b.Partition)
	err := s.Store.Apply(ctx, b, out)
	if err == nil {
		s.mu.Lock()
		s.unsynced++
		s.mu.Unlock()
	}
	return err
}

func (s *deferringStore) Sync(context.Context) error {
	s.log("sync")
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.syncErr != nil {
		return s.syncErr
	}
	s.unsynced = 0
	return nil
}

func (s *deferringStore) take() (calls []string, unsynced int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	calls, s.calls = s.calls, nil
	return calls, s.unsynced
}

// TestDoDefersFsyncsOfSeveralSteps checks that Engine.Do runs a request of
// several steps on a DeferredSyncStore with ApplyDeferred and one Sync
// before it answers, also when a step fails, keeps Apply for a single
// step, and reports a failed Sync as the request's failure.
func TestDoDefersFsyncsOfSeveralSteps(t *testing.T) {
	f := newFixture(t)
	ds := &deferringStore{Store: f.mem}
	eng := engine.New(ds)
	hit := engine.Hit(1, fixed("w", 10, minute))
	req := func(parts ...string) *engine.Request {
		r := &engine.Request{OperationID: engine.NewOperationID(), Mode: engine.All}
		for _, p := range parts {
			r.Steps = append(r.Steps, engine.Step{Partition: p, Commands: []engine.Command{hit}})
		}
		return r
	}

	resp, err := eng.Do(t.Context(), req("a", "b", "c"))
	if err != nil {
		t.Fatal(err)
	}
	calls, unsynced := ds.take()
	if want := []string{"defer a", "defer b", "defer c", "sync"}; !slices.Equal(calls, want) || unsynced != 0 {
		t.Fatalf("calls %q with %d deferred batches unsynced at the answer, want %q and 0", calls, unsynced, want)
	}
	for i, st := range resp.Steps {
		if !st.Results[0].Allowed || st.Results[0].Remaining != 9 {
			t.Fatalf("step %d: %+v", i, st)
		}
	}

	if _, err := eng.Do(t.Context(), req("a")); err != nil {
		t.Fatal(err)
	}
	if calls, _ := ds.take(); !slices.Equal(calls, []string{"apply a"}) {
		t.Fatalf("one step: calls %q, want a plain apply", calls)
	}

	// A failing step still makes the steps before it durable before the
	// answer that reports them.
	bad := req("a", "b")
	bad.Steps[1].Commands = []engine.Command{engine.Incr("w", 1, minute)} // w holds a window
	resp, err = eng.Do(t.Context(), bad)
	if !errors.Is(err, engine.ErrWrongType) || len(resp.Steps) != 1 {
		t.Fatalf("Do = %d steps, %v; want step 0 and ErrWrongType", len(resp.Steps), err)
	}
	if calls, unsynced := ds.take(); !slices.Equal(calls, []string{"defer a", "defer b", "sync"}) || unsynced != 0 {
		t.Fatalf("failing step: calls %q, %d unsynced", calls, unsynced)
	}

	// A failed Sync leaves the outcome unknown: no step is reported done.
	ds.syncErr = engine.ErrUnavailable
	resp, err = eng.Do(t.Context(), req("a", "b"))
	if !errors.Is(err, engine.ErrUnavailable) || resp == nil || len(resp.Steps) != 0 {
		t.Fatalf("failed sync: Do = %+v, %v; want no steps and ErrUnavailable", resp, err)
	}
	if calls, _ := ds.take(); !strings.HasSuffix(strings.Join(calls, ","), "sync") {
		t.Fatalf("failed sync: calls %q", calls)
	}
}

// TestDoDeferredLeavesTheSyncToTheCaller checks that DoDeferred and
// ApplyReservedPartitionDeferred run every batch, a single step too, with
// ApplyDeferred and never Sync, that Engine.Sync then makes them durable,
// and that on a store that does not defer they are Do and
// ApplyReservedPartition, and Sync does nothing.
func TestDoDeferredLeavesTheSyncToTheCaller(t *testing.T) {
	f := newFixture(t)
	ds := &deferringStore{Store: f.mem}
	eng := engine.New(ds)
	hit := engine.Hit(1, fixed("w", 10, minute))
	one := &engine.Request{OperationID: engine.NewOperationID(), Steps: []engine.Step{{Partition: "a", Commands: []engine.Command{hit}}}}
	var out engine.StepResult
	if err := eng.ApplyReservedPartitionDeferred(t.Context(), engine.ReservedPartition("r"), &out, hit); err != nil {
		t.Fatal(err)
	}
	resp, err := eng.DoDeferred(t.Context(), one)
	if err != nil || !resp.Steps[0].Results[0].Allowed {
		t.Fatalf("DoDeferred = %+v, %v", resp, err)
	}
	if calls, unsynced := ds.take(); !slices.Equal(calls, []string{"defer \x00r", "defer a"}) || unsynced != 2 {
		t.Fatalf("calls %q with %d unsynced, want two deferred batches and no sync", calls, unsynced)
	}
	if err := eng.Sync(t.Context()); err != nil {
		t.Fatal(err)
	}
	if calls, unsynced := ds.take(); !slices.Equal(calls, []string{"sync"}) || unsynced != 0 {
		t.Fatalf("after Sync: calls %q, %d unsynced", calls, unsynced)
	}
	if err := eng.ApplyReservedPartitionDeferred(t.Context(), "r", &out, hit); !errors.Is(err, engine.ErrInvalid) {
		t.Fatalf("unreserved partition: %v, want ErrInvalid", err)
	}
	ds.syncErr = engine.ErrUnavailable
	if err := eng.Sync(t.Context()); !errors.Is(err, engine.ErrUnavailable) {
		t.Fatalf("failed Sync = %v", err)
	}

	// On a store that does not defer: the same answers, the plain path.
	plain := engine.New(f.mem)
	one.OperationID = engine.NewOperationID()
	if resp, err := plain.DoDeferred(t.Context(), one); err != nil || resp.Steps[0].Results[0].Remaining != 8 {
		t.Fatalf("DoDeferred on memstore = %+v, %v", resp, err)
	}
	if err := plain.ApplyReservedPartitionDeferred(t.Context(), engine.ReservedPartition("r"), &out, hit); err != nil || out.Results[0].Remaining != 8 {
		t.Fatalf("ApplyReservedPartitionDeferred on memstore = %+v, %v", out, err)
	}
	if err := plain.Sync(t.Context()); err != nil {
		t.Fatal(err)
	}
}
