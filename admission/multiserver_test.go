package admission

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/engine"
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

// ledger counts what a stress test's servers admitted, by UTC day: in
// total and per identity on each fairness axis. An RPC whose day is not
// known (the clock crossed midnight while it was being admitted) counts
// only in ambiguous, so that every per-day figure is a lower bound of
// what the day really admitted.
type ledger struct {
	mu        sync.Mutex
	days      map[int64]map[string]int64 // "" is the day's total
	ambiguous int64
}

func (l *ledger) add(before, after int64, r *wire.Request, n int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if before != after {
		l.ambiguous += n
		return
	}
	if l.days == nil {
		l.days = map[int64]map[string]int64{}
	}
	d := l.days[before]
	if d == nil {
		d = map[string]int64{}
		l.days[before] = d
	}
	d[""] += n
	d["source "+r.Source] += n
	d["principal "+r.Principal] += n
	for tier, h := range r.SourceTiers {
		d[tier+" "+h] += n
	}
}

// sum returns every command admitted, days and ambiguous alike.
func (l *ledger) sum() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.ambiguous
	for _, d := range l.days {
		s += d[""]
	}
	return s
}

// TestServersShareOneAllowanceAndOneQuota runs three servers over one
// store, eighteen goroutines sending fair RPCs of one to three commands
// through them (half of them from four hot sources or four hot
// principals), while the clock moves on in steps of half StateRefresh and
// across UTC midnight, and the servers stop, resume, restart and reset
// principals' quotas under the callers' feet. No day admits more than its
// allowance for each time it was given (once, and once more per resume:
// the chunks other servers leased before a resume and spend after it were
// leased of the allowance before it), no source, tier or principal more
// than its share for each time it was given (once, and once more per
// reset of that principal), and the total of the run, ambiguous days
// included, no more than the sum of the days' caps. Every refusal is a
// quota's or a stop's. Afterwards, a principal exhausted on every server
// and reset through one is admitted by each within StateRefresh.
func TestServersShareOneAllowanceAndOneQuota(t *testing.T) {
	forEachMemStore(t, func(t *testing.T, newFx fixtureMaker) {
		fx := newFx(t)
		ctx := context.Background()
		cfg := fairConfig(switches{})
		cfg.Total = 300 // chunks of 3; shares: source and principal 15, /24 60
		const (
			servers, workers, rpcs = 3, 18, 150
			step                   = 60 // RPCs between two events
		)
		var srv [servers]atomic.Pointer[Admitter]
		for i := range srv {
			srv[i].Store(fx.admitter(cfg))
		}
		f := srv[0].Load().fams[DefaultFamily]
		// Midnight comes at the 20th of 45 events.
		fx.clock.Set(time.Date(2026, 1, 1, 23, 59, 50, 0, time.UTC))

		var book ledger
		var progress, limited, stopped atomic.Int64
		events := make(chan int64, workers*rpcs/step+1)
		// RPC p starts once the events of the RPCs before it have run:
		// the events land among the RPCs as planned, however the
		// goroutines are scheduled, and the run crosses midnight.
		var gate sync.Mutex
		turn := sync.NewCond(&gate)
		processed := int64(0) // events run so far
		var wg sync.WaitGroup
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(w), 1))
				pick := func(hot, all int) int {
					if rng.IntN(2) == 0 {
						return rng.IntN(hot)
					}
					return rng.IntN(all)
				}
				for range rpcs {
					p := progress.Add(1)
					gate.Lock()
					for processed < (p-1)/step {
						turn.Wait()
					}
					gate.Unlock()
					a := srv[rng.IntN(servers)].Load()
					n := 1 + rng.IntN(3)
					s := pick(4, 80)
					r := rpc(DefaultFamily, n)
					r.Source, r.Principal = fmt.Sprint("s", s), fmt.Sprint("p", pick(4, 80))
					r.SourceTiers = map[string]string{wire.TierV4Slash24: fmt.Sprint("n", s%16)}
					before := dayOf(fx.clock.Now())
					err := a.Admit(ctx, r)
					after := dayOf(fx.clock.Now())
					switch code(err) {
					case "":
						book.add(before, after, r, int64(n))
					case wire.CodeLimited:
						limited.Add(1)
					case wire.CodeStopped:
						stopped.Add(1)
					default:
						t.Errorf("refusal %v, want guard_limited or guard_stopped", err)
					}
					if p%step == 0 {
						events <- p
					}
				}
			}()
		}
		go func() { wg.Wait(); close(events) }()

		resumes := map[int64]int64{}           // by day
		resets := map[int64]map[string]int64{} // by day, then principal
		event := 0
		for range events {
			event++
			fx.clock.Advance(cfg.StateRefresh / 2)
			day := dayOf(fx.clock.Now())
			switch {
			case event == 8 || event == 30:
				if err := srv[event%servers].Load().StopFamily(ctx, DefaultFamily, "stress"); err != nil {
					t.Error(err)
				}
			case event == 11 || event == 33:
				if err := srv[(event+1)%servers].Load().ResumeFamily(ctx, DefaultFamily); err != nil {
					t.Error(err)
				}
				resumes[day]++
			case event%10 == 6:
				srv[event%servers].Store(fx.admitter(cfg)) // a restart: its chunk is lost
			case event%10 == 3 || event%10 == 9:
				p := fmt.Sprint("p", event%5)
				if _, err := srv[(event+2)%servers].Load().ResetFairness(ctx, "ops", ResetRequest{Family: DefaultFamily, Principal: p}); err != nil {
					t.Error(err)
				}
				if resets[day] == nil {
					resets[day] = map[string]int64{}
				}
				resets[day]["principal "+p]++
			}
			gate.Lock()
			processed++
			turn.Broadcast()
			gate.Unlock()
		}
		t.Logf("%d refused by a quota, %d by a stop", limited.Load(), stopped.Load())

		var caps int64
		for day, d := range book.days {
			allowance := f.allowance * (1 + resumes[day])
			caps += allowance
			t.Logf("day %s: %d admitted of %d; %d resumes", dayName(day), d[""], allowance, resumes[day])
			for key, got := range d {
				if key == "" {
					if got > allowance {
						t.Errorf("day %s admitted %d commands, above its allowance of %d", dayName(day), got, allowance)
					}
					continue
				}
				limit := f.limits[axisSource]
				if strings.HasPrefix(key, wire.TierV4Slash24) {
					limit = f.limits[axisV4Slash24]
				}
				limit *= 1 + resets[day][key]
				if got > limit {
					t.Errorf("day %s: %s spent %d, above its share of %d", dayName(day), key, got, limit)
				}
			}
		}
		if len(book.days) != 2 {
			t.Fatalf("the run admitted on %d days, want 2 (across midnight)", len(book.days))
		}
		if got := book.sum(); got > caps {
			t.Errorf("the run admitted %d commands, above its days' caps of %d (%d of them across midnight)", got, caps, book.ambiguous)
		}

		// A principal exhausted, and remembered, by every server, then
		// reset through one of them: every server admits it within
		// StateRefresh.
		if err := srv[0].Load().ResumeFamily(ctx, DefaultFamily); err != nil {
			t.Fatal(err)
		}
		fx.clock.Advance(cfg.StateRefresh)
		for i := range srv {
			a := srv[i].Load()
			for k := 0; ; k++ {
				err := a.Admit(ctx, fairRPC(fmt.Sprint("x", i, "-", k), "zed", nil))
				if code(err) == wire.CodeLimited {
					break
				}
				if err != nil || k > int(f.limits[axisPrincipal]) {
					t.Fatalf("zed's RPC %d on server %d: %v", k, i, err)
				}
			}
		}
		if _, err := srv[1].Load().ResetFairness(ctx, "ops", ResetRequest{Family: DefaultFamily, Principal: "zed"}); err != nil {
			t.Fatal(err)
		}
		fx.clock.Advance(cfg.StateRefresh)
		for i := range srv {
			if err := srv[i].Load().Admit(ctx, fairRPC(fmt.Sprint("y", i), "zed", nil)); err != nil {
				t.Errorf("server %d, StateRefresh after zed's reset through server 1: %v, want admitted", i, err)
			}
		}
	})
}

// forEachMemStore runs test over memstore with its joint steps hidden (two
// batches, with a refund) and in view (one joint step).
func forEachMemStore(t *testing.T, test func(*testing.T, fixtureMaker)) {
	t.Run("two batches", func(t *testing.T) { test(t, newFixture) })
	t.Run("joint step", func(t *testing.T) { test(t, newMemJointFixture) })
}

// TestBudgetStopDoesNotOutliveAResume: a server that found the allowance
// spent writes the budget stop after an operator's resume on another
// server, which gave the family a fresh allowance. The stop it wrote late
// does not hold: every server reads it with the fresh usage, and admits.
func TestBudgetStopDoesNotOutliveAResume(t *testing.T) {
	fx := newFixture(t)
	ctx := context.Background()
	cfg := smallConfig(20)
	cfg.StateRefresh = 0
	one, two := fx.admitter(cfg), fx.admitter(cfg)
	stopKey := newDayKeys(dayOf(fx.clock.Now())).stop
	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	fx.probe.set(func(partition string, cmds []engine.Command) {
		if partition == engine.ReservedPartition(familyPartition(DefaultFamily)) && cmds[0].Op == engine.OpSet && cmds[0].Key == stopKey {
			once.Do(func() {
				close(held)
				<-release
			})
		}
	}, nil)
	done := make(chan error)
	go func() {
		_, err := admitAll(ctx, one, DefaultFamily, 1)
		done <- err
	}()
	<-held // one found the allowance spent and is about to write the stop
	if err := two.ResumeFamily(ctx, DefaultFamily); err != nil {
		t.Fatal(err)
	}
	close(release)
	if err := <-done; code(err) != wire.CodeStopped {
		t.Fatalf("the server that spent the allowance: %v, want guard_stopped", err)
	}
	fx.probe.set(nil, nil)
	for name, a := range map[string]*Admitter{"the resuming server": two, "a restarted server": fx.admitter(cfg), "the stopping server": one} {
		if err := a.Admit(ctx, rpc(DefaultFamily, 1)); err != nil {
			t.Errorf("%s after the resume: %v, want the fresh allowance admitted", name, err)
		}
	}
	st, err := two.State(ctx)
	if err != nil || len(st) != 1 || st[0].Stopped {
		t.Fatalf("state after the resume = %+v, %v; want the family running", st, err)
	}
}

// TestBudgetStopHoldsWhenTheUsageIsUnreadable: a budget stop holds only
// while the day's usage says the budget is spent, and a usage that is not
// a number says nothing: the stop holds, as an unreadable stop record
// does, rather than let the server admit from the chunk it holds.
func TestBudgetStopHoldsWhenTheUsageIsUnreadable(t *testing.T) {
	fx := newFixture(t)
	ctx := context.Background()
	cfg := smallConfig(10_000)
	cfg.Chunk = 100
	cfg.StateRefresh = 0
	a := fx.admitter(cfg)
	if err := a.Admit(ctx, rpc(DefaultFamily, 1)); err != nil {
		t.Fatal(err) // a chunk leased, 99 of it left
	}
	k := newDayKeys(dayOf(fx.clock.Now()))
	var out engine.StepResult
	if err := fx.eng.ApplyReserved(ctx, familyPartition(DefaultFamily), &out,
		engine.Set(k.stop, `{"reason":"daily operation budget exhausted"}`, keyTTL), engine.Set(k.used, "unreadable", keyTTL)); err != nil {
		t.Fatal(err)
	}
	if err := a.Admit(ctx, rpc(DefaultFamily, 1)); code(err) != wire.CodeStopped {
		t.Errorf("a budget stop beside an unreadable usage: %v, want guard_stopped", err)
	}
	st, err := a.State(ctx)
	if err != nil || len(st) != 1 || !st[0].Stopped || st[0].OperatorStop {
		t.Errorf("state = %+v, %v; want the family stopped by its budget", st, err)
	}
}
