package algo_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/sluicehq/sluice/algo"
)

// step is one row of a window table: a hit of cost at instant t and the
// decision it must produce.
type step struct {
	t, cost   int64
	allowed   bool
	remaining int64
	retry     int64
	reset     int64
}

// runSteps applies the rows in order to an empty window, storing the state a
// hit returns, and checks every decision. It also checks the rules every row
// shares: a denial returns its input unchanged, and a log never stores more
// entries than its limit.
func runSteps(t *testing.T, l algo.Limit, steps []step) algo.WindowState {
	t.Helper()
	if err := l.Validate(); err != nil {
		t.Fatalf("Validate(%+v) = %v", l, err)
	}
	var s algo.WindowState
	for i, r := range steps {
		before := cloneState(s)
		next, d := algo.Hit(l, s, r.t, r.cost)
		want := algo.Decision{Allowed: r.allowed, Remaining: r.remaining, RetryAfter: r.retry, ResetAt: r.reset}
		if d != want {
			t.Errorf("row %d: Hit(t=%d, cost=%d) = %+v, want %+v", i, r.t, r.cost, d, want)
		}
		if !d.Allowed && !equalState(next, before) {
			t.Errorf("row %d: denial returned %+v, want the input %+v", i, next, before)
		}
		if !equalState(s, before) {
			t.Errorf("row %d: Hit modified its input: %+v, was %+v", i, s, before)
		}
		if n := int64(len(next.Log)); n > l.Limit {
			t.Errorf("row %d: log holds %d entries, above the limit %d", i, n, l.Limit)
		}
		s = next
	}
	return s
}

func cloneState(s algo.WindowState) algo.WindowState {
	s.Log = slices.Clone(s.Log)
	return s
}

// equalState compares states, treating a nil and an empty log alike.
func equalState(a, b algo.WindowState) bool {
	return a.Start == b.Start && a.Count == b.Count && a.Prev == b.Prev &&
		a.TAT == b.TAT && a.Frac == b.Frac && slices.Equal(a.Log, b.Log)
}

func TestFixed(t *testing.T) {
	tests := []struct {
		name  string
		limit algo.Limit
		steps []step
	}{{
		name:  "limit 1, the bucket's last and first instants",
		limit: algo.Limit{Kind: algo.KindFixed, Limit: 1, Window: 1000},
		steps: []step{
			{t: 1000, cost: 1, allowed: true, remaining: 0, reset: 2000},
			{t: 1000, cost: 1, remaining: 0, retry: 1000, reset: 2000},
			{t: 1999, cost: 1, remaining: 0, retry: 1, reset: 2000},
			{t: 2000, cost: 1, allowed: true, remaining: 0, reset: 3000},
		},
	}, {
		name:  "buckets are aligned to the epoch, not to the first hit",
		limit: algo.Limit{Kind: algo.KindFixed, Limit: 2, Window: 1000},
		steps: []step{
			{t: 1500, cost: 2, allowed: true, remaining: 0, reset: 2000},
			{t: 1999, cost: 1, remaining: 0, retry: 1, reset: 2000},
			// A window anchored at 1500 would still be full here.
			{t: 2000, cost: 2, allowed: true, remaining: 0, reset: 3000},
			{t: 2400, cost: 1, remaining: 0, retry: 600, reset: 3000},
		},
	}, {
		name:  "cost above the remaining allowance",
		limit: algo.Limit{Kind: algo.KindFixed, Limit: 5, Window: 1000},
		steps: []step{
			{t: 0, cost: 3, allowed: true, remaining: 2, reset: 1000},
			{t: 10, cost: 3, remaining: 2, retry: 990, reset: 1000},
			{t: 10, cost: 2, allowed: true, remaining: 0, reset: 1000},
			{t: 999, cost: 5, remaining: 0, retry: 1, reset: 1000},
			{t: 1000, cost: 5, allowed: true, remaining: 0, reset: 2000},
		},
	}, {
		name:  "two limits around a boundary, the documented fixed-window burst",
		limit: algo.Limit{Kind: algo.KindFixed, Limit: 3, Window: 100},
		steps: []step{
			{t: 99, cost: 3, allowed: true, remaining: 0, reset: 100},
			{t: 100, cost: 3, allowed: true, remaining: 0, reset: 200},
		},
	}, {
		name:  "an idle bucket far in the past is forgotten",
		limit: algo.Limit{Kind: algo.KindFixed, Limit: 3, Window: 100},
		steps: []step{
			{t: 50, cost: 2, allowed: true, remaining: 1, reset: 100},
			{t: 5_000, cost: 3, allowed: true, remaining: 0, reset: 5_100},
		},
	}, {
		name:  "a clock stepping back is held at the bucket start",
		limit: algo.Limit{Kind: algo.KindFixed, Limit: 2, Window: 1000},
		steps: []step{
			{t: 5000, cost: 2, allowed: true, remaining: 0, reset: 6000},
			{t: 4999, cost: 1, remaining: 0, retry: 1000, reset: 6000},
			{t: 0, cost: 1, remaining: 0, retry: 1000, reset: 6000},
			{t: 6000, cost: 1, allowed: true, remaining: 1, reset: 7000},
			{t: 5500, cost: 1, allowed: true, remaining: 0, reset: 7000},
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { runSteps(t, tt.limit, tt.steps) })
	}
}

func TestSliding(t *testing.T) {
	tests := []struct {
		name  string
		limit algo.Limit
		steps []step
	}{{
		name:  "weighted estimate prev·(1−elapsed/W) + cur",
		limit: algo.Limit{Kind: algo.KindSliding, Limit: 10, Window: 1000},
		steps: []step{
			{t: 0, cost: 4, allowed: true, remaining: 6, reset: 2000},
			{t: 999, cost: 6, allowed: true, remaining: 0, reset: 2000},
			// prev 10 weighs fully at the start of the next bucket:
			// 10·(1−0/1000) + 0 + 1 > 10; it fits once 10·(1−e/1000) ≤ 9,
			// at e = 100.
			{t: 1000, cost: 1, remaining: 0, retry: 100, reset: 2000},
			{t: 1099, cost: 1, remaining: 0, retry: 1, reset: 2000},
			{t: 1100, cost: 1, allowed: true, remaining: 0, reset: 3000},
			// 10·0.75 + 1 = 8.5: 2 more would make 10.5; 10·0.7 + 1 + 2 = 10.
			{t: 1250, cost: 2, remaining: 1, retry: 50, reset: 3000},
			{t: 1300, cost: 2, allowed: true, remaining: 0, reset: 3000},
		},
	}, {
		name:  "limit 1: a full bucket decays only after it ends",
		limit: algo.Limit{Kind: algo.KindSliding, Limit: 1, Window: 1000},
		steps: []step{
			{t: 0, cost: 1, allowed: true, remaining: 0, reset: 2000},
			// No instant of the next bucket weighs the previous one below
			// 1/1000, so the earliest admission is two windows on.
			{t: 999, cost: 1, remaining: 0, retry: 1001, reset: 2000},
			{t: 1999, cost: 1, remaining: 0, retry: 1, reset: 2000},
			{t: 2000, cost: 1, allowed: true, remaining: 0, reset: 4000},
		},
	}, {
		name:  "retry-after reaches 2W for a full bucket and a full-limit cost",
		limit: algo.Limit{Kind: algo.KindSliding, Limit: 5, Window: 100},
		steps: []step{
			{t: 0, cost: 5, allowed: true, remaining: 0, reset: 200},
			{t: 0, cost: 5, remaining: 0, retry: 200, reset: 200},
			// 5·(1/100) = 0.05 still weighs: remaining ⌊5 − 0.05⌋ = 4.
			{t: 199, cost: 5, remaining: 4, retry: 1, reset: 200},
			{t: 199, cost: 4, allowed: true, remaining: 0, reset: 300},
		},
	}, {
		name:  "a bucket two windows old is forgotten",
		limit: algo.Limit{Kind: algo.KindSliding, Limit: 4, Window: 100},
		steps: []step{
			{t: 10, cost: 4, allowed: true, remaining: 0, reset: 200},
			{t: 150, cost: 4, remaining: 2, retry: 50, reset: 200},
			{t: 200, cost: 4, allowed: true, remaining: 0, reset: 400},
			{t: 450, cost: 4, allowed: true, remaining: 0, reset: 600},
		},
	}, {
		name:  "cost above the remaining allowance",
		limit: algo.Limit{Kind: algo.KindSliding, Limit: 10, Window: 1000},
		steps: []step{
			{t: 0, cost: 7, allowed: true, remaining: 3, reset: 2000},
			// Needs 7·(1−e/1000) ≤ 6 in the next bucket: e ≥ 142.9, at 1143.
			{t: 500, cost: 4, remaining: 3, retry: 643, reset: 2000},
			{t: 500, cost: 3, allowed: true, remaining: 0, reset: 2000},
		},
	}, {
		name:  "a clock stepping back is held at the bucket start",
		limit: algo.Limit{Kind: algo.KindSliding, Limit: 2, Window: 1000},
		steps: []step{
			{t: 1000, cost: 2, allowed: true, remaining: 0, reset: 3000},
			{t: 0, cost: 1, remaining: 0, retry: 1500, reset: 3000},
			{t: 2500, cost: 1, allowed: true, remaining: 0, reset: 4000},
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { runSteps(t, tt.limit, tt.steps) })
	}
}

func TestLog(t *testing.T) {
	tests := []struct {
		name  string
		limit algo.Limit
		steps []step
	}{{
		name:  "limit 1: an entry leaves the window W after it was granted",
		limit: algo.Limit{Kind: algo.KindLog, Limit: 1, Window: 1000},
		steps: []step{
			{t: 0, cost: 1, allowed: true, remaining: 0, reset: 1000},
			{t: 999, cost: 1, remaining: 0, retry: 1, reset: 1000},
			{t: 1000, cost: 1, allowed: true, remaining: 0, reset: 2000},
		},
	}, {
		name:  "the oldest entries that make room decide the retry",
		limit: algo.Limit{Kind: algo.KindLog, Limit: 3, Window: 1000},
		steps: []step{
			{t: 0, cost: 1, allowed: true, remaining: 2, reset: 1000},
			{t: 500, cost: 2, allowed: true, remaining: 0, reset: 1500},
			{t: 999, cost: 1, remaining: 0, retry: 1, reset: 1500},
			{t: 1000, cost: 1, allowed: true, remaining: 0, reset: 2000},
			{t: 1000, cost: 1, remaining: 0, retry: 500, reset: 2000},
			{t: 1499, cost: 2, remaining: 0, retry: 1, reset: 2000},
			{t: 1500, cost: 2, allowed: true, remaining: 0, reset: 2500},
		},
	}, {
		name:  "cost above the remaining allowance waits for enough entries",
		limit: algo.Limit{Kind: algo.KindLog, Limit: 5, Window: 100},
		steps: []step{
			{t: 10, cost: 1, allowed: true, remaining: 4, reset: 110},
			{t: 20, cost: 1, allowed: true, remaining: 3, reset: 120},
			{t: 30, cost: 1, allowed: true, remaining: 2, reset: 130},
			// Needs 2 more: the entries at 10 and 20 must both leave.
			{t: 40, cost: 4, remaining: 2, retry: 80, reset: 130},
			{t: 119, cost: 4, remaining: 3, retry: 1, reset: 130},
			{t: 120, cost: 4, allowed: true, remaining: 0, reset: 220},
		},
	}, {
		name:  "a clock stepping back is held at the newest entry",
		limit: algo.Limit{Kind: algo.KindLog, Limit: 2, Window: 100},
		steps: []step{
			{t: 500, cost: 2, allowed: true, remaining: 0, reset: 600},
			{t: 0, cost: 1, remaining: 0, retry: 100, reset: 600},
			{t: 599, cost: 1, remaining: 0, retry: 1, reset: 600},
			{t: 600, cost: 1, allowed: true, remaining: 1, reset: 700},
			{t: 550, cost: 1, allowed: true, remaining: 0, reset: 700},
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { runSteps(t, tt.limit, tt.steps) })
	}
}

func TestLogMergesOneInstant(t *testing.T) {
	l := algo.Limit{Kind: algo.KindLog, Limit: 4, Window: 100}
	s := runSteps(t, l, []step{
		{t: 5, cost: 1, allowed: true, remaining: 3, reset: 105},
		{t: 5, cost: 2, allowed: true, remaining: 1, reset: 105},
		{t: 7, cost: 1, allowed: true, remaining: 0, reset: 107},
	})
	want := []algo.Entry{{At: 5, N: 3}, {At: 7, N: 1}}
	if !slices.Equal(s.Log, want) {
		t.Errorf("log = %v, want %v", s.Log, want)
	}
}

func TestLogStorageStaysWithinLimit(t *testing.T) {
	l := algo.Limit{Kind: algo.KindLog, Limit: 8, Window: 50}
	var s algo.WindowState
	for now := int64(0); now < 1000; now++ {
		s, _ = algo.Hit(l, s, now, 1)
		if n := int64(len(s.Log)); n > l.Limit {
			t.Fatalf("at %d the log holds %d entries, above the limit %d", now, n, l.Limit)
		}
	}
	// Entries expire: the log holds what the last window granted.
	if got := len(s.Log); got != int(l.Limit) {
		t.Errorf("log holds %d entries after a saturating run, want %d", got, l.Limit)
	}
}

// TestLogDoesNotAlias checks that neither outcome of a hit writes through
// the input's backing array, even when it has spare capacity and the grant
// lands on the newest entry's instant.
func TestLogDoesNotAlias(t *testing.T) {
	l := algo.Limit{Kind: algo.KindLog, Limit: 4, Window: 100}
	backing := make([]algo.Entry, 2, 8)
	backing[0], backing[1] = algo.Entry{At: 10, N: 1}, algo.Entry{At: 50, N: 1}
	in := algo.WindowState{Log: backing}
	want := slices.Clone(backing[:cap(backing)])

	next, d := algo.Hit(l, in, 50, 2)
	if !d.Allowed {
		t.Fatalf("Hit = %+v, want allowed", d)
	}
	if wantLog := []algo.Entry{{At: 10, N: 1}, {At: 50, N: 3}}; !slices.Equal(next.Log, wantLog) {
		t.Errorf("log = %v, want %v", next.Log, wantLog)
	}
	next.Log[0].N = 99
	if !slices.Equal(backing[:cap(backing)], want) {
		t.Errorf("allowed hit wrote through the input: %v, want %v", backing[:cap(backing)], want)
	}

	denied, d := algo.Hit(l, in, 60, 3)
	if d.Allowed {
		t.Fatalf("Hit = %+v, want denied", d)
	}
	if !equalState(denied, in) {
		t.Errorf("denial returned %+v, want the input %+v", denied, in)
	}
	if !slices.Equal(backing[:cap(backing)], want) {
		t.Errorf("denied hit wrote through the input: %v, want %v", backing[:cap(backing)], want)
	}
}

func TestGCRA(t *testing.T) {
	tests := []struct {
		name  string
		limit algo.Limit
		steps []step
	}{{
		name:  "limit 1",
		limit: algo.Limit{Kind: algo.KindGCRA, Limit: 1, Window: 1000},
		steps: []step{
			{t: 0, cost: 1, allowed: true, remaining: 0, reset: 1000},
			{t: 999, cost: 1, remaining: 0, retry: 1, reset: 1000},
			{t: 1000, cost: 1, allowed: true, remaining: 0, reset: 2000},
		},
	}, {
		name:  "burst = limit, then one per emission interval W/limit",
		limit: algo.Limit{Kind: algo.KindGCRA, Limit: 4, Window: 1000},
		steps: []step{
			{t: 0, cost: 4, allowed: true, remaining: 0, reset: 1000},
			{t: 0, cost: 1, remaining: 0, retry: 250, reset: 1000},
			{t: 249, cost: 1, remaining: 0, retry: 1, reset: 1000},
			{t: 250, cost: 1, allowed: true, remaining: 0, reset: 1250},
			{t: 499, cost: 1, remaining: 0, retry: 1, reset: 1250},
			{t: 500, cost: 1, allowed: true, remaining: 0, reset: 1500},
			// TAT 1500 at 1000: (1000 − 500)·4/1000 = 2 remain.
			{t: 1000, cost: 3, remaining: 2, retry: 250, reset: 1500},
			{t: 1000, cost: 2, allowed: true, remaining: 0, reset: 2000},
			// Rested: the whole burst again.
			{t: 5000, cost: 4, allowed: true, remaining: 0, reset: 6000},
		},
	}, {
		name:  "an interval that is not a whole millisecond stays exact",
		limit: algo.Limit{Kind: algo.KindGCRA, Limit: 3, Window: 1000},
		steps: []step{
			{t: 0, cost: 3, allowed: true, remaining: 0, reset: 1000},
			{t: 0, cost: 3, remaining: 0, retry: 1000, reset: 1000},
			{t: 999, cost: 3, remaining: 2, retry: 1, reset: 1000},
			{t: 1000, cost: 3, allowed: true, remaining: 0, reset: 2000},
			// TAT 2000 + 1000/3: the next single hit fits at 1333⅓, so at 1334.
			{t: 1000, cost: 1, remaining: 0, retry: 334, reset: 2000},
			{t: 1333, cost: 1, remaining: 0, retry: 1, reset: 2000},
			{t: 1334, cost: 1, allowed: true, remaining: 0, reset: 2334},
			// 2333⅓ + 333⅓ − 1667 ≤ 1000: admitted; one more is not.
			{t: 1667, cost: 1, allowed: true, remaining: 0, reset: 2667},
			{t: 1667, cost: 1, remaining: 0, retry: 333, reset: 2667},
			{t: 2000, cost: 1, allowed: true, remaining: 0, reset: 3000},
		},
	}, {
		name:  "cost above the remaining allowance",
		limit: algo.Limit{Kind: algo.KindGCRA, Limit: 10, Window: 100},
		steps: []step{
			{t: 0, cost: 6, allowed: true, remaining: 4, reset: 60},
			{t: 0, cost: 5, remaining: 4, retry: 10, reset: 60},
			{t: 10, cost: 5, allowed: true, remaining: 0, reset: 110},
		},
	}, {
		name:  "a clock stepping back never widens the burst",
		limit: algo.Limit{Kind: algo.KindGCRA, Limit: 2, Window: 1000},
		steps: []step{
			{t: 10_000, cost: 2, allowed: true, remaining: 0, reset: 11_000},
			// Held at ⌈TAT−W⌉ = 10,000: the retry is from there.
			{t: 0, cost: 1, remaining: 0, retry: 500, reset: 11_000},
			{t: 10_500, cost: 1, allowed: true, remaining: 0, reset: 11_500},
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { runSteps(t, tt.limit, tt.steps) })
	}
}

// TestGCRAStateFromAnotherLimit reads a state written under a limit of 1000
// (its fraction in thousandths of a millisecond) with a limit of 3: the
// fraction no longer fits and rounds up, never down.
func TestGCRAStateFromAnotherLimit(t *testing.T) {
	before := algo.Limit{Kind: algo.KindGCRA, Limit: 1000, Window: 999}
	s, d := algo.Hit(before, algo.WindowState{}, 100, 1)
	if !d.Allowed || s.TAT != 100 || s.Frac != 999 {
		t.Fatalf("Hit = %+v, %+v; want TAT 100 + 999/1000", s, d)
	}
	after := algo.Limit{Kind: algo.KindGCRA, Limit: 3, Window: 999}
	if _, d := algo.Hit(after, s, 100, 3); d.Allowed || d.RetryAfter != 1 || d.ResetAt != 101 {
		t.Errorf("full burst under the new limit at 100 = %+v, want denied until 101", d)
	}
	if _, d := algo.Hit(after, s, 101, 3); !d.Allowed {
		t.Errorf("full burst under the new limit at 101 = %+v, want allowed", d)
	}
}

// TestGCRAExtremeLimit covers the largest limit over the shortest and the
// longest windows, where cost·W/limit needs more than 64 bits.
func TestGCRAExtremeLimit(t *testing.T) {
	for _, w := range []int64{1, 7, algo.MaxWindow} {
		l := algo.Limit{Kind: algo.KindGCRA, Limit: algo.MaxLimit, Window: w}
		runSteps(t, l, []step{
			{t: 1, cost: algo.MaxLimit - 1, allowed: true, remaining: 1, reset: 1 + w},
			{t: 1, cost: 1, allowed: true, remaining: 0, reset: 1 + w},
			{t: 1, cost: 1, remaining: 0, retry: 1, reset: 1 + w},
			{t: 1 + w, cost: algo.MaxLimit, allowed: true, remaining: 0, reset: 1 + 2*w},
		})
	}
}

// TestTTLCoversTheState checks that a state may be dropped exactly when its
// TTL ends: a full-limit hit is denied on the state one millisecond before,
// and admitted on it at the end, as on an empty window.
func TestTTLCoversTheState(t *testing.T) {
	tests := []struct {
		kind algo.Kind
		want int64 // TTL after one hit of cost 1 at 1250, window 1000, limit 3
	}{
		{algo.KindFixed, 750},    // bucket [1000, 2000)
		{algo.KindSliding, 1750}, // the bucket still weighs until 3000
		{algo.KindLog, 1000},     // the entry leaves at 2250
		{algo.KindGCRA, 334},     // TAT 1583⅓
	}
	for _, tt := range tests {
		l := algo.Limit{Kind: tt.kind, Limit: 3, Window: 1000}
		s, d := algo.Hit(l, algo.WindowState{}, 1250, 1)
		if !d.Allowed {
			t.Fatalf("%s: Hit = %+v, want allowed", tt.kind, d)
		}
		if got := l.TTL(s, 1250); got != tt.want {
			t.Errorf("%s: TTL = %d, want %d", tt.kind, got, tt.want)
		}
		if _, d := algo.Hit(l, s, 1250+tt.want-1, 3); d.Allowed {
			t.Errorf("%s: a full-limit hit 1 ms before the TTL ends = %+v, want denied", tt.kind, d)
		}
		if _, d := algo.Hit(l, s, 1250+tt.want, 3); !d.Allowed {
			t.Errorf("%s: a full-limit hit when the TTL ends = %+v, want allowed", tt.kind, d)
		}
	}
}

func TestValidate(t *testing.T) {
	valid := []algo.Limit{
		{Kind: algo.KindFixed, Limit: 1, Window: 1},
		{Kind: algo.KindSliding, Limit: algo.MaxLimit, Window: algo.MaxWindow},
		{Kind: algo.KindLog, Limit: algo.MaxLogLimit, Window: 1},
		{Kind: algo.KindGCRA, Limit: algo.MaxLimit, Window: 1},
	}
	for _, l := range valid {
		if err := l.Validate(); err != nil {
			t.Errorf("Validate(%+v) = %v, want nil", l, err)
		}
	}
	invalid := []algo.Limit{
		{Kind: 0, Limit: 1, Window: 1},
		{Kind: algo.KindGCRA + 1, Limit: 1, Window: 1},
		{Kind: algo.KindFixed, Limit: 0, Window: 1},
		{Kind: algo.KindFixed, Limit: -1, Window: 1},
		{Kind: algo.KindFixed, Limit: algo.MaxLimit + 1, Window: 1},
		{Kind: algo.KindLog, Limit: algo.MaxLogLimit + 1, Window: 1},
		{Kind: algo.KindSliding, Limit: 1, Window: 0},
		{Kind: algo.KindSliding, Limit: 1, Window: -1000},
		{Kind: algo.KindGCRA, Limit: 1, Window: algo.MaxWindow + 1},
		{Kind: algo.KindGCRA, Limit: 1, Window: 1 << 62},
	}
	for _, l := range invalid {
		if err := l.Validate(); !errors.Is(err, algo.ErrInvalid) {
			t.Errorf("Validate(%+v) = %v, want ErrInvalid", l, err)
		}
	}
	l := algo.Limit{Kind: algo.KindFixed, Limit: 10, Window: 1000}
	for _, cost := range []int64{0, -1, 11, 1<<63 - 1, -1 << 63} {
		if err := l.ValidateCost(cost); !errors.Is(err, algo.ErrInvalid) {
			t.Errorf("ValidateCost(%d) = %v, want ErrInvalid", cost, err)
		}
	}
	for _, cost := range []int64{1, 10} {
		if err := l.ValidateCost(cost); err != nil {
			t.Errorf("ValidateCost(%d) = %v, want nil", cost, err)
		}
	}
}

func TestKindText(t *testing.T) {
	for _, k := range []algo.Kind{algo.KindFixed, algo.KindSliding, algo.KindLog, algo.KindGCRA} {
		text, err := k.MarshalText()
		if err != nil {
			t.Fatalf("%v.MarshalText() = %v", k, err)
		}
		if string(text) != k.String() {
			t.Errorf("MarshalText = %q, String = %q", text, k.String())
		}
		var back algo.Kind
		if err := back.UnmarshalText(text); err != nil || back != k {
			t.Errorf("UnmarshalText(%q) = %v, %v; want %v", text, back, err, k)
		}
	}
	for _, bad := range []string{"", "Fixed", "token", "kind(1)"} {
		if _, err := algo.ParseKind(bad); !errors.Is(err, algo.ErrInvalid) {
			t.Errorf("ParseKind(%q) = %v, want ErrInvalid", bad, err)
		}
	}
	if _, err := algo.Kind(0).MarshalText(); !errors.Is(err, algo.ErrInvalid) {
		t.Errorf("Kind(0).MarshalText() = %v, want ErrInvalid", err)
	}
	if got := algo.Kind(9).String(); got != "kind(9)" {
		t.Errorf("Kind(9).String() = %q", got)
	}
}
