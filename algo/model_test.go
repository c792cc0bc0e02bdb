package algo_test

import (
	"math"
	"math/big"
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/sluicehq/sluice/algo"
)

// model is a brute-force restatement of one window, kept apart from the
// reference in window_prop_test.go: it keeps the literal list of grants and
// evaluates every rule in exact rational arithmetic (math/big), so that no
// float rounding or 64-bit product it shares with the code can hide an error.
// It also answers ResetAt and RetryAfter by itself: RetryAfter by searching
// for the first instant its own rule admits the hit.
type model struct {
	l      algo.Limit
	grants []hit // admitted hits, instants non-decreasing
}

func bigInt(v int64) *big.Int { return big.NewInt(v) }

// used returns the cost granted at instants in [from, to].
func (m *model) used(from, to int64) int64 {
	var n int64
	for _, g := range m.grants {
		if g.at >= from && g.at <= to {
			n += g.cost
		}
	}
	return n
}

// floorDiv is ⌊a/b⌋ for b > 0, for instants before the epoch too.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// bucket returns the start of the bucket holding now (epoch-aligned; the
// code treats every instant before the epoch as the epoch's bucket).
func (m *model) bucket(now int64) int64 {
	if now < 0 {
		return 0
	}
	return floorDiv(now, m.l.Window) * m.l.Window
}

// tat returns the exact theoretical arrival time after every grant.
func (m *model) tat() *big.Rat {
	tat := new(big.Rat)
	for _, g := range m.grants {
		at := new(big.Rat).SetInt64(g.at)
		if tat.Cmp(at) < 0 {
			tat.Set(at)
		}
		tat.Add(tat, big.NewRat(g.cost, 1).Mul(big.NewRat(g.cost, 1), big.NewRat(m.l.Window, m.l.Limit)))
	}
	return tat
}

// slidingWeight returns prev·(W−e) + cur·W: the estimate times W, exactly.
func (m *model) slidingWeight(now, extra int64) *big.Int {
	w := m.l.Window
	start := m.bucket(now)
	prev, cur := m.used(start-w, start-1), m.used(start, now)+extra
	x := new(big.Int).Mul(bigInt(prev), bigInt(w-(now-start)))
	return x.Add(x, new(big.Int).Mul(bigInt(cur), bigInt(w)))
}

// admits reports whether the window admits cost at now, charging nothing.
func (m *model) admits(now, cost int64) bool {
	l, w := m.l.Limit, m.l.Window
	switch m.l.Kind {
	case algo.KindFixed:
		start := m.bucket(now)
		return m.used(start, now)+cost <= l
	case algo.KindSliding:
		return m.slidingWeight(now, cost).Cmp(new(big.Int).Mul(bigInt(l), bigInt(w))) <= 0
	case algo.KindLog:
		return m.used(now-w+1, now)+cost <= l
	case algo.KindGCRA:
		t := new(big.Rat).SetInt64(now)
		tat := m.tat()
		if tat.Cmp(t) < 0 {
			tat.Set(t)
		}
		tat.Add(tat, new(big.Rat).Mul(big.NewRat(cost, 1), big.NewRat(w, l)))
		return tat.Sub(tat, t).Cmp(big.NewRat(w, 1)) <= 0
	}
	panic("unknown kind")
}

// remaining returns the largest cost admitted at now (after the grants),
// and at least 0.
func (m *model) remaining(now int64) int64 {
	l, w := m.l.Limit, m.l.Window
	switch m.l.Kind {
	case algo.KindFixed:
		return max(0, l-m.used(m.bucket(now), now))
	case algo.KindSliding:
		// ⌊(L·W − weight)/W⌋
		x := new(big.Int).Sub(new(big.Int).Mul(bigInt(l), bigInt(w)), m.slidingWeight(now, 0))
		if x.Sign() < 0 {
			return 0
		}
		return x.Div(x, bigInt(w)).Int64()
	case algo.KindLog:
		return max(0, l-m.used(now-w+1, now))
	case algo.KindGCRA:
		t := new(big.Rat).SetInt64(now)
		tat := m.tat()
		if tat.Cmp(t) < 0 {
			tat.Set(t)
		}
		// ⌊(W − (TAT−now))·L/W⌋
		gap := new(big.Rat).Sub(big.NewRat(w, 1), tat.Sub(tat, t))
		if gap.Sign() <= 0 {
			return 0
		}
		gap.Mul(gap, big.NewRat(l, w))
		return new(big.Int).Quo(gap.Num(), gap.Denom()).Int64()
	}
	panic("unknown kind")
}

// resetAt returns the first instant from now on at which the window holds
// nothing, assuming no further hits.
func (m *model) resetAt(now int64) int64 {
	w := m.l.Window
	switch m.l.Kind {
	case algo.KindFixed:
		if m.used(m.bucket(now), now) == 0 {
			return now
		}
		return m.bucket(now) + w
	case algo.KindSliding:
		start := m.bucket(now)
		switch {
		case m.used(start, now) > 0:
			return start + 2*w
		case m.used(start-w, start-1) > 0:
			return start + w
		}
		return now
	case algo.KindLog:
		if m.used(now-w+1, now) == 0 {
			return now
		}
		return m.grants[len(m.grants)-1].at + w
	case algo.KindGCRA:
		tat := m.tat()
		c := new(big.Int).Add(new(big.Int).Quo(tat.Num(), tat.Denom()), big.NewInt(0))
		if new(big.Rat).SetInt(c).Cmp(tat) < 0 {
			c.Add(c, big.NewInt(1))
		}
		return max(now, c.Int64())
	}
	panic("unknown kind")
}

// retryAt returns the first instant from now on at which the window admits
// cost, by bisection: with no further hits, every kind's admission is
// monotone in time (the sliding estimate never rises across a bucket
// boundary), and each admits within two windows.
func (m *model) retryAt(now, cost int64) int64 {
	if m.admits(now, cost) {
		return now
	}
	lo, hi := now, now+2*m.l.Window // !admits(lo), admits(hi)
	if !m.admits(hi, cost) {
		panic("model: not admitted within two windows")
	}
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if m.admits(mid, cost) {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi
}

// hit evaluates and, when admitted, records a hit at now.
func (m *model) hit(now, cost int64) algo.Decision {
	if !m.admits(now, cost) {
		return algo.Decision{Remaining: m.remaining(now), ResetAt: m.resetAt(now), RetryAfter: m.retryAt(now, cost) - now}
	}
	m.grants = append(m.grants, hit{now, cost})
	return algo.Decision{Allowed: true, Remaining: m.remaining(now), ResetAt: m.resetAt(now)}
}

// slidingRounds reports whether l is a sliding window whose estimate float64
// can round: the code evaluates prev·(W−e)/W + cur in float64 (as the Lua
// mirror does), exact enough to decide like the rational formula only while
// Limit·W stays well inside 2^53. Beyond that a weighted unit worth less than
// half a float64 ulp of the limit can be rounded away.
func slidingRounds(l algo.Limit) bool {
	return l.Kind == algo.KindSliding && l.Limit > (1<<50)/l.Window
}

// checkSlidingNear asserts that where the code decides a rounding sliding
// window otherwise than the exact formula, the estimate lies within 2^-48 of
// the limit, and that ResetAt, which needs no rounding, agrees exactly.
func checkSlidingNear(t *rapid.T, m *model, s algo.WindowState, h hit, d algo.Decision) {
	t.Helper()
	l := m.l
	if ok := m.admits(h.at, h.cost); ok != d.Allowed {
		lw := new(big.Int).Mul(bigInt(l.Limit), bigInt(l.Window))
		diff := new(big.Int).Sub(m.slidingWeight(h.at, h.cost), lw)
		if diff.Abs(diff).Lsh(diff, 48).Cmp(lw) > 0 {
			t.Fatalf("%+v, state %+v, cost %d at %d: allowed %v, exact formula %v far from the limit", l, s, h.cost, h.at, d.Allowed, ok)
		}
	}
	if d.Allowed {
		return
	}
	if want := m.resetAt(h.at); d.ResetAt != want {
		t.Fatalf("%+v, state %+v, cost %d at %d: reset %d, model %d", l, s, h.cost, h.at, d.ResetAt, want)
	}
	if r := m.remaining(h.at); d.Remaining < r-1 || d.Remaining > r+1 {
		t.Fatalf("%+v, state %+v, cost %d at %d: remaining %d, model %d", l, s, h.cost, h.at, d.Remaining, r)
	}
}

// drawModelLimit draws a limit across the whole accepted range, leaning to
// the edges: limits up to 2^40, windows from 1 ms to 120 days.
func drawModelLimit(t *rapid.T, kind algo.Kind) algo.Limit {
	maxLimit := algo.MaxLimit
	if kind == algo.KindLog {
		maxLimit = algo.MaxLogLimit
	}
	limit := rapid.OneOf(
		rapid.Int64Range(1, 12),
		rapid.Int64Range(1, maxLimit),
		rapid.SampledFrom([]int64{1, 2, 3, 999_983, maxLimit - 1, maxLimit}),
	).Draw(t, "limit")
	window := rapid.OneOf(
		rapid.Int64Range(1, 40),
		rapid.Int64Range(1, algo.MaxWindow),
		rapid.SampledFrom([]int64{1, 1000, 86_400_000, algo.MaxWindow - 1, algo.MaxWindow}),
	).Draw(t, "window")
	return algo.Limit{Kind: kind, Limit: min(limit, maxLimit), Window: window}
}

// drawModelHits draws arrivals at non-decreasing instants: equal instants,
// gaps of a millisecond, of a fraction of the window and of several windows,
// and costs of 1, the whole limit, or anything between.
func drawModelHits(t *rapid.T, l algo.Limit, start int64, n int) []hit {
	gap := rapid.OneOf(
		rapid.Just(int64(0)),
		rapid.Int64Range(0, 2),
		rapid.Int64Range(0, l.Window/3+1),
		rapid.Int64Range(l.Window-2, l.Window+2),
		rapid.Int64Range(0, 3*l.Window),
	)
	cost := rapid.OneOf(
		rapid.Just(int64(1)),
		rapid.Just(l.Limit),
		rapid.Int64Range(1, l.Limit),
		rapid.Int64Range(max(1, l.Limit/2), l.Limit),
	)
	hits := make([]hit, rapid.IntRange(1, n).Draw(t, "hits"))
	at := start
	for i := range hits {
		at += max(0, gap.Draw(t, "gap"))
		hits[i] = hit{at: at, cost: cost.Draw(t, "cost")}
	}
	return hits
}

// drawStart draws the first instant: near the epoch, today, near 2^52 (the
// largest instant the Redis store computes exactly).
func drawStart(t *rapid.T) int64 {
	return rapid.OneOf(
		rapid.Int64Range(0, 10_000),
		rapid.Int64Range(1_700_000_000_000, 1_800_000_000_000),
		rapid.Int64Range(1<<52-4*algo.MaxWindow, 1<<52),
	).Draw(t, "start")
}

// TestWindowMatchesExactModel compares every field of every decision with
// the exact model, for every kind, over the whole accepted range of limits,
// windows and costs, and instants near the epoch, today and 2^52.
// RetryAfter is the model's own first admitting instant, so it is checked
// independently of the code's; so is ResetAt.
func TestWindowMatchesExactModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		kind := rapid.SampledFrom(allKinds).Draw(t, "kind")
		l := drawModelLimit(t, kind)
		start := drawStart(t)
		m := &model{l: l}
		var s algo.WindowState
		for _, h := range drawModelHits(t, l, start, 24) {
			next, d := algo.Hit(l, s, h.at, h.cost)
			if slidingRounds(l) {
				checkSlidingNear(t, m, s, h, d)
				if d.Allowed {
					m.grants = append(m.grants, h)
				}
				s = next
				continue
			}
			want := m.hit(h.at, h.cost)
			if d != want {
				t.Fatalf("%+v, state %+v, cost %d at %d: got %+v, model %+v", l, s, h.cost, h.at, d, want)
			}
			if !d.Allowed && !equalState(next, s) {
				t.Fatalf("denial changed the state: %+v → %+v", s, next)
			}
			if n := int64(len(next.Log)); n > l.Limit {
				t.Fatalf("log holds %d entries > limit %d", n, l.Limit)
			}
			if p := algo.Peek(l, next, h.at); p.Remaining != m.remaining(h.at) || p.ResetAt != m.resetAt(h.at) {
				t.Fatalf("%+v, state %+v at %d: peek %+v, model remaining %d reset %d",
					l, next, h.at, p, m.remaining(h.at), m.resetAt(h.at))
			}
			dec, err := algo.DecodeWindow(kind, next.AppendBinary(kind, nil))
			if err != nil || !equalState(dec, next) {
				t.Fatalf("%+v: state %+v decodes as %+v, %v", l, next, dec, err)
			}
			s = next
		}
	})
}

// TestWindowClockStepsBackModel lets the clock step back by up to several
// windows between hits, reaching before the epoch. A state remembers the
// latest instant at which it was charged (a denial leaves no trace), so the
// model evaluates every hit at that instant when the clock reads earlier,
// and records its grants there. The code must admit nothing the model
// refuses, leave no more remaining, never report a negative remaining or
// retry-after, and a denial's RetryAfter counted from the model's instant
// must be one at which the hit is admitted.
func TestWindowClockStepsBackModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		kind := rapid.SampledFrom(allKinds).Draw(t, "kind")
		l := drawModelLimit(t, kind)
		start := drawStart(t)
		m := &model{l: l}
		var s algo.WindowState
		charged := int64(math.MinInt64)
		for i, h := range drawModelHits(t, l, start, 16) {
			at := h.at
			if i > 0 && rapid.Bool().Draw(t, "stepBack") {
				at = max(charged, start) - rapid.Int64Range(0, 3*l.Window).Draw(t, "back")
			}
			eff := max(at, charged)
			next, d := algo.Hit(l, s, at, h.cost)
			if d.Remaining < 0 || d.RetryAfter < 0 || d.ResetAt < at {
				t.Fatalf("%+v, state %+v, cost %d at %d: %+v", l, s, h.cost, at, d)
			}
			if slidingRounds(l) {
				s = next
				continue
			}
			// An earlier instant may be stricter (a sliding or GCRA window
			// weighs its charges more then), never more lenient.
			if d.Allowed && !m.admits(eff, h.cost) {
				t.Fatalf("%+v, state %+v, cost %d at %d: admitted, but the model refuses it at %d",
					l, s, h.cost, at, eff)
			}
			if !d.Allowed {
				if _, again := algo.Hit(l, s, eff+d.RetryAfter, h.cost); !again.Allowed {
					t.Fatalf("%+v, state %+v, cost %d at %d: retry-after %d, denied at %d too",
						l, s, h.cost, at, d.RetryAfter, eff+d.RetryAfter)
				}
				if d.Remaining > m.remaining(eff) {
					t.Fatalf("%+v, cost %d at %d: remaining %d, model %d at %d",
						l, h.cost, at, d.Remaining, m.remaining(eff), eff)
				}
			} else {
				m.grants = append(m.grants, hit{eff, h.cost})
				charged = eff
				if d.Remaining > m.remaining(eff) {
					t.Fatalf("%+v, cost %d at %d: remaining %d, model %d at %d",
						l, h.cost, at, d.Remaining, m.remaining(eff), eff)
				}
			}
			s = next
		}
	})
}

// TestLogHoldsTheLiteralGrants checks a log window's state against the list
// of grants: the live grants, merged by instant, oldest first.
func TestLogHoldsTheLiteralGrants(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		l := drawModelLimit(t, algo.KindLog)
		m := &model{l: l}
		var s algo.WindowState
		for _, h := range drawModelHits(t, l, drawStart(t), 40) {
			s, _ = algo.Hit(l, s, h.at, h.cost)
			m.hit(h.at, h.cost)
			var want []algo.Entry
			for _, g := range m.grants {
				if g.at <= h.at-l.Window {
					continue
				}
				if n := len(want); n > 0 && want[n-1].At == g.at {
					want[n-1].N += g.cost
				} else {
					want = append(want, algo.Entry{At: g.at, N: g.cost})
				}
			}
			// A denial keeps entries that have since left the window.
			var live []algo.Entry
			for _, e := range s.Log {
				if e.At > h.at-l.Window {
					live = append(live, e)
				}
			}
			if !slices.Equal(live, want) {
				t.Fatalf("%+v at %d: live log %+v, grants %+v", l, h.at, live, want)
			}
		}
	})
}

// TestStepBackAfterDenialChargesTheEarlierInstant pins what the package
// documents of a denial followed by a clock step: the denial leaves no trace,
// and the hit admitted behind it is charged at the instant the clock reads.
func TestStepBackAfterDenialChargesTheEarlierInstant(t *testing.T) {
	l := algo.Limit{Kind: algo.KindLog, Limit: 2, Window: 1000}
	s, _ := algo.Hit(l, algo.WindowState{}, 0, 1)
	if next, d := algo.Hit(l, s, 900, 2); d.Allowed || !equalState(next, s) {
		t.Fatalf("cost 2 at 900: %+v, state %+v", d, next)
	}
	s, d := algo.Hit(l, s, 100, 1)
	if !d.Allowed || !slices.Equal(s.Log, []algo.Entry{{At: 0, N: 1}, {At: 100, N: 1}}) {
		t.Fatalf("cost 1 at 100 after the denial at 900: %+v, log %+v", d, s.Log)
	}
}

// TestJointHitRetryIsTheLatest drives up to four windows of any kinds with
// the same hits, all or nothing as the engine runs them: a hit is charged
// to every window only when every window admits it. The engine reports the
// largest RetryAfter of the windows; with each kind's admission monotone in
// time, that must be the first instant at which every model admits the
// hit: all admit then, and one millisecond earlier some window does not.
func TestJointHitRetryIsTheLatest(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, 4).Draw(t, "windows")
		models := make([]*model, n)
		states := make([]algo.WindowState, n)
		limit := int64(math.MaxInt64)
		for i := range models {
			l := drawModelLimit(t, rapid.SampledFrom(allKinds).Draw(t, "kind"))
			if slidingRounds(l) {
				l.Window = min(l.Window, (1<<50)/l.Limit)
			}
			models[i] = &model{l: l}
			limit = min(limit, l.Limit)
		}
		at := drawStart(t)
		for range rapid.IntRange(1, 16).Draw(t, "hits") {
			at += rapid.Int64Range(0, 2*models[0].l.Window).Draw(t, "gap")
			cost := rapid.Int64Range(1, limit).Draw(t, "cost")
			allowed, retry := true, int64(0)
			next := make([]algo.WindowState, n)
			for i, m := range models {
				var d algo.Decision
				next[i], d = algo.Hit(m.l, states[i], at, cost)
				allowed = allowed && d.Allowed
				retry = max(retry, d.RetryAfter)
			}
			all := func(when int64) bool {
				for _, m := range models {
					if !m.admits(when, cost) {
						return false
					}
				}
				return true
			}
			if allowed != all(at) {
				t.Fatalf("cost %d at %d: allowed %v, models %v", cost, at, allowed, !allowed)
			}
			if !allowed && (!all(at+retry) || all(at+retry-1)) {
				t.Fatalf("cost %d at %d: retry-after %d is not the first instant every window admits", cost, at, retry)
			}
			if allowed {
				copy(states, next)
				for _, m := range models {
					m.grants = append(m.grants, hit{at, cost})
				}
			}
		}
	})
}
