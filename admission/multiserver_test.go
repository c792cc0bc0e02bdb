package admission

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/wire"
)

// TestOwnWriteDoesNotHideAnotherServersReset: a server's own resume, stop
// or budget stop tells it nothing of a fairness reset made meanwhile
// through another server, so it must not count as a read of the family's
// stored state. The reset holds on every server within StateRefresh of
// being made, whatever each wrote in between.
func TestOwnWriteDoesNotHideAnotherServersReset(t *testing.T) {
	for _, write := range []struct {
		name string
		do   func(context.Context, *Admitter) error
	}{
		{"resume", func(ctx context.Context, a *Admitter) error { return a.ResumeFamily(ctx, DefaultFamily) }},
		{"stop and resume", func(ctx context.Context, a *Admitter) error {
			if err := a.StopFamily(ctx, DefaultFamily, "maintenance"); err != nil {
				return err
			}
			return a.ResumeFamily(ctx, DefaultFamily)
		}},
	} {
		t.Run(write.name, func(t *testing.T) {
			forEachStore(t, func(t *testing.T, newFx fixtureMaker) {
				fx := newFx(t)
				ctx := context.Background()
				cfg := fairConfig(switches{})
				one, two := fx.admitter(cfg), fx.admitter(cfg)
				exhaustPrincipal(t, two, "alice")
				if err := two.Admit(ctx, fairRPC("s2", "alice", nil)); code(err) != wire.CodeLimited {
					t.Fatalf("exhausted alice: %v", err)
				}
				if _, err := one.ResetFairness(ctx, "ops", ResetRequest{Family: DefaultFamily, Principal: "alice"}); err != nil {
					t.Fatal(err)
				}
				fx.clock.Advance(cfg.StateRefresh - time.Millisecond)
				if err := write.do(ctx, two); err != nil {
					t.Fatal(err)
				}
				fx.clock.Advance(time.Millisecond)
				if err := two.Admit(ctx, fairRPC("s3", "alice", nil)); err != nil {
					t.Fatalf("server two, StateRefresh after the reset through server one: %v, want admitted", err)
				}
			})
		})
	}
}
