package admission

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/wire"
)

// deferLog makes a store an engine.DeferredSyncStore and logs the calls:
// "apply", "defer" (ApplyDeferred) and "sync".
type deferLog struct {
	engine.Store
	mu      sync.Mutex
	calls   []string
	syncErr error
}

func (d *deferLog) add(c string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls = append(d.calls, c)
}

func (d *deferLog) take() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	c := d.calls
	d.calls = nil
	return c
}

func (d *deferLog) Apply(ctx context.Context, b *engine.Batch, out *engine.StepResult) error {
	d.add("apply")
	return d.Store.Apply(ctx, b, out)
}

func (d *deferLog) ApplyDeferred(ctx context.Context, b *engine.Batch, out *engine.StepResult) error {
	d.add("defer")
	return d.Store.Apply(ctx, b, out)
}

func (d *deferLog) Sync(context.Context) error {
	d.add("sync")
	return d.syncErr
}

// TestAdmitDefersOnlyFairnessCharges checks that AdmitDeferred runs a fair
// RPC's two reservations, and a refund, deferred, and reports pending only
// when it admitted after them; that everything else admission writes
// (here the chunk lease) keeps its synced batch; and that Admit makes the
// charges durable before it returns, answering guard_unavailable when it
// cannot.
func TestAdmitDefersOnlyFairnessCharges(t *testing.T) {
	fx := newFixture(t)
	dl := &deferLog{Store: fx.probe}
	cfg := fairConfig(switches{})
	cfg.Families = []string{DefaultFamily, "open"}
	cfg.Total = 4000 // 2,000 each: alice may spend 100
	cfg.Now = fx.clock.Now
	a := New(engine.New(dl), cfg)
	ctx := t.Context()

	pending, err := a.AdmitDeferred(ctx, fairRPC("s1", "alice", nil))
	if err != nil || !pending {
		t.Fatalf("fair rpc: pending %v, %v", pending, err)
	}
	calls := dl.take()
	if got := slices.Index(calls, "defer"); got < 0 || !slices.Equal(calls[got:], []string{"defer", "defer"}) || slices.Contains(calls, "sync") {
		t.Fatalf("fair rpc: calls %q, want the synced lease, then the two charges deferred, and no sync", calls)
	}
	for i := range 98 { // alice spends 100 in all
		if err := a.Admit(ctx, fairRPC(fmt.Sprint("s", i+2), "alice", nil)); err != nil {
			t.Fatalf("rpc %d: %v", i, err)
		}
		if calls := dl.take(); len(calls) < 3 || !slices.Equal(calls[len(calls)-3:], []string{"defer", "defer", "sync"}) {
			t.Fatalf("Admit of rpc %d: calls %q, want the charges deferred, then one sync", i, calls)
		}
	}
	pending, err = a.AdmitDeferred(ctx, fairRPC("s1", "alice", nil))
	if err != nil || !pending {
		t.Fatalf("alice's last: pending %v, %v", pending, err)
	}
	dl.take()

	// A refusal by the principal: the source's charge and its refund,
	// deferred, and nothing pending.
	pending, err = a.AdmitDeferred(ctx, fairRPC("s200", "alice", nil))
	if code(err) != wire.CodeLimited || pending {
		t.Fatalf("refusal: pending %v, %v", pending, err)
	}
	if calls := dl.take(); !slices.Equal(calls, []string{"defer", "defer", "defer"}) {
		t.Fatalf("refusal: calls %q, want charge, refusal and refund deferred, no sync", calls)
	}

	// A family that is not fair charges nothing: nothing pending.
	if pending, err := a.AdmitDeferred(ctx, rpc("open", 1)); err != nil || pending {
		t.Fatalf("rpc that is not fair: pending %v, %v", pending, err)
	}
	if calls := dl.take(); slices.Contains(calls, "defer") || slices.Contains(calls, "sync") {
		t.Fatalf("rpc that is not fair: calls %q", calls)
	}

	dl.syncErr = fmt.Errorf("fsync: %w", engine.ErrUnavailable)
	if err := a.Admit(ctx, fairRPC("s300", "bob", nil)); code(err) != wire.CodeUnavailable {
		t.Fatalf("Admit with a failing sync = %v, want guard_unavailable", err)
	}
}
