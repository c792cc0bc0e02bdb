package algo_test

import (
	"testing"

	"pgregory.net/rapid"

	"github.com/sluicehq/sluice/algo"
)

var allKinds = []algo.Kind{algo.KindFixed, algo.KindSliding, algo.KindLog, algo.KindGCRA}

// hit is one arrival: a hit of cost at instant at.
type hit struct{ at, cost int64 }

// maxRetry is the documented bound on RetryAfter. A sliding window's is two
// windows: a bucket holding the whole limit weighs on every instant of the
// next bucket (by at least 1/W of itself), so a hit of the whole limit waits
// until that bucket has ended too.
func maxRetry(l algo.Limit) int64 {
	if l.Kind == algo.KindSliding {
		return 2 * l.Window
	}
	return l.Window
}

// fatalf is what the checks below need of *testing.T and *rapid.T.
type fatalf interface {
	Helper()
	Fatalf(format string, args ...any)
}

// checkDecision asserts the rules every decision obeys, whatever the clock.
func checkDecision(t fatalf, l algo.Limit, now int64, d algo.Decision) {
	t.Helper()
	if d.Remaining < 0 || d.Remaining > l.Limit {
		t.Fatalf("%+v at %d: remaining %d outside 0…%d", l, now, d.Remaining, l.Limit)
	}
	if d.RetryAfter < 0 || d.RetryAfter > maxRetry(l) {
		t.Fatalf("%+v at %d: retry-after %d outside 0…%d", l, now, d.RetryAfter, maxRetry(l))
	}
	if (d.RetryAfter == 0) != d.Allowed {
		t.Fatalf("%+v at %d: allowed %v with retry-after %d", l, now, d.Allowed, d.RetryAfter)
	}
}

// checkRetryExact asserts that a denial's RetryAfter is the earliest instant
// at which the same hit on the same state is admitted.
func checkRetryExact(t fatalf, l algo.Limit, s algo.WindowState, now, cost int64, d algo.Decision) {
	t.Helper()
	if d.Allowed {
		return
	}
	if _, at := algo.Hit(l, s, now+d.RetryAfter, cost); !at.Allowed {
		t.Fatalf("%+v, state %+v: denied cost %d at %d with retry-after %d, but denied again then (%+v)",
			l, s, cost, now, d.RetryAfter, at)
	}
	if _, before := algo.Hit(l, s, now+d.RetryAfter-1, cost); before.Allowed {
		t.Fatalf("%+v, state %+v: denied cost %d at %d with retry-after %d, but admitted 1 ms earlier",
			l, s, cost, now, d.RetryAfter)
	}
}

// checkTTL asserts that the state written at now may be dropped when its
// TTL ends: a full-limit hit is admitted on it then, as on an empty window.
// With tight, it also asserts that the TTL is no longer than needed: the
// same hit is denied one millisecond before. (A sliding window with a huge
// limit and window can round its last weighted unit away in float64 before
// the bucket ends; keeping such a state a little longer is harmless.)
func checkTTL(t fatalf, l algo.Limit, s algo.WindowState, now int64, tight bool) {
	t.Helper()
	ttl := l.TTL(s, now)
	if ttl < 1 || ttl > 2*l.Window {
		t.Fatalf("%+v, state %+v: TTL %d at %d outside 1…2W", l, s, ttl, now)
	}
	if _, d := algo.Hit(l, s, now+ttl-1, l.Limit); tight && d.Allowed {
		t.Fatalf("%+v, state %+v: TTL %d at %d, but the state is empty a millisecond earlier", l, s, ttl, now)
	}
	if _, d := algo.Hit(l, s, now+ttl, l.Limit); !d.Allowed {
		t.Fatalf("%+v, state %+v: TTL %d at %d, but the state still counts then", l, s, ttl, now)
	}
}

// drawLimit draws a valid limit of the given kind, no larger than maxLimit
// and maxWindow.
func drawLimit(t *rapid.T, kind algo.Kind, maxLimit, maxWindow int64) algo.Limit {
	if kind == algo.KindLog {
		maxLimit = min(maxLimit, algo.MaxLogLimit)
	}
	return algo.Limit{
		Kind:   kind,
		Limit:  rapid.Int64Range(1, maxLimit).Draw(t, "limit"),
		Window: rapid.Int64Range(1, maxWindow).Draw(t, "window"),
	}
}

// drawHits draws arrivals at non-decreasing instants from start, with gaps
// that often stay inside a window and sometimes skip past several.
func drawHits(t *rapid.T, l algo.Limit, start int64, n int) []hit {
	gap := rapid.OneOf(
		rapid.Just(int64(0)),
		rapid.Int64Range(0, l.Window/4+1),
		rapid.Int64Range(0, 3*l.Window),
	)
	cost := rapid.OneOf(
		rapid.Just(int64(1)),
		rapid.Just(l.Limit),
		rapid.Int64Range(1, l.Limit),
	)
	hits := make([]hit, rapid.IntRange(1, n).Draw(t, "hits"))
	at := start
	for i := range hits {
		at += gap.Draw(t, "gap")
		hits[i] = hit{at: at, cost: cost.Draw(t, "cost")}
	}
	return hits
}

// reference recomputes window decisions from the full history of admitted
// hits, with exact integer arithmetic and no stored state.
type reference struct {
	l        algo.Limit
	admitted []hit
}

// sum returns the cost admitted at instants in [from, to].
func (r *reference) sum(from, to int64) int64 {
	var n int64
	for _, h := range r.admitted {
		if h.at >= from && h.at <= to {
			n += h.cost
		}
	}
	return n
}

// decide returns whether the window admits cost at now, and the remaining
// allowance after that decision. Instants must not decrease.
func (r *reference) decide(now, cost int64) (bool, int64) {
	l, w := r.l.Limit, r.l.Window
	charge := func(ok bool) int64 {
		if ok {
			return cost
		}
		return 0
	}
	switch r.l.Kind {
	case algo.KindFixed:
		start := now - now%w
		used := r.sum(start, now)
		ok := used+cost <= l
		return ok, l - used - charge(ok)
	case algo.KindSliding:
		// prev·(W−e)/W + cur + cost ≤ limit, multiplied through by W.
		start := now - now%w
		prev, cur := r.sum(start-w, start-1), r.sum(start, now)
		weighted := prev * (w - (now - start))
		ok := weighted+(cur+cost)*w <= l*w
		rem := l*w - weighted - (cur+charge(ok))*w
		if rem < 0 {
			return ok, 0
		}
		return ok, rem / w
	case algo.KindLog:
		used := r.sum(now-w+1, now)
		ok := used+cost <= l
		return ok, l - used - charge(ok)
	case algo.KindGCRA:
		// Instants in units of 1/limit ms: the interval W/limit is W.
		var tat int64
		for _, h := range r.admitted {
			tat = max(tat, h.at*l) + h.cost*w
		}
		t := now * l
		tat = max(tat, t)
		ok := tat+cost*w-t <= w*l
		if ok {
			tat += cost * w
		}
		return ok, max(0, w*l-(tat-t)) / w
	}
	panic("unknown kind")
}

func (r *reference) admit(now, cost int64) { r.admitted = append(r.admitted, hit{now, cost}) }

// checkRolling asserts each kind's bound on what it admits over time.
func (r *reference) checkRolling(t fatalf) {
	l, w := r.l.Limit, r.l.Window
	for j, hj := range r.admitted {
		var n int64
		for i := j; i >= 0; i-- {
			hi := r.admitted[i]
			n += hi.cost
			switch r.l.Kind {
			case algo.KindFixed:
				if hi.at/w == hj.at/w && n > l {
					t.Fatalf("bucket of %d admitted %d > %d", hj.at, n, l)
				}
			case algo.KindLog:
				if hi.at > hj.at-w && n > l {
					t.Fatalf("rolling window (%d, %d] admitted %d > %d", hj.at-w, hj.at, n, l)
				}
			case algo.KindGCRA:
				// GCRA is a token bucket of depth limit refilled at
				// limit/W: the conformance bound, not a rolling limit.
				if bound := l + (hj.at-hi.at)*l/w; n > bound {
					t.Fatalf("[%d, %d] admitted %d > %d", hi.at, hj.at, n, bound)
				}
			}
		}
	}
}

// TestWindowMatchesReference drives every kind with arrivals at
// non-decreasing instants and compares each decision with the reference,
// checks the shared decision rules and the exactness of RetryAfter, and
// finally the bound on what was admitted.
func TestWindowMatchesReference(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		kind := rapid.SampledFrom(allKinds).Draw(t, "kind")
		l := drawLimit(t, kind, rapid.SampledFrom([]int64{3, 20, 1000}).Draw(t, "maxLimit"), 2000)
		hits := drawHits(t, l, rapid.Int64Range(0, 10_000).Draw(t, "start"), 40)
		ref := &reference{l: l}
		var s algo.WindowState
		for _, h := range hits {
			next, d := algo.Hit(l, s, h.at, h.cost)
			checkDecision(t, l, h.at, d)
			checkRetryExact(t, l, s, h.at, h.cost, d)
			ok, rem := ref.decide(h.at, h.cost)
			if d.Allowed != ok || d.Remaining != rem {
				t.Fatalf("%+v, state %+v, cost %d at %d: got allowed %v remaining %d, reference %v %d",
					l, s, h.cost, h.at, d.Allowed, d.Remaining, ok, rem)
			}
			if d.ResetAt < h.at {
				t.Fatalf("reset %d before now %d", d.ResetAt, h.at)
			}
			if !d.Allowed && !equalState(next, s) {
				t.Fatalf("denial changed the state: %+v → %+v", s, next)
			}
			if n := int64(len(next.Log)); n > l.Limit {
				t.Fatalf("log holds %d entries > limit %d", n, l.Limit)
			}
			if ok {
				ref.admit(h.at, h.cost)
				checkTTL(t, l, next, h.at, true)
			}
			s = next
		}
		ref.checkRolling(t)
	})
}

// TestWindowExtremes checks the decision rules and exact retry-after at the
// edges of the bounds: limits up to MaxLimit, windows up to MaxWindow and
// instants far from the epoch, where float and 64-bit arithmetic would
// first go wrong.
func TestWindowExtremes(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		kind := rapid.SampledFrom(allKinds).Draw(t, "kind")
		l := algo.Limit{
			Kind:   kind,
			Limit:  rapid.SampledFrom([]int64{1, 2, 3, 7, 1000, 999_983, algo.MaxLogLimit, algo.MaxLimit - 1, algo.MaxLimit}).Draw(t, "limit"),
			Window: rapid.SampledFrom([]int64{1, 3, 1000, 86_400_000, algo.MaxWindow - 1, algo.MaxWindow}).Draw(t, "window"),
		}
		if kind == algo.KindLog {
			l.Limit = min(l.Limit, algo.MaxLogLimit)
		}
		if err := l.Validate(); err != nil {
			t.Fatalf("Validate(%+v) = %v", l, err)
		}
		hits := drawHits(t, l, rapid.Int64Range(0, 1<<42).Draw(t, "start"), 12)
		var s algo.WindowState
		for _, h := range hits {
			next, d := algo.Hit(l, s, h.at, h.cost)
			checkDecision(t, l, h.at, d)
			checkRetryExact(t, l, s, h.at, h.cost, d)
			if d.Allowed {
				checkTTL(t, l, next, h.at, kind != algo.KindSliding)
			}
			s = next
		}
	})
}

// TestWindowClockStepsBack interleaves instants that go backwards. A hit at
// an instant earlier than the latest one seen is admitted only if it would
// be admitted at that latest instant, leaves no more remaining, and obeys
// every decision rule.
func TestWindowClockStepsBack(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		kind := rapid.SampledFrom(allKinds).Draw(t, "kind")
		l := drawLimit(t, kind, 20, 1000)
		hits := drawHits(t, l, 50_000, 30)
		back := rapid.Int64Range(0, 5*l.Window)
		var s algo.WindowState
		latest := int64(0)
		for i, h := range hits {
			at := h.at
			if i > 0 && rapid.Bool().Draw(t, "stepBack") {
				at = max(0, latest-back.Draw(t, "back"))
			}
			next, d := algo.Hit(l, s, at, h.cost)
			checkDecision(t, l, at, d)
			if at < latest {
				_, dl := algo.Hit(l, s, latest, h.cost)
				if d.Allowed && !dl.Allowed {
					t.Fatalf("%+v, state %+v: cost %d admitted at %d but not at the latest instant %d",
						l, s, h.cost, at, latest)
				}
				if d.Allowed == dl.Allowed && d.Remaining > dl.Remaining {
					t.Fatalf("%+v, state %+v: remaining %d at %d, more than %d at the latest instant %d",
						l, s, d.Remaining, at, dl.Remaining, latest)
				}
			}
			latest = max(latest, at)
			s = next
		}
	})
}
