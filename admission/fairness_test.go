package admission

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/wire"
)

// fairConfig gives one fair family 2,000 commands a day: a source bucket or
// a principal may spend 100 (1/20), an IPv6 /56 200 (1/10), a /48 or an
// IPv4 /24 400 (1/5). It reserves nothing ahead of the quotas, so that
// every RPC's charge reaches the store (leasedFairConfig leases).
func fairConfig(sw switches) Config {
	cfg := DefaultConfig()
	cfg.Total = 2000
	cfg.Chunk = 16
	cfg.QuotaChunk = 0
	cfg.Fair = []string{DefaultFamily}
	cfg.switches = sw
	return cfg
}

// leasedFairConfig is fairConfig with the default quota leases: chunks of
// 1 % of each share (1 command of a source's or a principal's 100, 2 of a
// /56's, 4 of a /48's).
func leasedFairConfig(sw switches) Config {
	cfg := fairConfig(sw)
	cfg.QuotaChunk = DefaultQuotaChunk
	return cfg
}

// forEachLeasing runs test with quota leases off and on.
func forEachLeasing(t *testing.T, test func(t *testing.T, configOf func(switches) Config)) {
	t.Run("charge by charge", func(t *testing.T) { test(t, fairConfig) })
	t.Run("leased", func(t *testing.T) { test(t, leasedFairConfig) })
}

func fairRPC(source, principal string, tiers map[string]string) *wire.Request {
	r := rpc(DefaultFamily, 1)
	r.Source, r.Principal, r.SourceTiers = source, principal, tiers
	return r
}

// spend sends rpcs from callers concurrently until each caller has been
// refused with guard_limited and returns the commands admitted in total.
func spend(t *testing.T, a *Admitter, callers []*wire.Request) int64 {
	return spendUntil(t, a, callers, wire.CodeLimited)
}

// spendAny is spend accepting a family stop too: with a check switched
// off, callers may exhaust the whole family.
func spendAny(t *testing.T, a *Admitter, callers []*wire.Request) int64 {
	return spendUntil(t, a, callers, wire.CodeLimited, wire.CodeStopped)
}

// spendUntil is spend with the refusals expected.
func spendUntil(t *testing.T, a *Admitter, callers []*wire.Request, refusals ...wire.Code) int64 {
	t.Helper()
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for _, c := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				r := *c
				r.OperationID = fmt.Sprint(admitted.Load())
				err := a.Admit(context.Background(), &r)
				if err != nil {
					if !slices.Contains(refusals, code(err)) {
						t.Errorf("refusal %v, want one of %v", err, refusals)
					}
					return
				}
				admitted.Add(1)
			}
		}()
	}
	wg.Wait()
	return admitted.Load()
}

// checkSharedSource: two processes behind one IPv6 /64 share its 100.
func checkSharedSource(t *testing.T, newFx fixtureMaker, cfg Config) int64 {
	fx := newFx(t)
	tiers := map[string]string{wire.TierV6Slash56: "n56", wire.TierV6Slash48: "n48"}
	one, two := fx.admitter(cfg), fx.admitter(cfg)
	return spendAny(t, one, []*wire.Request{fairRPC("s64", "", tiers)}) + spendAny(t, two, []*wire.Request{fairRPC("s64", "", tiers)})
}

// checkPrincipal: one principal across 30 sources gets its 100.
func checkPrincipal(t *testing.T, newFx fixtureMaker, cfg Config) int64 {
	fx := newFx(t)
	var callers []*wire.Request
	for i := range 30 {
		callers = append(callers, fairRPC(fmt.Sprintf("s%d", i), "alice", map[string]string{wire.TierV4Slash24: fmt.Sprintf("n%d", i)}))
	}
	return spendAny(t, fx.admitter(cfg), callers)
}

// checkTiers: 256 distinct /64s inside one /48 (over four /56s) get the
// /48's 400.
func checkTiers(t *testing.T, newFx fixtureMaker, cfg Config) int64 {
	fx := newFx(t)
	var callers []*wire.Request
	for i := range 256 {
		callers = append(callers, fairRPC(fmt.Sprintf("s64-%d", i), "", map[string]string{
			wire.TierV6Slash56: fmt.Sprintf("n56-%d", i%4), wire.TierV6Slash48: "n48"}))
	}
	return spendAny(t, fx.admitter(cfg), callers)
}

func TestFairness(t *testing.T) {
	forEachLeasing(t, func(t *testing.T, configOf func(switches) Config) {
		forEachStore(t, func(t *testing.T, newFx fixtureMaker) {
			if got := checkSharedSource(t, newFx, configOf(switches{})); got != 100 {
				t.Errorf("two processes on one /64 spent %d, want the source share 100", got)
			}
			if got := checkPrincipal(t, newFx, configOf(switches{})); got != 100 {
				t.Errorf("one principal over 30 sources spent %d, want the principal share 100", got)
			}
			if got := checkTiers(t, newFx, configOf(switches{})); got != 400 {
				t.Errorf("256 /64s in one /48 spent %d, want the /48 share 400", got)
			}
		})
	})
}

// TestFairnessNegativeControls switches each check off and expects the
// matching assertion above to fail: the tests can tell.
func TestFairnessNegativeControls(t *testing.T) {
	forEachLeasing(t, func(t *testing.T, configOf func(switches) Config) {
		forEachStore(t, func(t *testing.T, newFx fixtureMaker) {
			if got := checkSharedSource(t, newFx, configOf(switches{noSource: true})); got == 100 {
				t.Error("with source fairness off, the shared /64 still spent exactly its share")
			}
			if got := checkPrincipal(t, newFx, configOf(switches{noPrincipal: true})); got == 100 {
				t.Error("with principal fairness off, the principal still spent exactly its share")
			}
			if got := checkTiers(t, newFx, configOf(switches{noTiers: true})); got == 400 {
				t.Error("with the prefix tiers off, the /48 still spent exactly its share")
			}
		})
	})
}

func TestUnknownBucketIsShared(t *testing.T) {
	forEachStore(t, func(t *testing.T, newFx fixtureMaker) {
		fx := newFx(t)
		a := fx.admitter(fairConfig(switches{}))
		// A fair family charges an RPC without a source to the unknown
		// bucket, the same bucket clients name for unspecified or
		// unparsable addresses.
		got := spend(t, a, []*wire.Request{fairRPC("", "", nil), fairRPC(wire.UnknownSource, "", nil)})
		if got != 100 {
			t.Fatalf("missing and unknown sources spent %d, want one shared share of 100", got)
		}
	})
}

func TestFairnessDenialSpendsNothing(t *testing.T) {
	forEachStore(t, func(t *testing.T, newFx fixtureMaker) {
		fx := newFx(t)
		ctx := context.Background()
		cfg := fairConfig(switches{})
		a := fx.admitter(cfg)
		// Spend alice's principal share from source s1.
		if got := spend(t, a, []*wire.Request{fairRPC("s1", "alice", nil)}); got != 100 {
			t.Fatalf("alice spent %d", got)
		}
		// Denials of alice from s2 must not charge s2's source quota…
		for range 50 {
			if err := a.Admit(ctx, fairRPC("s2", "alice", nil)); code(err) != wire.CodeLimited {
				t.Fatalf("alice from s2: %v", err)
			}
		}
		if got := spend(t, a, []*wire.Request{fairRPC("s2", "bob", nil)}); got != 100 {
			t.Fatalf("s2 kept %d of its 100 after alice's refusals", got)
		}
		// …nor the family allowance: 2,000 − 200 spent remain for others.
		var callers []*wire.Request
		for i := range 19 {
			callers = append(callers, fairRPC(fmt.Sprintf("o%d", i), fmt.Sprintf("p%d", i), nil))
		}
		// 19 callers could spend 1,900 by their quotas; the family holds
		// 1,800.
		if got := spendUntil(t, a, callers, wire.CodeLimited, wire.CodeStopped); got != 1800 {
			t.Fatalf("others spent %d, want the 1800 left of the family allowance", got)
		}
	})
}

func TestResetFairnessIsAudited(t *testing.T) {
	fx := newFixture(t)
	ctx := context.Background()
	a := fx.admitter(fairConfig(switches{}))
	tiers := map[string]string{wire.TierV4Slash24: "n24"}
	if got := spend(t, a, []*wire.Request{fairRPC("s1", "", tiers)}); got != 100 {
		t.Fatalf("spent %d", got)
	}
	rec, err := a.ResetFairness(ctx, "ops@example", ResetRequest{Family: DefaultFamily, Source: "s1", SourceTiers: tiers, Reason: "shared office NAT"})
	if err != nil {
		t.Fatal(err)
	}
	if rec.Actor != "ops@example" || rec.At != epoch || rec.Reset.Source != "s1" {
		t.Fatalf("audit record %+v", rec)
	}
	if n := fx.logs.count("fairness quota reset"); n != 1 {
		t.Fatalf("reset logged %d times", n)
	}
	if got := spend(t, a, []*wire.Request{fairRPC("s1", "", tiers)}); got != 100 {
		t.Fatalf("after the reset s1 spent %d, want a fresh 100", got)
	}
}

// TestRefusedRPCHoldsNoPlace: an RPC that took the family's last command
// and whose fairness charge is still running holds that command only
// until its charge is decided. Another RPC arriving meanwhile waits for
// it, and is admitted when the charge refuses and gives the command back,
// rather than refused and the family stopped with a command unspent.
// The clock and the goroutines run in a bubble, so the test knows when
// each is blocked.
func TestRefusedRPCHoldsNoPlace(t *testing.T) {
	forEachStore(t, func(t *testing.T, newFx fixtureMaker) {
		synctest.Test(t, func(t *testing.T) {
			fx := newFx(t)
			ctx := context.Background()
			cfg := fairConfig(switches{})
			// alice is exhausted through another server, which leases one
			// command at a time, one RPC after another: this one asks the
			// store, and the store refuses her. 101 of 2,000 leased: her
			// 100, and the one her refused RPC gave back to that server's
			// chunk.
			other := cfg
			other.Chunk = 1
			o := fx.admitter(other)
			for k := 0; ; k++ {
				err := o.Admit(ctx, fairRPC("so", "alice", nil))
				if err == nil {
					continue
				}
				if code(err) != wire.CodeLimited || k != 100 {
					t.Fatalf("alice's RPC %d on the other server: %v", k, err)
				}
				break
			}
			a := fx.admitter(cfg)
			// 18 callers spend 1,800 and a 19th 98: one command is left.
			for i := range 19 {
				r := fairRPC(fmt.Sprint("s", i), fmt.Sprint("p", i), nil)
				for k := 0; i < 18 || k < 98; k++ {
					if err := a.Admit(ctx, r); err != nil {
						if code(err) == wire.CodeLimited && i < 18 && k == 100 {
							break
						}
						t.Fatalf("caller %d, RPC %d: %v", i, k, err)
					}
				}
			}

			// alice's next RPC takes the last command; her charge waits.
			reached, release := make(chan struct{}), make(chan struct{})
			var armed atomic.Bool
			armed.Store(true)
			fx.probe.set(func(partition string, _ []engine.Command) {
				quota := strings.HasPrefix(partition, engine.ReservedPartition("adm/q/")) || strings.HasPrefix(partition, engine.ReservedPartition("adm/p/"))
				if quota && armed.CompareAndSwap(true, false) {
					close(reached)
					<-release
				}
			}, nil)
			aliceErr, bobErr := make(chan error, 1), make(chan error, 1)
			go func() { aliceErr <- a.Admit(ctx, fairRPC("sa", "alice", nil)) }()
			select {
			case <-reached:
			case err := <-aliceErr:
				t.Fatalf("alice was answered (%v) before her charge reached the store", err)
			}
			go func() { bobErr <- a.Admit(ctx, fairRPC("sb", "bob", nil)) }()
			synctest.Wait()
			select {
			case err := <-bobErr:
				t.Fatalf("bob was answered (%v) while alice's charge held the last command", err)
			default:
			}
			close(release)
			if err := <-aliceErr; code(err) != wire.CodeLimited {
				t.Fatalf("alice: %v, want her principal's guard_limited", err)
			}
			if err := <-bobErr; err != nil {
				t.Fatalf("bob, after alice's refusal gave the last command back: %v, want admitted", err)
			}
			if err := a.Admit(ctx, fairRPC("sc", "carol", nil)); code(err) != wire.CodeStopped {
				t.Fatalf("carol, with nothing left: %v, want guard_stopped", err)
			}
		})
	})
}

// TestRowsExpire records every key admission writes while fair RPCs spend
// sources, a principal and the whole family, a principal's refusal is
// refunded and a source's quota reset, then reads each key's TTL from the
// store. Every row of an identity's quota or of a day's usage expires
// within keyTTL, so the store's sweep purges them (in its bounded batches)
// after the day; only the family's operator stop, its reset epoch and the
// audit trail live longer, a few rows per family and per operator action.
func TestRowsExpire(t *testing.T) {
	fx := newFixture(t)
	ctx := context.Background()
	type row struct{ partition, key string }
	var mu sync.Mutex
	written := map[row]bool{}
	fx.probe.set(func(partition string, cmds []engine.Command) {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range cmds {
			if c.Op == engine.OpGet || c.Op == engine.OpTTL {
				continue
			}
			for _, k := range append([]string{c.Key, c.Receipt}, budgetKeys(c.Budgets)...) {
				if k != "" {
					written[row{partition, k}] = true
				}
			}
		}
	}, nil)

	a := fx.admitter(fairConfig(switches{}))
	v4 := map[string]string{wire.TierV4Slash24: "n24"}
	v6 := map[string]string{wire.TierV6Slash56: "n56", wire.TierV6Slash48: "n48"}
	spend(t, a, []*wire.Request{fairRPC("s4", "", v4), fairRPC("s6", "", v6)})
	// A principal spent from several sources; then refused from a fresh
	// source after that source was charged, which the refund gives back.
	var many []*wire.Request
	for i := range 4 {
		many = append(many, fairRPC(fmt.Sprint("p-src-", i), "alice", v4))
	}
	spend(t, a, many)
	if _, err := a.ResetFairness(ctx, "ops@example", ResetRequest{Family: DefaultFamily, Source: "s4", SourceTiers: v4, Reason: "drill"}); err != nil {
		t.Fatal(err)
	}
	// Forty more identities, one RPC each: a source, its /24 and a
	// principal apiece, so that at least 120 quota rows are written
	// whatever the scheduler does below.
	sourced := func(prefix string, i int) *wire.Request {
		return fairRPC(fmt.Sprint(prefix, "-src-", i), fmt.Sprint(prefix, "-p-", i), map[string]string{wire.TierV4Slash24: fmt.Sprint(prefix, "-n-", i)})
	}
	for i := range 40 {
		r := sourced("one", i)
		r.OperationID = fmt.Sprint("one-", i)
		if err := a.Admit(ctx, r); err != nil {
			t.Fatalf("identity %d: %v", i, err)
		}
	}
	// Then the whole family, from many sources, until it is stopped.
	var sources []*wire.Request
	for i := range 40 {
		sources = append(sources, sourced("f", i))
	}
	spendAny(t, a, sources)
	if st, err := a.State(ctx); err != nil || !st[0].Stopped {
		t.Fatalf("state %+v, %v: want the family stopped for its budget", st, err)
	}

	longLived := map[string]bool{operatorStopKey: true, resetEpochKey: true, auditSeqKey: true}
	raw := engine.New(fx.store)
	var quota, long int
	for r := range written {
		var out engine.StepResult
		if err := raw.ApplyReservedPartition(ctx, r.partition, &out, engine.TTL(r.key)); err != nil {
			t.Fatalf("TTL of %q in %q: %v", r.key, r.partition, err)
		}
		res := out.Results[0]
		switch {
		case !res.Found:
			// Deleted (an operator resume clears a stop), or never kept.
		case r.partition == engine.ReservedPartition(auditPartition) || longLived[r.key]:
			long++
		case res.TTLMs <= 0 || res.TTLMs > keyTTL:
			t.Errorf("row %q of %q expires in %d ms, want within %d", r.key, r.partition, res.TTLMs, keyTTL)
		default:
			quota++
		}
	}
	if quota < 130 || long > 4 {
		t.Errorf("%d rows expiring within a day or two and %d living longer: want the quotas' many and the family's few", quota, long)
	}
	t.Logf("%d keys written: %d expire within %v, %d live longer", len(written), quota, time.Duration(keyTTL)*time.Millisecond, long)
}

func budgetKeys(bs []engine.Budget) []string {
	keys := make([]string, len(bs))
	for i, b := range bs {
		keys[i] = b.Key
	}
	return keys
}

// TestShareBelowOneCommandAdmitsNothing: a fair family of 19 commands a day
// gives each source and principal floor(19 / 20) = 0 commands, so no fair
// RPC is admitted: each is refused guard_limited without a store call on
// the quotas' partitions and spends nothing of the family.
func TestShareBelowOneCommandAdmitsNothing(t *testing.T) {
	fx := newFixture(t)
	ctx := context.Background()
	cfg := fairConfig(switches{})
	cfg.Total = 19
	a := fx.admitter(cfg)
	for _, r := range []*wire.Request{
		fairRPC("s", "", map[string]string{wire.TierV4Slash24: "n"}),
		fairRPC("", "alice", nil),
		fairRPC("s6", "bob", map[string]string{wire.TierV6Slash56: "n56", wire.TierV6Slash48: "n48"}),
	} {
		if err := a.Admit(ctx, r); code(err) != wire.CodeLimited {
			t.Errorf("a fair RPC with shares of 0: %v, want guard_limited", err)
		}
	}
	if n := fx.probe.count("adm/q/") + fx.probe.count("adm/p/"); n != 0 {
		t.Errorf("%d batches reached the quotas' partitions, want none", n)
	}
	if st, err := a.State(ctx); err != nil || st[0].Used-st[0].LeasedLeft != 0 {
		t.Errorf("state %+v, %v: want nothing spent", st, err)
	}
}

// TestResumeKeepsFairnessQuotas spends one source's share and then the
// whole family, which stops, and resumes it: the family gets a fresh
// allowance for the rest of the day, but the source that spent its share
// stays refused (a resume is not a fairness reset), while a fresh source is
// admitted.
func TestResumeKeepsFairnessQuotas(t *testing.T) {
	fx := newFixture(t)
	ctx := context.Background()
	a := fx.admitter(fairConfig(switches{}))
	spent := fairRPC("spent", "", map[string]string{wire.TierV4Slash24: "n-spent"})
	if got := spend(t, a, []*wire.Request{spent}); got != 100 {
		t.Fatalf("the source spent %d, want its share of 100", got)
	}
	var many []*wire.Request
	for i := range 40 {
		many = append(many, fairRPC(fmt.Sprint("s", i), fmt.Sprint("p", i), map[string]string{wire.TierV4Slash24: fmt.Sprint("n", i)}))
	}
	spendAny(t, a, many)
	if err := a.Admit(ctx, fairRPC("late", "", map[string]string{wire.TierV4Slash24: "n-late"})); code(err) != wire.CodeStopped {
		t.Fatalf("after the budget was spent: %v, want guard_stopped", err)
	}
	if err := a.ResumeFamily(ctx, DefaultFamily); err != nil {
		t.Fatal(err)
	}
	if st, err := a.State(ctx); err != nil || st[0].Stopped || st[0].Used-st[0].LeasedLeft != 0 {
		t.Fatalf("state after the resume %+v, %v: want the family running with nothing spent", st, err)
	}
	// A server started after the resume, which remembers no denial, reads
	// the quotas from the store.
	b := fx.admitter(fairConfig(switches{}))
	if err := b.Admit(ctx, spent); code(err) != wire.CodeLimited {
		t.Errorf("the spent source after a resume: %v, want guard_limited", err)
	}
	if err := b.Admit(ctx, fairRPC("late", "", map[string]string{wire.TierV4Slash24: "n-late"})); err != nil {
		t.Errorf("a fresh source after a resume: %v, want admitted", err)
	}
}

// TestResumeDuringARefusedChargeGivesNothingBack: a resume resets the
// family's usage and the chunk this server leased before it. An RPC that
// took commands from that chunk and is refused by its quota after the
// resume does not give them to the fresh allowance: after the resume the
// family admits its allowance, not a command more.
func TestResumeDuringARefusedChargeGivesNothingBack(t *testing.T) {
	forEachStore(t, func(t *testing.T, newFx fixtureMaker) {
		fx := newFx(t)
		ctx := context.Background()
		cfg := smallConfig(10_000)
		cfg.Chunk = 100
		a, other := fx.admitter(cfg), fx.admitter(cfg)
		// The principal's quota (500 a day) is spent through another
		// server: this one remembers no denial and asks the store.
		spent := rpc(DefaultFamily, 5)
		spent.Principal = "spent"
		for {
			spent.OperationID = engine.NewOperationID()
			if err := other.Admit(ctx, spent); err != nil {
				if code(err) != wire.CodeLimited {
					t.Fatalf("spending the principal: %v, want guard_limited", err)
				}
				break
			}
		}
		if err := a.Admit(ctx, rpc(DefaultFamily, 1)); err != nil {
			t.Fatal(err)
		}
		var resumed atomic.Bool
		fx.probe.set(func(partition string, _ []engine.Command) {
			if strings.HasPrefix(partition, engine.ReservedPartition("adm/p/")) && resumed.CompareAndSwap(false, true) {
				if err := a.ResumeFamily(ctx, DefaultFamily); err != nil {
					t.Error(err)
				}
			}
		}, nil)
		refused := rpc(DefaultFamily, 8)
		refused.Principal = "spent"
		if err := a.Admit(ctx, refused); code(err) != wire.CodeLimited || !resumed.Load() {
			t.Fatalf("an RPC of the spent principal, resumed during its charge (%v): %v, want guard_limited", resumed.Load(), err)
		}
		fx.probe.set(nil, nil)
		if admitted, err := admitAll(ctx, a, DefaultFamily, 1); admitted != 10_000 || code(err) != wire.CodeStopped {
			t.Fatalf("after the resume the family admitted %d then %v, want its allowance of 10,000", admitted, err)
		}
	})
}

// TestResetDuringARefundLeavesAFreshCount: on a store of two batches, an
// RPC whose source was charged and whose principal then refused gives the
// source's charge back. A fairness reset of that source landing between
// the charge and the refund deleted the charge already: the refund must
// not leave the fresh count below zero, which would admit the source more
// than its share.
func TestResetDuringARefundLeavesAFreshCount(t *testing.T) {
	fx := newFixture(t)
	ctx := context.Background()
	cfg := fairConfig(switches{})
	a := fx.admitter(cfg)
	exhaustPrincipal(t, fx.admitter(cfg), "spent")
	var reset atomic.Bool
	fx.probe.set(func(partition string, cmds []engine.Command) {
		if cmds[0].Op == engine.OpIncr && cmds[0].Delta < 0 && reset.CompareAndSwap(false, true) {
			if _, err := a.ResetFairness(ctx, "ops", ResetRequest{Family: DefaultFamily, Source: "s"}); err != nil {
				t.Error(err)
			}
		}
	}, nil)
	if err := a.Admit(ctx, fairRPC("s", "spent", nil)); code(err) != wire.CodeLimited || !reset.Load() {
		t.Fatalf("the spent principal's RPC, its source reset before the refund (%v): %v, want guard_limited", reset.Load(), err)
	}
	fx.probe.set(nil, nil)
	var callers []*wire.Request
	for i := range 4 {
		callers = append(callers, fairRPC("s", fmt.Sprint("p", i), nil))
	}
	if got := spend(t, a, callers); got != 100 {
		t.Errorf("after the reset source s was admitted %d, want its fresh share of 100", got)
	}
}
