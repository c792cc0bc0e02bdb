package algo_test

import (
	"errors"
	"math"
	"strconv"
	"testing"

	"pgregory.net/rapid"

	"github.com/sluicehq/sluice/algo"
)

func TestAddInt(t *testing.T) {
	tests := []struct {
		cur, delta int64
		want       int64
		overflow   bool
	}{
		{cur: 1, delta: 2, want: 3},
		{cur: -5, delta: 3, want: -2},
		{cur: math.MaxInt64 - 1, delta: 1, want: math.MaxInt64},
		{cur: math.MaxInt64, delta: 0, want: math.MaxInt64},
		{cur: math.MaxInt64, delta: -1, want: math.MaxInt64 - 1},
		{cur: math.MaxInt64, delta: 1, overflow: true},
		{cur: 1, delta: math.MaxInt64, overflow: true},
		{cur: math.MaxInt64, delta: math.MaxInt64, overflow: true},
		{cur: math.MinInt64 + 1, delta: -1, want: math.MinInt64},
		{cur: math.MinInt64, delta: 0, want: math.MinInt64},
		{cur: math.MinInt64, delta: 1, want: math.MinInt64 + 1},
		{cur: math.MinInt64, delta: -1, overflow: true},
		{cur: -2, delta: math.MinInt64, overflow: true},
		{cur: math.MinInt64, delta: math.MinInt64, overflow: true},
		{cur: 0, delta: math.MinInt64, want: math.MinInt64},
		{cur: -1, delta: math.MinInt64, overflow: true},
		{cur: math.MaxInt64, delta: math.MinInt64, want: -1},
	}
	for _, tt := range tests {
		got, err := algo.AddInt(tt.cur, tt.delta)
		if tt.overflow {
			if !errors.Is(err, algo.ErrOverflow) {
				t.Errorf("AddInt(%d, %d) = %d, %v; want ErrOverflow", tt.cur, tt.delta, got, err)
			}
			if got != tt.cur {
				t.Errorf("AddInt(%d, %d) on overflow returned %d, want the unchanged %d", tt.cur, tt.delta, got, tt.cur)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("AddInt(%d, %d) = %d, %v; want %d", tt.cur, tt.delta, got, err, tt.want)
		}
	}
}

// TestAddIntNeverWraps checks that AddInt errs exactly when the true sum
// leaves int64, and otherwise returns it.
func TestAddIntNeverWraps(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		edge := rapid.OneOf(rapid.Int64(), rapid.SampledFrom([]int64{math.MinInt64, math.MinInt64 + 1, -1, 0, 1, math.MaxInt64 - 1, math.MaxInt64}))
		cur, delta := edge.Draw(t, "cur"), edge.Draw(t, "delta")
		sum, err := algo.AddInt(cur, delta)
		// The true sum leaves int64 exactly when the wrapped sum has the
		// wrong sign: both operands share a sign the result lacks.
		wrapped := cur + delta
		overflows := (cur >= 0) == (delta >= 0) && (wrapped >= 0) != (cur >= 0)
		switch {
		case overflows && !errors.Is(err, algo.ErrOverflow):
			t.Fatalf("AddInt(%d, %d) = %d, %v; want ErrOverflow", cur, delta, sum, err)
		case !overflows && (err != nil || sum != wrapped):
			t.Fatalf("AddInt(%d, %d) = %d, %v; want %d", cur, delta, sum, err, wrapped)
		}
	})
}

func TestParseCounter(t *testing.T) {
	good := map[string]int64{
		"":                     0,
		"0":                    0,
		"7":                    7,
		"-7":                   -7,
		"10":                   10,
		"9223372036854775807":  math.MaxInt64,
		"-9223372036854775808": math.MinInt64,
	}
	for in, want := range good {
		if got, ok := algo.ParseCounter([]byte(in)); !ok || got != want {
			t.Errorf("ParseCounter(%q) = %d, %v; want %d", in, got, ok, want)
		}
	}
	bad := []string{
		"+1", "01", "00", "-0", "-01", " 1", "1 ", "1\n", "-", "+", "1.0", "1e3", "0x10",
		"9223372036854775808", "-9223372036854775809", "١", "1_000", "abc",
	}
	for _, in := range bad {
		if got, ok := algo.ParseCounter([]byte(in)); ok {
			t.Errorf("ParseCounter(%q) = %d, true; want rejected", in, got)
		}
	}
}

// TestCounterTextRoundTrip checks that AppendCounter writes the one text
// ParseCounter accepts for each value, and that any text it accepts is that
// canonical text.
func TestCounterTextRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.Int64().Draw(t, "n")
		text := algo.AppendCounter([]byte("x"), n)[1:]
		if got, ok := algo.ParseCounter(text); !ok || got != n {
			t.Fatalf("ParseCounter(%q) = %d, %v; want %d", text, got, ok, n)
		}
		in := rapid.StringMatching(`[-+0-9 ]{1,21}`).Draw(t, "text")
		if got, ok := algo.ParseCounter([]byte(in)); ok && strconv.FormatInt(got, 10) != in {
			t.Fatalf("ParseCounter accepted the non-canonical %q as %d", in, got)
		}
	})
}

func TestBudgetValidate(t *testing.T) {
	for _, b := range []algo.Budget{{Limit: 1, Window: 1}, {Limit: algo.MaxLimit, Window: algo.MaxWindow}} {
		if err := b.Validate(); err != nil {
			t.Errorf("Validate(%+v) = %v", b, err)
		}
	}
	for _, b := range []algo.Budget{{Limit: 0, Window: 1}, {Limit: algo.MaxLimit + 1, Window: 1}, {Limit: 1, Window: 0}, {Limit: 1, Window: algo.MaxWindow + 1}} {
		if err := b.Validate(); !errors.Is(err, algo.ErrInvalid) {
			t.Errorf("Validate(%+v) = %v, want ErrInvalid", b, err)
		}
	}
}

func TestBudgetReserve(t *testing.T) {
	b := algo.Budget{Limit: 3, Window: 1000}
	type row struct {
		now, cost int64
		refund    int64 // when non-zero, refund this much at now instead
		want      algo.Decision
		state     algo.BudgetState
	}
	rows := []row{
		// The first reservation anchors the window at 250, not at an epoch.
		{now: 250, cost: 2, want: algo.Decision{Allowed: true, Remaining: 1, ResetAt: 1250}, state: algo.BudgetState{Count: 2, ExpireAt: 1250}},
		{now: 400, cost: 2, want: algo.Decision{Remaining: 1, ResetAt: 1250, RetryAfter: 850}, state: algo.BudgetState{Count: 2, ExpireAt: 1250}},
		{now: 500, refund: 2, state: algo.BudgetState{Count: 0, ExpireAt: 1250}},
		// Refunded to zero, the budget keeps its expiry: no new window.
		{now: 600, cost: 3, want: algo.Decision{Allowed: true, Remaining: 0, ResetAt: 1250}, state: algo.BudgetState{Count: 3, ExpireAt: 1250}},
		{now: 1249, cost: 1, want: algo.Decision{Remaining: 0, ResetAt: 1250, RetryAfter: 1}, state: algo.BudgetState{Count: 3, ExpireAt: 1250}},
		// Expired at 1250: the next reservation anchors a new window.
		{now: 1250, cost: 1, want: algo.Decision{Allowed: true, Remaining: 2, ResetAt: 2250}, state: algo.BudgetState{Count: 1, ExpireAt: 2250}},
		// A refund never goes below zero.
		{now: 1300, refund: 5, state: algo.BudgetState{Count: 0, ExpireAt: 2250}},
		// A refund to an expired budget leaves it empty.
		{now: 2250, refund: 1, state: algo.BudgetState{}},
		{now: 2300, cost: 3, want: algo.Decision{Allowed: true, Remaining: 0, ResetAt: 3300}, state: algo.BudgetState{Count: 3, ExpireAt: 3300}},
	}
	var st algo.BudgetState
	for i, r := range rows {
		if r.refund != 0 {
			st = st.Refund(r.now, r.refund)
		} else {
			var d algo.Decision
			before := st
			st, d = b.Reserve(st, r.now, r.cost)
			if d != r.want {
				t.Errorf("row %d: Reserve(%d, %d) = %+v, want %+v", i, r.now, r.cost, d, r.want)
			}
			if !d.Allowed && st != before {
				t.Errorf("row %d: denial changed %+v to %+v", i, before, st)
			}
		}
		if st != r.state {
			t.Errorf("row %d: state %+v, want %+v", i, st, r.state)
		}
	}
}

// TestBudgetRetryExact checks a denied reservation against the instant it
// names: admitted there, denied one millisecond before.
func TestBudgetRetryExact(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		b := algo.Budget{Limit: rapid.Int64Range(1, 50).Draw(t, "limit"), Window: rapid.Int64Range(1, 1000).Draw(t, "window")}
		var st algo.BudgetState
		now := rapid.Int64Range(0, 10_000).Draw(t, "start")
		for range rapid.IntRange(1, 30).Draw(t, "ops") {
			now += rapid.Int64Range(0, b.Window).Draw(t, "gap")
			cost := rapid.Int64Range(1, b.Limit).Draw(t, "cost")
			if rapid.Bool().Draw(t, "refund") {
				st = st.Refund(now, cost)
				continue
			}
			next, d := b.Reserve(st, now, cost)
			if d.Remaining < 0 || d.Remaining > b.Limit || d.RetryAfter < 0 || d.RetryAfter > b.Window || (d.RetryAfter == 0) != d.Allowed {
				t.Fatalf("Reserve(%+v, %d, %d) = %+v: outside the decision rules", st, now, cost, d)
			}
			if !d.Allowed {
				if _, at := b.Reserve(st, now+d.RetryAfter, cost); !at.Allowed {
					t.Fatalf("denied at %d with retry-after %d, denied again then", now, d.RetryAfter)
				}
				if _, early := b.Reserve(st, now+d.RetryAfter-1, cost); early.Allowed {
					t.Fatalf("denied at %d with retry-after %d, admitted 1 ms earlier", now, d.RetryAfter)
				}
			}
			if next.Count > b.Limit || next.Count < 0 {
				t.Fatalf("count %d outside 0…%d", next.Count, b.Limit)
			}
			st = next
		}
	})
}

// TestBudgetReserveExtremeCounters: a counter set to any int64 by kv.set or
// kv.incr never wraps into an allow or a negative remaining.
func TestBudgetReserveExtremeCounters(t *testing.T) {
	b := algo.Budget{Limit: 10, Window: 1000}
	for _, count := range []int64{math.MaxInt64, math.MaxInt64 - 5, 11, 10} {
		_, d := b.Reserve(algo.BudgetState{Count: count, ExpireAt: 5000}, 0, 1)
		if d.Allowed || d.Remaining != 0 {
			t.Errorf("count %d: %+v, want a denial with nothing remaining", count, d)
		}
	}
	for _, count := range []int64{math.MinInt64, math.MinInt64 + 3, -1} {
		st, d := b.Reserve(algo.BudgetState{Count: count, ExpireAt: 5000}, 0, 1)
		if !d.Allowed || d.Remaining < 10 || st.Count != count+1 {
			t.Errorf("count %d: %+v (count after %d), want an allow with a non-negative remaining", count, d, st.Count)
		}
	}
}
