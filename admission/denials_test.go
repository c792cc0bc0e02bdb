package admission

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/wire"
)

// quotaBatches counts the batches that reached fairness quota partitions.
func (fx *fixture) quotaBatches() int {
	return fx.probe.count("adm/q/") + fx.probe.count("adm/p/")
}

// exhaustPrincipal spends principal's share of 100 through a, from two
// sources (so that neither source's share runs out), until a refuses it.
func exhaustPrincipal(t *testing.T, a *Admitter, principal string) {
	t.Helper()
	if got := spend(t, a, []*wire.Request{fairRPC("one-"+principal, principal, nil), fairRPC("two-"+principal, principal, nil)}); got != 100 {
		t.Fatalf("%s spent %d, want its share of 100", principal, got)
	}
}

// refusalsFromMemory exhausts alice, then sends her 50 RPCs from fresh
// sources and returns how many store batches they cost.
func refusalsFromMemory(t *testing.T, sw switches) int {
	fx := newFixture(t)
	a := fx.admitter(fairConfig(sw))
	exhaustPrincipal(t, a, "alice")
	before := fx.quotaBatches()
	for i := range 50 {
		if err := a.Admit(context.Background(), fairRPC(fmt.Sprint("fresh", i), "alice", nil)); code(err) != wire.CodeLimited {
			t.Fatalf("RPC %d of the exhausted principal: %v", i, err)
		}
	}
	return fx.quotaBatches() - before
}

func TestExhaustedIdentityIsRefusedWithoutStoreCalls(t *testing.T) {
	if n := refusalsFromMemory(t, switches{}); n != 0 {
		t.Errorf("50 refusals of a known-exhausted principal made %d store calls, want 0", n)
	}
	// Negative control: without the memory each refusal charges the
	// source, is refused by the principal and refunds the source.
	if n := refusalsFromMemory(t, switches{noDenialCache: true}); n != 150 {
		t.Errorf("without the denial memory, 50 refusals made %d store calls, want 150", n)
	}
}

// TestExhaustedTierIsRefusedForEverySourceInIt: once a /48 is exhausted, a
// source never seen before inside it is refused from memory too.
func TestExhaustedTierIsRefusedForEverySourceInIt(t *testing.T) {
	fx := newFixture(t)
	a := fx.admitter(fairConfig(switches{}))
	var callers []*wire.Request
	for i := range 8 {
		callers = append(callers, fairRPC(fmt.Sprint("s64-", i), "", map[string]string{wire.TierV6Slash56: fmt.Sprint("n56-", i), wire.TierV6Slash48: "n48"}))
	}
	if got := spendAny(t, a, callers); got != 400 {
		t.Fatalf("eight /56s of one /48 spent %d, want the /48's 400", got)
	}
	before := fx.quotaBatches()
	err := a.Admit(context.Background(), fairRPC("new-s64", "", map[string]string{wire.TierV6Slash56: "new-n56", wire.TierV6Slash48: "n48"}))
	if code(err) != wire.CodeLimited || !strings.Contains(err.Error(), "prefix v6/48") {
		t.Fatalf("a new source in the exhausted /48: %v", err)
	}
	if n := fx.quotaBatches() - before; n != 0 {
		t.Errorf("the refusal made %d store calls", n)
	}
}

// TestRememberedDenialKeepsWhatWasLeft: a denial remembers what the quota
// had left, so a smaller RPC that fits is still admitted.
func TestRememberedDenialKeepsWhatWasLeft(t *testing.T) {
	fx := newFixture(t)
	ctx := context.Background()
	a := fx.admitter(fairConfig(switches{}))
	for range 95 {
		if err := a.Admit(ctx, fairRPC("s1", "alice", nil)); err != nil {
			t.Fatal(err)
		}
	}
	ten := rpc(DefaultFamily, 10)
	ten.Source, ten.Principal = "s2", "alice"
	if err := a.Admit(ctx, ten); code(err) != wire.CodeLimited {
		t.Fatalf("10 commands with 5 left: %v", err)
	}
	five := rpc(DefaultFamily, 5)
	five.Source, five.Principal = "s2", "alice"
	if err := a.Admit(ctx, five); err != nil {
		t.Fatalf("5 commands with 5 left: %v", err)
	}
	if err := a.Admit(ctx, fairRPC("s3", "alice", nil)); code(err) != wire.CodeLimited {
		t.Fatalf("1 command with none left: %v", err)
	}
}

func TestRememberedDenialEndsWithTheUTCDay(t *testing.T) {
	fx := newFixture(t)
	ctx := context.Background()
	a := fx.admitter(fairConfig(switches{}))
	exhaustPrincipal(t, a, "alice")
	fx.clock.Set(time.Date(2026, 1, 1, 23, 59, 59, 999e6, time.UTC))
	before := fx.quotaBatches()
	if err := a.Admit(ctx, fairRPC("s2", "alice", nil)); code(err) != wire.CodeLimited || fx.quotaBatches() != before {
		t.Fatalf("just before midnight: %v after %d store calls, want a refusal from memory", err, fx.quotaBatches()-before)
	}
	fx.clock.Set(time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC))
	// A denial remembered on the new day, so that the memory is consulted.
	exhaustPrincipal(t, a, "bob")
	if err := a.Admit(ctx, fairRPC("s2", "alice", nil)); err != nil {
		t.Fatalf("at midnight: %v, want a fresh share", err)
	}
}

func TestFairnessResetClearsRememberedDenials(t *testing.T) {
	fx := newFixture(t)
	ctx := context.Background()
	cfg := fairConfig(switches{})
	one, two := fx.admitter(cfg), fx.admitter(cfg) // two servers on one store
	exhaustPrincipal(t, one, "alice")
	for _, a := range []*Admitter{one, two} {
		for range 2 { // the first refusal asks the store, the second is remembered
			if err := a.Admit(ctx, fairRPC("s2", "alice", nil)); code(err) != wire.CodeLimited {
				t.Fatalf("exhausted alice: %v", err)
			}
		}
	}
	before := fx.quotaBatches()
	if err := two.Admit(ctx, fairRPC("s3", "alice", nil)); code(err) != wire.CodeLimited || fx.quotaBatches() != before {
		t.Fatalf("server two does not remember alice: %v", err)
	}

	if _, err := one.ResetFairness(ctx, "ops", ResetRequest{Family: DefaultFamily, Principal: "alice"}); err != nil {
		t.Fatal(err)
	}
	// The server that made the reset forgets at once.
	if err := one.Admit(ctx, fairRPC("s2", "alice", nil)); err != nil {
		t.Fatalf("server one after the reset: %v", err)
	}
	// The other reads the reset with the family's state, within
	// StateRefresh.
	fx.clock.Advance(cfg.StateRefresh)
	if err := two.Admit(ctx, fairRPC("s3", "alice", nil)); err != nil {
		t.Fatalf("server two, StateRefresh after the reset: %v", err)
	}
}

// A reset whose quotas were deleted but whose announcement to the other
// servers failed answers an error, and the server that made it still
// forgets what it remembered: it asks the store again, which admits.
func TestFailedResetStillForgetsItsOwnDenials(t *testing.T) {
	fx := newFixture(t)
	ctx := context.Background()
	a := fx.admitter(fairConfig(switches{}))
	exhaustPrincipal(t, a, "alice")
	for range 2 { // the first refusal asks the store, the second is remembered
		if err := a.Admit(ctx, fairRPC("s2", "alice", nil)); code(err) != wire.CodeLimited {
			t.Fatalf("exhausted alice: %v", err)
		}
	}
	fx.probe.set(nil, func(_ string, cmds []engine.Command) bool {
		return len(cmds) == 1 && cmds[0].Op == engine.OpSet && cmds[0].Key == resetEpochKey
	})
	if _, err := a.ResetFairness(ctx, "ops", ResetRequest{Family: DefaultFamily, Principal: "alice"}); code(err) != wire.CodeUnavailable {
		t.Fatalf("a reset whose announcement failed: %v, want guard_unavailable", err)
	}
	fx.probe.set(nil, nil)
	if err := a.Admit(ctx, fairRPC("s2", "alice", nil)); err != nil {
		t.Fatalf("after a reset that deleted alice's quota and then failed: %v, want admitted", err)
	}
}

// TestRefundInvalidatesADenialSeenBeforeIt: an RPC refused by the principal
// gives its source charge back; an RPC that found the source spent while
// that charge was held must not remember the source as exhausted.
func TestRefundInvalidatesADenialSeenBeforeIt(t *testing.T) {
	for _, tc := range []struct {
		name   string
		bumpOK bool // the refund advances the generation
	}{{"refund forgets", true}, {"negative control", false}} {
		t.Run(tc.name, func(t *testing.T) {
			fx := newFixture(t)
			ctx := context.Background()
			cfg := fairConfig(switches{})
			a := fx.admitter(cfg)
			// alice is exhausted through another server, so this one
			// only learns it from the store.
			exhaustPrincipal(t, fx.admitter(cfg), "alice")
			// Source s keeps 1 of its 100.
			for i := range 99 {
				if err := a.Admit(ctx, fairRPC("s", fmt.Sprint("p", i), nil)); err != nil {
					t.Fatal(err)
				}
			}
			// RPC 1 (s, alice) charges s's last command, and is held
			// before alice's quota refuses it; meanwhile RPC 2 (s, bob)
			// finds s spent.
			held, release := make(chan struct{}), make(chan struct{})
			fx.probe.set(func(partition string, _ []engine.Command) {
				if partition == engine.ReservedPartition("adm/p/"+DefaultFamily+"/alice") {
					close(held)
					<-release
				}
			}, nil)
			done := make(chan error)
			go func() { done <- a.Admit(ctx, fairRPC("s", "alice", nil)) }()
			<-held
			fx.probe.set(nil, nil)
			if err := a.Admit(ctx, fairRPC("s", "bob", nil)); code(err) != wire.CodeLimited {
				t.Fatalf("bob while s's last command is held: %v", err)
			}
			gen := a.fams[DefaultFamily].gen[sideSource].Load()
			close(release)
			if err := <-done; code(err) != wire.CodeLimited {
				t.Fatalf("alice: %v", err)
			}
			if !tc.bumpOK {
				a.fams[DefaultFamily].gen[sideSource].Store(gen) // as if the refund left it
			}
			err := a.Admit(ctx, fairRPC("s", "carol", nil))
			if tc.bumpOK && err != nil {
				t.Fatalf("carol after the refund gave s its last command back: %v", err)
			}
			if !tc.bumpOK && code(err) != wire.CodeLimited {
				t.Fatalf("negative control: without the generation the stale denial should refuse carol, got %v", err)
			}
		})
	}
}

// TestDenialMemoryIsBounded: with room for two, five exhausted principals
// are all still refused, the evicted ones by the store.
func TestDenialMemoryIsBounded(t *testing.T) {
	fx := newFixture(t)
	ctx := context.Background()
	cfg := fairConfig(switches{})
	cfg.DenialCache = 2
	a := fx.admitter(cfg)
	for i := range 5 {
		exhaustPrincipal(t, a, fmt.Sprint("p", i))
	}
	before := fx.quotaBatches()
	for i := range 5 {
		if err := a.Admit(ctx, fairRPC("s", fmt.Sprint("p", i), nil)); code(err) != wire.CodeLimited {
			t.Fatalf("p%d: %v", i, err)
		}
	}
	if n := a.denials.Len(); n > 2 {
		t.Errorf("%d denials remembered, bound 2", n)
	}
	if fx.quotaBatches() == before {
		t.Error("every refusal came from memory, though only two fit")
	}
}
