package algo_test

import (
	"errors"
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/sluicehq/sluice/algo"
)

// pacer holds a pacing state and checks each transition in a table test.
type pacer struct {
	t *testing.T
	l algo.PaceLimit
	s algo.PaceState
}

func (p *pacer) take(now, cost, maxWait int64, want algo.PaceDecision) {
	p.t.Helper()
	before := clonePace(p.s)
	next, d := p.s.Take(p.l, now, cost, maxWait)
	if d != want {
		p.t.Errorf("Take(now=%d, cost=%d, maxWait=%d) = %+v, want %+v", now, cost, maxWait, d, want)
	}
	if !d.Allowed && !equalPace(next, before) {
		p.t.Errorf("denied Take changed the state: %+v → %+v", before, next)
	}
	p.s = next
}

func (p *pacer) claim(now, at, cost, maxWait int64, want algo.PaceDecision) {
	p.t.Helper()
	next, d := p.s.Claim(p.l, now, at, cost, maxWait)
	if d != want {
		p.t.Errorf("Claim(now=%d, at=%d, cost=%d, maxWait=%d) = %+v, want %+v", now, at, cost, maxWait, d, want)
	}
	p.s = next
}

func (p *pacer) wantLog(want ...algo.Entry) {
	p.t.Helper()
	if !slices.Equal(p.s.Log, want) {
		p.t.Errorf("log = %v, want %v", p.s.Log, want)
	}
}

func clonePace(s algo.PaceState) algo.PaceState {
	s.Log = slices.Clone(s.Log)
	return s
}

func equalPace(a, b algo.PaceState) bool {
	return a.ForcedUntil == b.ForcedUntil && a.Hold == b.Hold && a.PenalizedAt == b.PenalizedAt && slices.Equal(a.Log, b.Log)
}

func TestPaceValidate(t *testing.T) {
	for _, l := range []algo.PaceLimit{{Limit: 1, Window: 1}, {Limit: algo.MaxLogLimit, Window: algo.MaxWindow, RefillPermille: 1000}} {
		if err := l.Validate(); err != nil {
			t.Errorf("Validate(%+v) = %v", l, err)
		}
	}
	for _, l := range []algo.PaceLimit{
		{Limit: 0, Window: 1}, {Limit: algo.MaxLogLimit + 1, Window: 1},
		{Limit: 1, Window: 0}, {Limit: 1, Window: algo.MaxWindow + 1},
		{Limit: 1, Window: 1, RefillPermille: -1}, {Limit: 1, Window: 1, RefillPermille: 1001},
	} {
		if err := l.Validate(); !errors.Is(err, algo.ErrInvalid) {
			t.Errorf("Validate(%+v) = %v, want ErrInvalid", l, err)
		}
	}
}

func TestPaceTakeIsAnExactSlidingLog(t *testing.T) {
	p := &pacer{t: t, l: algo.PaceLimit{Limit: 3, Window: 1000, RefillPermille: 500}}
	p.take(0, 1, 0, algo.PaceDecision{Allowed: true, At: 0, Remaining: 2, ResetAt: 1000})
	p.take(100, 1, 0, algo.PaceDecision{Allowed: true, At: 100, Remaining: 1, ResetAt: 1100})
	p.take(200, 1, 0, algo.PaceDecision{Allowed: true, At: 200, Remaining: 0, ResetAt: 1200})
	// Full: the grant at 0 leaves the window at 1000, 700 ms away.
	p.take(300, 1, 699, algo.PaceDecision{At: 1000, Remaining: 0, ResetAt: 1200, RetryAfter: 700})
	p.take(999, 1, 0, algo.PaceDecision{At: 1000, Remaining: 0, ResetAt: 1200, RetryAfter: 1})
	p.take(1000, 1, 0, algo.PaceDecision{Allowed: true, At: 1000, Remaining: 0, ResetAt: 2000})
	p.wantLog(algo.Entry{At: 100, N: 1}, algo.Entry{At: 200, N: 1}, algo.Entry{At: 1000, N: 1})
	// A cost of 2 needs both the grants at 100 and 200 gone.
	p.take(1000, 2, 0, algo.PaceDecision{At: 1200, Remaining: 0, ResetAt: 2000, RetryAfter: 200})
}

func TestPaceReservationsAreFIFO(t *testing.T) {
	p := &pacer{t: t, l: algo.PaceLimit{Limit: 2, Window: 1000, RefillPermille: 500}}
	p.take(0, 2, 0, algo.PaceDecision{Allowed: true, At: 0, Remaining: 0, ResetAt: 1000})
	// Reserved: a slot in the future, counted at once.
	p.take(10, 1, 5000, algo.PaceDecision{Allowed: true, At: 1000, Remaining: 0, ResetAt: 2000})
	p.take(20, 1, 5000, algo.PaceDecision{Allowed: true, At: 1000, Remaining: 0, ResetAt: 2000})
	// Later callers queue behind: never before the last reserved slot.
	p.take(30, 1, 5000, algo.PaceDecision{Allowed: true, At: 2000, Remaining: 0, ResetAt: 3000})
	p.take(1500, 1, 5000, algo.PaceDecision{Allowed: true, At: 2000, Remaining: 0, ResetAt: 3000})
	// The grants at 0 have left every window that can still matter.
	p.wantLog(algo.Entry{At: 1000, N: 2}, algo.Entry{At: 2000, N: 2})
	// A caller that will not wait that long is refused and recorded nowhere.
	p.take(1500, 1, 1499, algo.PaceDecision{At: 3000, Remaining: 0, ResetAt: 3000, RetryAfter: 1500})
	// Claiming early is told to wait; on time, it runs.
	p.claim(999, 1000, 1, 5000, algo.PaceDecision{At: 1000, Remaining: 0, ResetAt: 3000, RetryAfter: 1})
	p.claim(1000, 1000, 1, 5000, algo.PaceDecision{Allowed: true, At: 1000, Remaining: 0, ResetAt: 3000})
	p.wantLog(algo.Entry{At: 1000, N: 2}, algo.Entry{At: 2000, N: 2})
}

func TestPacePenaltyTakesTheLatestDeadline(t *testing.T) {
	l := algo.PaceLimit{Limit: 10, Window: 1000, RefillPermille: 500}
	var s algo.PaceState
	// Three callers report 429s at once: 5 s, 60 s and 5 s.
	for _, delay := range []int64{5_000, 60_000, 5_000} {
		s = s.Penalize(l, 0, delay)
	}
	if s.ForcedUntil != 60_000 {
		t.Fatalf("ForcedUntil = %d, want 60000", s.ForcedUntil)
	}
	// One hold of 5 at 60 s: the first penalty's lies outside the window
	// recovering at 60 s, before which nothing is granted.
	if s.Hold != 5 {
		t.Fatalf("Hold = %d, want 5", s.Hold)
	}
	_, d := s.Take(l, 5_000, 1, 0)
	if want := (algo.PaceDecision{At: 60_000, Remaining: 5, ResetAt: 61_000, RetryAfter: 55_000}); d != want {
		t.Errorf("Take at 5 s = %+v, want %+v", d, want)
	}
	_, d = s.Take(l, 5_000, 1, 60_000)
	if !d.Allowed || d.At != 60_000 {
		t.Errorf("Take at 5 s with a long wait = %+v, want a slot at 60 s", d)
	}
	// A penalty that ends no later than the current one changes nothing.
	if got := s.Penalize(l, 100, 59_999); !equalPace(got, s) {
		t.Errorf("an earlier deadline changed the state: %+v", got)
	}
	// Nor does one that has already ended.
	if got := (algo.PaceState{}).Penalize(l, 100, 100); !equalPace(got, algo.PaceState{}) {
		t.Errorf("a deadline at now changed the state: %+v", got)
	}
}

func TestPaceRecoveringWindowReopensAtRefill(t *testing.T) {
	tests := []struct {
		name      string
		before    int64 // grants just before the penalty
		reopening int64 // grants admitted at the deadline
	}{
		{"few earlier grants: a phantom spend makes up the floor", 3, 5},
		{"no earlier grants", 0, 5},
		// Floor, not reset: grants inside the window still count.
		{"earlier grants above the floor still count", 7, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := algo.PaceLimit{Limit: 10, Window: 1000, RefillPermille: 500}
			var s algo.PaceState
			for i := range tt.before {
				s, _ = s.Take(l, i, 1, 0)
			}
			s = s.Penalize(l, 100, 600)
			if got := s.Used(l, 600); got < l.Limit-l.Limit*l.RefillPermille/1000 {
				t.Errorf("Used at the deadline = %d, below the floor", got)
			}
			if _, d := s.Take(l, 599, 1, 0); d.Allowed || d.At != 600 {
				t.Errorf("Take before the deadline = %+v, want denied with a slot at 600", d)
			}
			var granted int64
			for {
				next, d := s.Take(l, 600, 1, 0)
				if !d.Allowed {
					break
				}
				s, granted = next, granted+1
			}
			if granted != tt.reopening {
				t.Errorf("reopened with %d grants, want %d", granted, tt.reopening)
			}
		})
	}
}

func TestPaceRefillBounds(t *testing.T) {
	tests := []struct {
		limit, permille, reopening int64
	}{
		{10, 0, 0},
		{10, 1000, 10},
		{3, 500, 1}, // ⌊3·0.5⌋: at most the fraction, rounded down
		{1, 999, 0},
		{7, 143, 1},
	}
	for _, tt := range tests {
		l := algo.PaceLimit{Limit: tt.limit, Window: 1000, RefillPermille: tt.permille}
		s := algo.PaceState{}.Penalize(l, 0, 10)
		if got := l.Limit - s.Used(l, 10); got != tt.reopening {
			t.Errorf("%+v: reopens with %d, want %d", l, got, tt.reopening)
		}
	}
}

func TestPaceClaimAfterPenaltyIsMoved(t *testing.T) {
	p := &pacer{t: t, l: algo.PaceLimit{Limit: 2, Window: 1000, RefillPermille: 500}}
	p.take(0, 2, 0, algo.PaceDecision{Allowed: true, At: 0, Remaining: 0, ResetAt: 1000})
	p.take(0, 1, 5000, algo.PaceDecision{Allowed: true, At: 1000, Remaining: 0, ResetAt: 2000})
	// An upstream 429 arrives before the slot is due.
	p.s = p.s.Penalize(p.l, 500, 3000)
	p.wantLog(algo.Entry{At: 0, N: 2}, algo.Entry{At: 1000, N: 1})
	if p.s.Hold != 1 || p.s.PenalizedAt != 500 {
		t.Fatalf("hold %d at %d, want 1 held at 500", p.s.Hold, p.s.PenalizedAt)
	}
	// At its slot the caller claims: the penalty moved it past the deadline.
	p.claim(1000, 1000, 1, 5000, algo.PaceDecision{Allowed: true, At: 3000, Remaining: 0, ResetAt: 4000})
	p.wantLog(algo.Entry{At: 3000, N: 1})
	p.claim(2999, 3000, 1, 5000, algo.PaceDecision{At: 3000, Remaining: 0, ResetAt: 4000, RetryAfter: 1})
	p.claim(3000, 3000, 1, 5000, algo.PaceDecision{Allowed: true, At: 3000, Remaining: 0, ResetAt: 4000})
}

// TestPaceMovedSlotsReopenWithTheRefillFraction covers slots reserved
// before a penalty for instants before its deadline: the hold does not
// count them, since Claim moves them, and once moved they take the
// recovering window's allowance like new grants. Four per 10 s, four
// grants at 0, four slots reserved at 10 s, a penalty at 1 s until 15 s:
// at most two of the moved slots lie in the window reopening at 15 s.
func TestPaceMovedSlotsReopenWithTheRefillFraction(t *testing.T) {
	p := &pacer{t: t, l: algo.PaceLimit{Limit: 4, Window: 10_000, RefillPermille: 500}}
	p.take(0, 4, 0, algo.PaceDecision{Allowed: true, At: 0, Remaining: 0, ResetAt: 10_000})
	for range 4 {
		p.take(0, 1, 20_000, algo.PaceDecision{Allowed: true, At: 10_000, Remaining: 0, ResetAt: 20_000})
	}
	p.s = p.s.Penalize(p.l, 1_000, 15_000)
	if p.s.Hold != 2 {
		t.Fatalf("Hold = %d, want 2: the reserved slots count toward no floor", p.s.Hold)
	}
	var slots []int64
	for range 4 {
		next, d := p.s.Claim(p.l, 10_000, 10_000, 1, 60_000)
		if !d.Allowed {
			t.Fatalf("moved Claim = %+v, want a new slot", d)
		}
		p.s, slots = next, append(slots, d.At)
	}
	reopening := 0
	for _, at := range slots {
		if at < 15_000 {
			t.Fatalf("moved slots %v: one before the deadline", slots)
		}
		if at < 25_000 {
			reopening++
		}
	}
	if reopening > 2 {
		t.Errorf("moved slots %v: %d in the window reopening at 15 s, want at most 2", slots, reopening)
	}
}

// TestPaceReleasedSlotKeepsTheFloor covers a reserved slot given up because
// its caller will not wait past the deadline: the window still reopens with
// at most the refill fraction, whether or not the slot was due when the
// penalty arrived.
func TestPaceReleasedSlotKeepsTheFloor(t *testing.T) {
	l := algo.PaceLimit{Limit: 2, Window: 1000, RefillPermille: 500}
	floor := l.Limit - l.Limit*l.RefillPermille/1000
	for _, penalizedAt := range []int64{200, 1000} {
		var s algo.PaceState
		s, _ = s.Take(l, 0, 2, 0)
		s, d := s.Take(l, 0, 2, 5000)
		if !d.Allowed || d.At != 1000 {
			t.Fatalf("reservation = %+v, want a slot at 1000", d)
		}
		s = s.Penalize(l, penalizedAt, 1500)
		s, d = s.Claim(l, 1000, 1000, 2, 0)
		if d.Allowed || d.At < 1500 {
			t.Fatalf("penalty at %d: Claim = %+v, want a refusal naming a slot at or after 1500", penalizedAt, d)
		}
		if got := s.Used(l, 1500); got < floor {
			t.Errorf("penalty at %d: Used at the deadline = %d after the slot was released, below the floor %d", penalizedAt, got, floor)
		}
	}
}

// TestPaceDueSlotMovedKeepsTheFloor covers a slot that was due when the
// penalty arrived but is claimed after it: it counted toward the floor as a
// grant at or before the penalty, so when the claim moves it the hold grows
// to make up for it, and the window reopening at the deadline offers no
// more than the refill fraction, the moved slot included.
func TestPaceDueSlotMovedKeepsTheFloor(t *testing.T) {
	p := &pacer{t: t, l: algo.PaceLimit{Limit: 2, Window: 1000, RefillPermille: 500}}
	p.take(0, 2, 0, algo.PaceDecision{Allowed: true, At: 0, Remaining: 0, ResetAt: 1000})
	p.take(0, 1, 5000, algo.PaceDecision{Allowed: true, At: 1000, Remaining: 0, ResetAt: 2000})
	// At 1.2 s the slot at 1 s is due, unclaimed; it is inside the window
	// recovering at 1.5 s and makes up its floor of 1.
	p.s = p.s.Penalize(p.l, 1200, 1500)
	if p.s.Hold != 0 {
		t.Fatalf("Hold = %d, want 0", p.s.Hold)
	}
	p.claim(1200, 1000, 1, 5000, algo.PaceDecision{Allowed: true, At: 1500, Remaining: 0, ResetAt: 2500})
	if p.s.Hold != 1 {
		t.Errorf("Hold = %d after the due slot moved, want 1", p.s.Hold)
	}
	p.wantLog(algo.Entry{At: 1500, N: 1})
	// The moved slot is the one grant the window reopening at 1.5 s offers.
	p.take(1500, 1, 0, algo.PaceDecision{At: 2500, Remaining: 0, ResetAt: 2500, RetryAfter: 1000})
}

// TestPaceSecondPenaltyKeepsTheFirstHold covers two penalties in a row: a
// hold still inside the window recovering at the new deadline is kept, and
// slots reserved before either count toward neither.
func TestPaceSecondPenaltyKeepsTheFirstHold(t *testing.T) {
	l := algo.PaceLimit{Limit: 4, Window: 1000, RefillPermille: 0}
	var s algo.PaceState
	s, _ = s.Take(l, 0, 1, 0)
	s = s.Penalize(l, 100, 600) // the grant at 0 counts: hold 3
	if s.Hold != 3 {
		t.Fatalf("first hold = %d, want 3", s.Hold)
	}
	s = s.Penalize(l, 200, 1200) // the grant at 0 has left (200, 1200]
	if s.Hold != 4 || s.ForcedUntil != 1200 || s.PenalizedAt != 200 {
		t.Fatalf("second penalty = %+v, want a hold of 4 until 1200, penalized at 200", s)
	}
	if _, d := s.Take(l, 1200, 1, 0); d.Allowed || d.At != 2200 {
		t.Errorf("Take at the deadline with no refill = %+v, want a slot a window later", d)
	}
	// With refill one half, the first hold (2 of 4) still in the new
	// window is kept even where the new floor alone would need less.
	l.RefillPermille = 500
	s = algo.PaceState{}
	s = s.Penalize(l, 0, 1000)
	s, _ = s.Take(l, 1000, 2, 0)
	s = s.Penalize(l, 1100, 1500) // grants at 1 s make up the floor; the hold stays 2
	if s.Hold != 2 {
		t.Fatalf("hold = %d, want the first penalty's 2", s.Hold)
	}
	if got := s.Used(l, 1500); got != 4 {
		t.Errorf("Used at the second deadline = %d, want 4", got)
	}
}

// TestPaceReleasedSlotIsNotJumped covers a slot released by a moved claim:
// the room it leaves before a later reservation is not handed to a caller
// arriving after that reservation, who still queues behind it.
func TestPaceReleasedSlotIsNotJumped(t *testing.T) {
	p := &pacer{t: t, l: algo.PaceLimit{Limit: 4, Window: 1000, RefillPermille: 500}}
	p.take(0, 4, 0, algo.PaceDecision{Allowed: true, At: 0, Remaining: 0, ResetAt: 1000})
	p.take(0, 4, 5000, algo.PaceDecision{Allowed: true, At: 1000, Remaining: 0, ResetAt: 2000})
	p.take(0, 1, 5000, algo.PaceDecision{Allowed: true, At: 2000, Remaining: 0, ResetAt: 3000})
	p.s = p.s.Penalize(p.l, 10, 1500)
	// The first reservation is moved past the deadline, further than its
	// caller will wait: released. The window recovering at 1.5 s holds the
	// penalty's 2 and the slot at 2 s.
	p.claim(1000, 1000, 4, 0, algo.PaceDecision{At: 3000, Remaining: 1, ResetAt: 3000, RetryAfter: 2000})
	p.wantLog(algo.Entry{At: 0, N: 4}, algo.Entry{At: 2000, N: 1})
	// There is room at 1500, but the reservation at 2000 came first.
	p.take(1200, 1, 5000, algo.PaceDecision{Allowed: true, At: 2000, Remaining: 0, ResetAt: 3000})
}

// paceModel is what a property run knows: the reservations callers hold,
// the calls that ran, the penalties, and the floor the last penalty
// promised.
type paceModel struct {
	l         algo.PaceLimit
	held      []paceGrant // reserved slots not yet claimed
	ran       []paceGrant // grants whose callers ran, at the instant they ran
	penalties []pacePenalty
	lastSlot  int64
	floor     int64
}

// paceGrant is a grant of n at at, made by operation op.
type paceGrant struct {
	at, n int64
	op    int
}

// pacePenalty is a penalty, arrived at at by operation op, that set the
// deadline.
type pacePenalty struct {
	deadline, at int64
	op           int
}

// checkReopening asserts that every window that reopened after a penalty
// offered at most the refill fraction: the calls granted after the penalty
// that ran at its deadline number no more than the limit less the larger of
// the floor and the calls that ran before it inside the window recovering
// there. A penalty overtaken by another before its deadline never reopened.
func (m *paceModel) checkReopening(t *rapid.T) {
	for i, p := range m.penalties {
		if i+1 < len(m.penalties) && m.penalties[i+1].at < p.deadline {
			continue
		}
		var before, reopening int64
		for _, r := range m.ran {
			if r.at > p.deadline-m.l.Window && r.at <= p.at {
				before += r.n
			}
			if r.at == p.deadline && r.op > p.op {
				reopening += r.n
			}
		}
		if allowed := m.l.Limit - max(before, m.floor); reopening > allowed {
			t.Fatalf("the window reopening at %d after the penalty at %d ran %d new calls, more than %d (%d ran before it): %+v", p.deadline, p.at, reopening, allowed, before, m.ran)
		}
	}
}

// checkLog asserts that the log is sorted, holds positive entries, and that
// no rolling window of the limit's length holds more than the limit.
func (m *paceModel) checkLog(t *rapid.T, s algo.PaceState) {
	for j, e := range s.Log {
		if e.N < 1 || (j > 0 && e.At <= s.Log[j-1].At) {
			t.Fatalf("log %v is not sorted with positive entries", s.Log)
		}
		var n int64
		for i := j; i >= 0 && s.Log[i].At > e.At-m.l.Window; i-- {
			n += s.Log[i].N
		}
		if n > m.l.Limit {
			t.Fatalf("window (%d, %d] holds %d > %d: %v", e.At-m.l.Window, e.At, n, m.l.Limit, s.Log)
		}
	}
}

// TestPaceProperties drives a pacing state with random takes, penalties and
// claims at non-decreasing instants.
func TestPaceProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		l := algo.PaceLimit{
			Limit:          rapid.Int64Range(1, 8).Draw(t, "limit"),
			Window:         rapid.Int64Range(1, 1000).Draw(t, "window"),
			RefillPermille: rapid.SampledFrom([]int64{0, 1, 250, 500, 999, 1000}).Draw(t, "refill"),
		}
		m := &paceModel{l: l}
		var s algo.PaceState
		now := rapid.Int64Range(0, 5000).Draw(t, "start")
		for op := range rapid.IntRange(1, 50).Draw(t, "ops") {
			now += rapid.Int64Range(0, l.Window).Draw(t, "gap")
			cost := rapid.Int64Range(1, l.Limit).Draw(t, "cost")
			maxWait := rapid.SampledFrom([]int64{0, l.Window / 2, 3 * l.Window, 100 * l.Window}).Draw(t, "maxWait")
			before := clonePace(s)
			switch kind := rapid.IntRange(0, 2).Draw(t, "op"); {
			case kind == 0:
				var d algo.PaceDecision
				s, d = s.Take(l, now, cost, maxWait)
				m.checkTake(t, before, now, cost, maxWait, d)
				if !d.Allowed {
					if !equalPace(s, before) {
						t.Fatalf("denied Take changed the state")
					}
				} else if d.At > now {
					m.held = append(m.held, paceGrant{at: d.At, n: cost, op: op})
				} else {
					m.ran = append(m.ran, paceGrant{at: now, n: cost, op: op})
				}
			case kind == 1:
				until := now + rapid.Int64Range(0, 3*l.Window).Draw(t, "delay")
				s = s.Penalize(l, now, until)
				if want := max(before.ForcedUntil, until); until > now && s.ForcedUntil != want {
					t.Fatalf("ForcedUntil = %d, want max(%d, %d)", s.ForcedUntil, before.ForcedUntil, until)
				}
				if s.ForcedUntil != before.ForcedUntil {
					m.floor = l.Limit - l.Limit*l.RefillPermille/1000
					m.penalties = append(m.penalties, pacePenalty{deadline: s.ForcedUntil, at: now, op: op})
				}
			case len(m.held) > 0:
				i := rapid.IntRange(0, len(m.held)-1).Draw(t, "held")
				r := m.held[i]
				var d algo.PaceDecision
				s, d = s.Claim(l, now, r.at, r.n, maxWait)
				switch {
				case now < r.at:
					if d.Allowed || d.RetryAfter != r.at-now || !equalPace(s, before) {
						t.Fatalf("early Claim(%d, %+v) = %+v", now, r, d)
					}
				case r.at >= before.ForcedUntil:
					if !d.Allowed || d.At != r.at || !equalPace(s, before) {
						t.Fatalf("on-time Claim(%d, %+v) = %+v", now, r, d)
					}
					m.held = slices.Delete(m.held, i, i+1)
					m.ran = append(m.ran, r)
				default: // moved by a penalty
					m.held = slices.Delete(m.held, i, i+1)
					if d.Allowed {
						if d.At < before.ForcedUntil || d.At < now {
							t.Fatalf("moved Claim(%d, %+v) = %+v, before the deadline %d", now, r, d, before.ForcedUntil)
						}
						if d.At > now {
							m.held = append(m.held, paceGrant{at: d.At, n: r.n, op: op})
						} else {
							m.ran = append(m.ran, paceGrant{at: now, n: r.n, op: op})
						}
						m.lastSlot = max(m.lastSlot, d.At)
					}
				}
			}
			m.checkLog(t, s)
			if now < s.ForcedUntil {
				if used := s.Used(l, s.ForcedUntil); used < m.floor {
					t.Fatalf("Used at the deadline %d = %d, below the floor %d", s.ForcedUntil, used, m.floor)
				}
				// The floor rests on the hold and on grants at or before
				// the penalty, never on slots Claim will move.
				held := s.Hold
				for _, e := range s.Log {
					if e.At > s.ForcedUntil-l.Window && e.At <= s.PenalizedAt {
						held += e.N
					}
				}
				if held < m.floor {
					t.Fatalf("the hold %d and the grants up to the penalty at %d make %d, below the floor %d: %+v", s.Hold, s.PenalizedAt, held, m.floor, s)
				}
			}
			if r := s.Used(l, now); r < 0 {
				t.Fatalf("negative use %d", r)
			}
		}
		m.checkReopening(t)
	})
}

// checkTake asserts the rules of one Take (grants are never before now, the
// penalty deadline or an earlier slot, and wait no longer than maxWait) and
// records a granted slot as the latest.
func (m *paceModel) checkTake(t *rapid.T, before algo.PaceState, now, cost, maxWait int64, d algo.PaceDecision) {
	if d.Remaining < 0 || d.Remaining > m.l.Limit || d.RetryAfter < 0 {
		t.Fatalf("Take = %+v: remaining or retry-after out of range", d)
	}
	if d.At < now || d.At < before.ForcedUntil || d.At < m.lastSlot {
		t.Fatalf("Take at %d = %+v: slot before now, the deadline %d or the last slot %d", now, d, before.ForcedUntil, m.lastSlot)
	}
	if d.Allowed != (d.At-now <= maxWait) {
		t.Fatalf("Take at %d with maxWait %d = %+v", now, maxWait, d)
	}
	if d.Allowed {
		m.lastSlot = d.At
		if d.RetryAfter != 0 {
			t.Fatalf("allowed Take with retry-after %d", d.RetryAfter)
		}
	} else if d.RetryAfter != d.At-now {
		t.Fatalf("denied Take = %+v: retry-after is not At−now", d)
	}
}
