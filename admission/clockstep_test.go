package admission

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/wire"
)

// TestStateIsReadAgainAfterTheClockStepsBack: a server's clock stepping
// back does not make its copy of the family's stored state look younger
// than it is. An operator stop made through another server sharing the
// store holds on this one within StateRefresh, not only once the clock has
// caught up with the moment of the last read.
func TestStateIsReadAgainAfterTheClockStepsBack(t *testing.T) {
	fx := newFixture(t)
	ctx := context.Background()
	cfg := smallConfig(10_000)
	a, b := fx.admitter(cfg), fx.admitter(cfg)
	if err := a.Admit(ctx, rpc(DefaultFamily, 1)); err != nil {
		t.Fatal(err)
	}
	fx.clock.Advance(-time.Hour) // still the same UTC day
	if err := b.StopFamily(ctx, DefaultFamily, "runaway caller"); err != nil {
		t.Fatal(err)
	}
	fx.clock.Advance(cfg.StateRefresh)
	if err := a.Admit(ctx, rpc(DefaultFamily, 1)); code(err) != wire.CodeStopped {
		t.Fatalf("a StateRefresh after another server's stop, with the clock stepped back: %v, want guard_stopped", err)
	}
}
