package algo

import (
	"fmt"
	"math"
	"strconv"
)

// AddInt returns cur+delta, or ErrOverflow when the sum leaves the int64
// range. Counters never wrap.
func AddInt(cur, delta int64) (int64, error) {
	if (delta > 0 && cur > math.MaxInt64-delta) || (delta < 0 && cur < math.MinInt64-delta) {
		return cur, fmt.Errorf("%w: %d + %d", ErrOverflow, cur, delta)
	}
	return cur + delta, nil
}

// ParseCounter reads a counter value: a base-10 int64 with no sign other than
// a leading '-', no spaces and no leading zeros, the same text Redis INCRBY
// accepts. An empty value is zero.
func ParseCounter(v []byte) (int64, bool) {
	if len(v) == 0 {
		return 0, true
	}
	n, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil || (len(v) > 1 && (v[0] == '0' || (v[0] == '-' && v[1] == '0'))) || v[0] == '+' {
		return 0, false
	}
	return n, true
}

// AppendCounter appends the canonical text of n to dst.
func AppendCounter(dst []byte, n int64) []byte {
	return strconv.AppendInt(dst, n, 10)
}

// Budget is one reservable budget: at most Limit units per window of Window
// milliseconds, where the window is anchored at the first reservation made
// while the budget was empty and is not restarted by a refund.
type Budget struct {
	Limit  int64
	Window int64
}

// Validate reports whether b is within bounds.
func (b Budget) Validate() error {
	if b.Limit < 1 || b.Limit > MaxLimit {
		return fmt.Errorf("%w: budget limit %d outside 1…%d", ErrInvalid, b.Limit, MaxLimit)
	}
	if b.Window < 1 || b.Window > MaxWindow {
		return fmt.Errorf("%w: budget window %d ms outside 1…%d", ErrInvalid, b.Window, MaxWindow)
	}
	return nil
}

// BudgetState is a budget's stored counter and the instant it expires. Any
// state with ExpireAt ≤ now is an empty budget (the zero value, from the
// Unix epoch on).
type BudgetState struct {
	Count    int64
	ExpireAt int64
}

// Reserve evaluates a reservation of cost units at now. An empty or expired
// budget starts a window ending at now+Window; a live one keeps its expiry
// (the window is anchored to its first reservation). A denial returns st
// unchanged.
func (b Budget) Reserve(st BudgetState, now, cost int64) (BudgetState, Decision) {
	if st.ExpireAt <= now {
		st = BudgetState{ExpireAt: now + b.Window}
	}
	// Compare without forming Count+cost: a counter written by kv.set or
	// kv.incr may hold any int64, and the sum must never wrap into an allow.
	if st.Count > b.Limit-cost {
		return st, Decision{Remaining: budgetRemaining(b.Limit, st.Count), ResetAt: st.ExpireAt, RetryAfter: st.ExpireAt - now}
	}
	st.Count += cost
	return st, Decision{Allowed: true, Remaining: budgetRemaining(b.Limit, st.Count), ResetAt: st.ExpireAt}
}

// Refund returns cost units to a live budget, never below zero, keeping its
// expiry. An expired budget stays empty.
func (st BudgetState) Refund(now, cost int64) BudgetState {
	if st.ExpireAt <= now {
		return BudgetState{}
	}
	// Compare before subtracting: a counter written by kv.set may hold
	// any int64, and the difference must never wrap to the top.
	if st.Count <= cost {
		st.Count = 0
	} else {
		st.Count -= cost
	}
	return st
}

// budgetRemaining returns limit−count, at least 0, saturating instead of
// overflowing when kv.incr has driven the counter far below zero.
func budgetRemaining(limit, count int64) int64 {
	switch {
	case count >= limit:
		return 0
	case count < limit-math.MaxInt64:
		return math.MaxInt64
	}
	return limit - count
}
