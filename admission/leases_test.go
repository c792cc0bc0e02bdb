package admission

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/wire"
)

// The lease tests give one fair family 200,000 commands a day: a source or
// a principal may spend 10,000, and each charge that reaches the store
// reserves a chunk of 100 more (1 % of the share) for the identity's next
// RPCs on this server.
const (
	leaseShare = 10_000
	leaseChunk = 100
)

func leaseConfig() Config {
	cfg := DefaultConfig()
	cfg.Total = 20 * leaseShare
	cfg.Fair = []string{DefaultFamily}
	return cfg
}

// spendAlone sends rpc through a, one at a time, until it is refused, and
// returns how many were admitted; the refusal must be guard_limited.
func spendAlone(t *testing.T, a *Admitter, rpc *wire.Request) int {
	t.Helper()
	for n := 0; ; n++ {
		r := *rpc
		r.OperationID = fmt.Sprint("op", n)
		if err := a.Admit(context.Background(), &r); err != nil {
			if code(err) != wire.CodeLimited {
				t.Fatalf("after %d admitted: %v, want guard_limited", n, err)
			}
			return n
		}
	}
}

// TestLeasesSpareTheStore: an identity's RPCs reach the store once per
// chunk, not once each.
func TestLeasesSpareTheStore(t *testing.T) {
	forEachStore(t, func(t *testing.T, newFx fixtureMaker) {
		fx := newFx(t)
		a := fx.admitter(leaseConfig())
		const rpcs = 10 * (1 + leaseChunk)
		for i := range rpcs {
			if err := a.Admit(context.Background(), fairRPC("s", "alice", nil)); err != nil {
				t.Fatalf("rpc %d: %v", i, err)
			}
		}
		// Ten charges, each of one RPC and a chunk, each a batch on the
		// source's partition and one on the principal's.
		if got := fx.quotaBatches(); got != 2*10 {
			t.Errorf("%d RPCs made %d quota batches, want 20", rpcs, got)
		}
	})
}

// TestLeasedShareIsExact: with leases, an identity is still admitted its
// whole share and not one command more, by one server or by two spending
// it at once: a charge near the share that cannot fit its chunk charges
// its RPC alone, and a server refuses only once its own lease is spent.
func TestLeasedShareIsExact(t *testing.T) {
	forEachStore(t, func(t *testing.T, newFx fixtureMaker) {
		fx := newFx(t)
		cfg := leaseConfig()
		if got := spendAlone(t, fx.admitter(cfg), fairRPC("s", "alice", nil)); got != leaseShare {
			t.Errorf("one server admitted %d, want the share %d", got, leaseShare)
		}
		one, two := fx.admitter(cfg), fx.admitter(cfg)
		var callers []*wire.Request
		for i := range 4 {
			callers = append(callers, fairRPC("s2", fmt.Sprint("p", i), nil))
		}
		var wg sync.WaitGroup
		var got [2]int64
		for i, a := range []*Admitter{one, two} {
			wg.Go(func() { got[i] = spend(t, a, callers) })
		}
		wg.Wait()
		if got[0]+got[1] != leaseShare {
			t.Errorf("two servers admitted %d + %d of one source, want its share %d in all", got[0], got[1], leaseShare)
		}
	})
}

// TestLeaseRefusalGivesBack: an RPC that takes its source's commands from
// the source's lease and is then refused for its principal gives them
// back: a fairness denial spends nothing, lease or not.
func TestLeaseRefusalGivesBack(t *testing.T) {
	fx := newFixture(t)
	cfg := leaseConfig()
	// alice is spent through another server, from sources of her own.
	other := fx.admitter(cfg)
	for i := 0; ; i++ {
		if err := other.Admit(context.Background(), fairRPC(fmt.Sprint("x", i/1000), "alice", nil)); err != nil {
			if code(err) != wire.CodeLimited {
				t.Fatal(err)
			}
			break
		}
	}
	a := fx.admitter(cfg)
	bob := 0
	for {
		if err := a.Admit(context.Background(), fairRPC("s", "alice", nil)); code(err) != wire.CodeLimited {
			t.Fatalf("alice, spent: %v", err)
		}
		if err := a.Admit(context.Background(), fairRPC("s", "bob", nil)); err != nil {
			if code(err) != wire.CodeLimited {
				t.Fatal(err)
			}
			break
		}
		bob++
	}
	if bob != leaseShare {
		t.Errorf("source s admitted bob %d times between alice's refusals, want its whole share %d", bob, leaseShare)
	}
}

// TestRestartLosesAtMostAChunk: a lease is this server's alone; a restart
// loses what it held unspent, so the identity is admitted less that day,
// never more.
func TestRestartLosesAtMostAChunk(t *testing.T) {
	fx := newFixture(t)
	if err := fx.admitter(leaseConfig()).Admit(context.Background(), fairRPC("s", "alice", nil)); err != nil {
		t.Fatal(err)
	}
	restarted := fx.admitter(leaseConfig())
	if got := spendAlone(t, restarted, fairRPC("s", "alice", nil)); got != leaseShare-1-leaseChunk {
		t.Errorf("after a restart alice was admitted %d more, want her share less the RPC before and the chunk lost: %d", got, leaseShare-1-leaseChunk)
	}
}

// TestConcurrentRPCsReserveOneChunk: RPCs of one identity arriving together
// reserve one chunk between them, not one each: the others charge their
// own commands alone while that chunk is being reserved. What a restart
// loses stays within one chunk.
func TestConcurrentRPCsReserveOneChunk(t *testing.T) {
	forEachStore(t, func(t *testing.T, newFx fixtureMaker) {
		fx := newFx(t)
		a := fx.admitter(leaseConfig())
		const together = 64
		var wg sync.WaitGroup
		for range together {
			wg.Go(func() {
				if err := a.Admit(context.Background(), fairRPC("s", "alice", nil)); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		restarted := fx.admitter(leaseConfig())
		if got := spendAlone(t, restarted, fairRPC("s", "alice", nil)); got < leaseShare-together-leaseChunk {
			t.Errorf("after %d RPCs at once and a restart alice was admitted %d more, want at least %d: more than one chunk was reserved",
				together, got, leaseShare-together-leaseChunk)
		}
	})
}

// TestResetDropsLeases: a fairness reset gives the identity a fresh share,
// and the leases this server held of the old one are gone with it, not
// spent on top of the new share.
func TestResetDropsLeases(t *testing.T) {
	forEachStore(t, func(t *testing.T, newFx fixtureMaker) {
		fx := newFx(t)
		a := fx.admitter(leaseConfig())
		if err := a.Admit(context.Background(), fairRPC("s", "alice", nil)); err != nil {
			t.Fatal(err)
		}
		if _, err := a.ResetFairness(context.Background(), "ops", ResetRequest{Family: DefaultFamily, Source: "s", Principal: "alice"}); err != nil {
			t.Fatal(err)
		}
		if got := spendAlone(t, a, fairRPC("s", "alice", nil)); got != leaseShare {
			t.Errorf("after the reset alice was admitted %d, want a fresh share of %d", got, leaseShare)
		}
	})
}

// TestLeasesEndWithTheDay: what a server leased of one UTC day's quota is
// never admitted on the next.
func TestLeasesEndWithTheDay(t *testing.T) {
	fx := newFixture(t)
	a := fx.admitter(leaseConfig())
	if err := a.Admit(context.Background(), fairRPC("s", "alice", nil)); err != nil {
		t.Fatal(err)
	}
	fx.clock.Advance(24 * time.Hour)
	if got := spendAlone(t, a, fairRPC("s", "alice", nil)); got != leaseShare {
		t.Errorf("the next day alice was admitted %d, want that day's share of %d", got, leaseShare)
	}
}

func TestQuotaChunkIsValidated(t *testing.T) {
	cfg := leaseConfig()
	cfg.QuotaChunk = -1
	if err := cfg.Validate(); err == nil {
		t.Error("a negative quota chunk was accepted")
	}
	cfg.QuotaChunk = 0
	if err := cfg.Validate(); err != nil {
		t.Errorf("a quota chunk of 0 (no leases): %v", err)
	}
}

// fairRPCOf is fairRPC with n commands.
func fairRPCOf(n int, source, principal string) *wire.Request {
	r := rpc(DefaultFamily, n)
	r.Source, r.Principal = source, principal
	return r
}

// TestLeaseHoldsAtMostAChunk: an RPC that its lease cannot cover tops the
// lease up to a chunk, not a chunk beyond what it still holds, so a
// restart loses at most one chunk whatever the RPCs' sizes — RPCs larger
// than the chunk included.
func TestLeaseHoldsAtMostAChunk(t *testing.T) {
	for _, sizes := range [][]int{{1, 60, 50}, {250, 250, 250}, {1, 99, 100, 150}} {
		t.Run(fmt.Sprint(sizes), func(t *testing.T) {
			forEachStore(t, func(t *testing.T, newFx fixtureMaker) {
				fx := newFx(t)
				a := fx.admitter(leaseConfig())
				admitted := 0
				for _, n := range sizes {
					if err := a.Admit(context.Background(), fairRPCOf(n, "s", "alice")); err != nil {
						t.Fatal(err)
					}
					admitted += n
				}
				restarted := fx.admitter(leaseConfig())
				if got := spendAlone(t, restarted, fairRPC("s", "alice", nil)); got < leaseShare-admitted-leaseChunk {
					t.Errorf("after RPCs of %v and a restart alice was admitted %d more, want at least %d: the lease held more than a chunk",
						sizes, got, leaseShare-admitted-leaseChunk)
				}
			})
		})
	}
}

// TestLeaseIsDurableBeforeItAdmits: an RPC admitted from a lease, without
// a store call, reports nothing pending, so nothing it answers may rest on
// a reservation a crash could lose. The charge that reserves a chunk makes
// it durable before the lease holds it, and a lease whose reservation
// could not be made durable holds nothing.
func TestLeaseIsDurableBeforeItAdmits(t *testing.T) {
	fx := newFixture(t)
	dl := &deferLog{Store: fx.probe}
	cfg := leaseConfig()
	cfg.Now = fx.clock.Now
	a := New(engine.New(dl), cfg)
	ctx := t.Context()

	// The first RPC reserves a chunk; its caller has not synced yet (its
	// subject is still running) when the second arrives.
	if _, err := a.AdmitDeferred(ctx, fairRPC("s", "alice", nil)); err != nil {
		t.Fatal(err)
	}
	first := dl.take()
	pending, err := a.AdmitDeferred(ctx, fairRPC("s", "alice", nil))
	if err != nil {
		t.Fatal(err)
	}
	second := dl.take()
	if slices.Contains(second, "defer") {
		t.Fatalf("second RPC: calls %q, want it admitted from the lease, without a charge", second)
	}
	synced := slices.Contains(second, "sync") ||
		slices.Contains(first[max(0, slices.Index(first, "defer")):], "sync")
	if !pending && !synced {
		t.Errorf("the second RPC was admitted from a lease, nothing pending, and no sync followed the reservation (calls %q then %q): a crash could lose what it rests on",
			first, second)
	}

	// A reservation that cannot be made durable: the RPC is refused and
	// the lease holds nothing, so bob's next RPC is charged in the store.
	dl.syncErr = fmt.Errorf("fsync: %w", engine.ErrUnavailable)
	pending, err = a.AdmitDeferred(ctx, fairRPC("s2", "bob", nil))
	if code(err) != wire.CodeUnavailable {
		t.Fatalf("bob with a failing sync: pending %v, %v, want guard_unavailable", pending, err)
	}
	dl.syncErr = nil
	dl.take()
	if _, err := a.AdmitDeferred(ctx, fairRPC("s2", "bob", nil)); err != nil {
		t.Fatal(err)
	}
	if calls := dl.take(); !slices.Contains(calls, "defer") {
		t.Errorf("bob after a failed sync: calls %q, want a charge in the store, not the lease of a reservation that failed", calls)
	}
}

// TestNoRPCIsAdmittedFromALeaseOlderThanAReset: an RPC that took from an
// identity's lease while a fairness reset on the same server ran, and
// finds the reset done, gives the lease back and is charged against the
// fresh counters: after the reset the identity is admitted its fresh
// share, that RPC included, and not one command more.
func TestNoRPCIsAdmittedFromALeaseOlderThanAReset(t *testing.T) {
	fx := newFixture(t)
	cfg := leaseConfig()
	taken, resume := make(chan struct{}), make(chan struct{})
	var hold atomic.Bool
	cfg.switches.leasesTaken = func() {
		if hold.CompareAndSwap(true, false) {
			close(taken)
			<-resume
		}
	}
	a := fx.admitter(cfg)
	if err := a.Admit(context.Background(), fairRPC("s", "alice", nil)); err != nil {
		t.Fatal(err) // alice and s now hold leases
	}
	hold.Store(true)
	done := make(chan error)
	go func() { done <- a.Admit(context.Background(), fairRPC("s", "alice", nil)) }()
	<-taken // the RPC took its commands from the leases
	if _, err := a.ResetFairness(context.Background(), "ops", ResetRequest{Family: DefaultFamily, Source: "s", Principal: "alice"}); err != nil {
		t.Fatal(err)
	}
	close(resume)
	if err := <-done; err != nil {
		t.Fatalf("the RPC taken from the leases during the reset: %v", err)
	}
	if got := spendAlone(t, a, fairRPC("s", "alice", nil)); got != leaseShare-1 {
		t.Errorf("after the reset alice was admitted %d more, want her fresh share less the RPC the reset overtook: %d", got, leaseShare-1)
	}
}
