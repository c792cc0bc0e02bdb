package admission

import (
	"context"
	"fmt"
	"testing"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/store/diskstore"
	"github.com/sluicehq/sluice/wire"
)

// fixtureMaker returns a fresh fixture.
type fixtureMaker func(*testing.T) *fixture

// forEachStore runs test over memstore seen through a probe that hides its
// joint steps (a fair RPC's source and principal are charged in two
// batches, with a refund, as on Redis), over the embedded store, which
// runs joint steps (one joint step, its fsync deferred), and over memstore
// running them.
func forEachStore(t *testing.T, test func(*testing.T, fixtureMaker)) {
	t.Run("two batches", func(t *testing.T) { test(t, newFixture) })
	t.Run("joint step", func(t *testing.T) { test(t, newJointFixture) })
	t.Run("joint step in memory", func(t *testing.T) { test(t, newMemJointFixture) })
}

// forEachJointStore runs test over each store that runs joint steps.
func forEachJointStore(t *testing.T, test func(*testing.T, fixtureMaker)) {
	t.Run("embedded", func(t *testing.T) { test(t, newJointFixture) })
	t.Run("memory", func(t *testing.T) { test(t, newMemJointFixture) })
}

// jointProbe is a storeProbe over a store that runs joint steps: it counts
// each batch of a joint step as a batch on its partition, and holds or
// fails it as the probe's hook and fail say.
type jointProbe struct {
	*storeProbe
	joint engine.JointStore
	steps int // joint steps that reached the store; guarded by mu
}

// deferredJointProbe is a jointProbe over the embedded store, which also
// defers its fsyncs.
type deferredJointProbe struct {
	*jointProbe
	disk *diskstore.Store
}

func (p *deferredJointProbe) ApplyDeferred(ctx context.Context, b *engine.Batch, out *engine.StepResult) error {
	if err := p.see(b); err != nil {
		return err
	}
	return p.disk.ApplyDeferred(ctx, b, out)
}

func (p *deferredJointProbe) Sync(ctx context.Context) error { return p.disk.Sync(ctx) }

func (p *jointProbe) Joins() bool { return p.joint.Joins() }

func (p *jointProbe) ApplyJoint(ctx context.Context, bs []*engine.Batch, outs []engine.StepResult) error {
	p.mu.Lock()
	if p.batches == nil {
		p.batches = map[string]int{}
	}
	p.steps++
	for _, b := range bs {
		p.batches[b.Partition]++
	}
	hook, fail := p.hook, p.fail
	p.mu.Unlock()
	for _, b := range bs {
		if hook != nil {
			hook(b.Partition, b.Commands)
		}
		if fail != nil && fail(b.Partition, b.Commands) {
			return errInjected
		}
	}
	return p.joint.ApplyJoint(ctx, bs, outs)
}

func (p *jointProbe) jointSteps() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.steps
}

// newJointFixture is newFixture over the embedded store (fsync always), so
// that a fair RPC's charges run as one joint step.
func newJointFixture(t *testing.T) *fixture {
	t.Helper()
	fx := newFixture(t)
	cfg := diskstore.DefaultConfig()
	cfg.Dir = t.TempDir()
	cfg.Clock = fx.clock
	st, err := diskstore.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := st.Close(); err != nil {
			t.Errorf("closing the store: %v", err)
		}
	})
	fx.probe = &storeProbe{Store: st}
	jp := &jointProbe{storeProbe: fx.probe, joint: st}
	fx.eng = engine.New(&deferredJointProbe{jointProbe: jp, disk: st})
	fx.joint = jp
	return fx
}

// newMemJointFixture is newFixture with memstore's joint steps in view, so
// that a fair RPC's charges run as one joint step in memory.
func newMemJointFixture(t *testing.T) *fixture {
	t.Helper()
	fx := newFixture(t)
	jp := &jointProbe{storeProbe: fx.probe, joint: fx.store}
	fx.eng = engine.New(jp)
	fx.joint = jp
	return fx
}

// TestFairRPCIsOneJointStep: on a store that runs joint steps, an admitted
// fair RPC charges its source, tiers and principal in one joint step, and
// a refusal by the principal makes no other batch (no refund) and leaves
// the source uncharged.
func TestFairRPCIsOneJointStep(t *testing.T) {
	forEachJointStore(t, func(t *testing.T, newFixture fixtureMaker) {
		fx := newFixture(t)
		ctx := context.Background()
		a := fx.admitter(fairConfig(switches{}))
		tiers := map[string]string{wire.TierV6Slash56: "n56", wire.TierV6Slash48: "n48"}
		exhaustPrincipal(t, fx.admitter(fairConfig(switches{})), "alice")

		before, steps := fx.quotaBatches(), fx.joint.jointSteps()
		if err := a.Admit(ctx, fairRPC("s1", "bob", tiers)); err != nil {
			t.Fatal(err)
		}
		if b, s := fx.quotaBatches()-before, fx.joint.jointSteps()-steps; b != 2 || s != 1 {
			t.Fatalf("an admitted fair RPC made %d quota batches in %d joint steps, want 2 in 1", b, s)
		}

		// alice is exhausted on another server: this one asks the store, once.
		before, steps = fx.quotaBatches(), fx.joint.jointSteps()
		if err := a.Admit(ctx, fairRPC("s2", "alice", tiers)); code(err) != wire.CodeLimited || err != a.fams[DefaultFamily].limited[axisPrincipal] {
			t.Fatalf("alice: %v, want the principal's guard_limited", err)
		}
		if b, s := fx.quotaBatches()-before, fx.joint.jointSteps()-steps; b != 2 || s != 1 {
			t.Fatalf("a refusal by the principal made %d quota batches in %d joint steps, want 2 in 1 (no refund)", b, s)
		}
		// s2 was not charged: carol spends its whole 100 from it (the tiers,
		// of 200 and 400, hold more; carol's own share is 100 too).
		if got := spend(t, a, []*wire.Request{fairRPC("s2", "carol", tiers)}); got != 100 {
			t.Fatalf("carol from s2 spent %d, want 100: alice's refused RPC charged s2", got)
		}
	})
}

// TestJointRefusalAnswersTheSourceFirst: when both sides refuse, the
// answer names the source's axis, as two batches (which never ask the
// principal after the source refused) answer it, and both refusals are
// remembered.
func TestJointRefusalAnswersTheSourceFirst(t *testing.T) {
	forEachJointStore(t, func(t *testing.T, newFixture fixtureMaker) {
		fx := newFixture(t)
		ctx := context.Background()
		a := fx.admitter(fairConfig(switches{}))
		exhaustPrincipal(t, fx.admitter(fairConfig(switches{})), "alice")
		// s9 spends its 100 with other principals.
		for i := range 100 {
			if err := a.Admit(ctx, fairRPC("s9", fmt.Sprint("p", i), nil)); err != nil {
				t.Fatal(err)
			}
		}
		f := a.fams[DefaultFamily]
		if err := a.Admit(ctx, fairRPC("s9", "alice", nil)); err != f.limited[axisSource] {
			t.Fatalf("both exhausted: %v, want the source's refusal", err)
		}
		before := fx.quotaBatches()
		if err := a.Admit(ctx, fairRPC("fresh", "alice", nil)); err != f.limited[axisPrincipal] {
			t.Fatalf("alice from a fresh source: %v, want the principal's refusal", err)
		}
		if n := fx.quotaBatches() - before; n != 0 {
			t.Fatalf("alice's refusal, learnt in the joint step, cost %d store batches, want 0 (remembered)", n)
		}
	})
}
