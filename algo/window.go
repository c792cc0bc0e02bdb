package algo

import (
	"fmt"
	"math"
	"math/bits"
)

// Kind selects a window algorithm.
type Kind uint8

// The window kinds. The zero Kind is invalid so that a forgotten field is an
// error rather than a silent default.
const (
	KindFixed   Kind = 1 + iota // epoch-aligned fixed window
	KindSliding                 // weighted two-bucket estimate
	KindLog                     // exact sliding log
	KindGCRA                    // generic cell rate algorithm
)

var kindNames = [...]string{KindFixed: "fixed", KindSliding: "sliding", KindLog: "log", KindGCRA: "gcra"}

// String returns the wire name of k ("fixed", "sliding", "log", "gcra").
func (k Kind) String() string {
	if int(k) < len(kindNames) && kindNames[k] != "" {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// ParseKind maps a wire name to a Kind.
func ParseKind(s string) (Kind, error) {
	for k, name := range kindNames {
		if name != "" && name == s {
			return Kind(k), nil
		}
	}
	return 0, fmt.Errorf("%w: unknown window kind %q", ErrInvalid, s)
}

// Bounds shared by every window kind.
const (
	// MaxLimit is the largest limit (and so the largest cost) a window accepts.
	// It keeps every count far from int64 overflow and exact in a float64.
	MaxLimit int64 = 1 << 40
	// MaxLogLimit caps the limit of a [KindLog] window, whose storage grows
	// with the limit (at most Limit entries of 16 bytes).
	MaxLogLimit int64 = 4096
	// MaxWindow is the longest window: 120 days in milliseconds.
	MaxWindow int64 = 120 * 24 * 60 * 60 * 1000
)

// Limit describes one window: at most Limit units of cost per Window
// milliseconds.
type Limit struct {
	Kind   Kind
	Limit  int64 // admitted cost per window, 1 … MaxLimit (MaxLogLimit for KindLog)
	Window int64 // window length in milliseconds, 1 … MaxWindow
}

// Validate reports whether l is within bounds.
func (l Limit) Validate() error {
	switch l.Kind {
	case KindFixed, KindSliding, KindLog, KindGCRA:
	default:
		return fmt.Errorf("%w: window kind %d", ErrInvalid, l.Kind)
	}
	maxLimit := MaxLimit
	if l.Kind == KindLog {
		maxLimit = MaxLogLimit
	}
	if l.Limit < 1 || l.Limit > maxLimit {
		return fmt.Errorf("%w: %s limit %d outside 1…%d", ErrInvalid, l.Kind, l.Limit, maxLimit)
	}
	if l.Window < 1 || l.Window > MaxWindow {
		return fmt.Errorf("%w: window %d ms outside 1…%d", ErrInvalid, l.Window, MaxWindow)
	}
	return nil
}

// ValidateCost reports whether cost can ever be admitted by l.
func (l Limit) ValidateCost(cost int64) error {
	if cost < 1 {
		return fmt.Errorf("%w: cost %d must be positive", ErrInvalid, cost)
	}
	if cost > l.Limit {
		return fmt.Errorf("%w: cost %d exceeds limit %d and could never be admitted", ErrInvalid, cost, l.Limit)
	}
	return nil
}

// TTL returns how long, in milliseconds after now, a state written at now
// must be kept for the window to remain exact. Stores use it as the record's
// expiry.
func (l Limit) TTL(s WindowState, now int64) int64 {
	switch l.Kind {
	case KindFixed:
		return s.Start + l.Window - now
	case KindSliding:
		return s.Start + 2*l.Window - now
	case KindGCRA:
		return gcraCeil(s.TAT, s.Frac) - now
	case KindLog:
		if n := len(s.Log); n > 0 {
			return s.Log[n-1].At + l.Window - now
		}
	}
	return 0
}

// Decision is the outcome of one hit on one window.
type Decision struct {
	Allowed bool
	// Remaining is the cost the window would still admit right now, after
	// this hit if it was allowed. Never negative.
	Remaining int64
	// ResetAt is the Unix millisecond at which the window will hold nothing,
	// assuming no further hits.
	ResetAt int64
	// RetryAfter is, for a denial, the number of milliseconds after now at
	// which the same hit would first be admitted, assuming no other hits.
	// It is 0 for an allowed hit and never negative.
	RetryAfter int64
}

// Entry is one element of a sliding log: N units granted at instant At.
type Entry struct {
	At int64
	N  int64
}

// WindowState is the stored state of one window. Which fields are used
// depends on the Kind of the Limit it is evaluated with; the zero value is an
// empty window of every kind.
type WindowState struct {
	Start int64   // fixed, sliding: start of the current bucket (Unix ms)
	Count int64   // fixed, sliding: cost charged in the current bucket
	Prev  int64   // sliding: cost charged in the previous bucket
	TAT   int64   // gcra: theoretical arrival time, whole Unix ms …
	Frac  int64   // … plus Frac/Limit ms, 0 ≤ Frac < Limit
	Log   []Entry // log: grants inside the window, oldest first
}

// Hit evaluates a hit of the given cost at now against s. It returns the
// state to store if the hit is committed, and the decision. When the hit is
// denied the returned state equals s: a denial charges nothing. s is never
// modified; a log state returns a fresh slice.
//
// l and cost must have been validated with [Limit.Validate] and
// [Limit.ValidateCost]; Hit does not repeat those checks.
func Hit(l Limit, s WindowState, now, cost int64) (WindowState, Decision) {
	switch l.Kind {
	case KindFixed:
		return hitFixed(l, s, now, cost)
	case KindSliding:
		return hitSliding(l, s, now, cost)
	case KindLog:
		return hitLog(l, s, now, cost)
	case KindGCRA:
		return hitGCRA(l, s, now, cost)
	}
	return s, Decision{}
}

// bucketStart returns the epoch-aligned start of the bucket holding now.
func bucketStart(now, window int64) int64 {
	if now < 0 {
		return 0
	}
	return now - now%window
}

func hitFixed(l Limit, s WindowState, now, cost int64) (WindowState, Decision) {
	now = max(now, s.Start)
	start := bucketStart(now, l.Window)
	count := s.Count
	if start != s.Start {
		count = 0
	}
	end := start + l.Window
	if count+cost > l.Limit {
		return s, Decision{Remaining: max(0, l.Limit-count), ResetAt: end, RetryAfter: end - now}
	}
	count += cost
	return WindowState{Start: start, Count: count}, Decision{Allowed: true, Remaining: l.Limit - count, ResetAt: end}
}

// slidingEstimate is the Upstash-weighted estimate prev·(W−elapsed)/W + cur.
// The explicit conversions keep the compiler from fusing the multiply-add, so
// every platform (and the Lua mirror) rounds identically.
func slidingEstimate(prev, cur, window, elapsed int64) float64 {
	weighted := float64(float64(prev) * float64(window-elapsed))
	return float64(weighted/float64(window)) + float64(cur)
}

// slidingRoll moves s to the bucket holding now.
func slidingRoll(l Limit, s WindowState, now int64) (start, cur, prev int64) {
	start = bucketStart(now, l.Window)
	switch {
	case start == s.Start:
		return start, s.Count, s.Prev
	case start == s.Start+l.Window:
		return start, 0, s.Count
	default:
		return start, 0, 0
	}
}

func hitSliding(l Limit, s WindowState, now, cost int64) (WindowState, Decision) {
	now = max(now, s.Start)
	start, cur, prev := slidingRoll(l, s, now)
	elapsed := now - start
	est := slidingEstimate(prev, cur, l.Window, elapsed)
	if est+float64(cost) > float64(l.Limit) {
		// Denied, so cur > 0 or prev > 0: the window empties at the end of
		// the bucket holding the newest charge's successor.
		resetAt := start + l.Window
		if cur > 0 {
			resetAt += l.Window
		}
		d := Decision{Remaining: remainingFloat(l.Limit, est), ResetAt: resetAt}
		d.RetryAfter = slidingRetry(l, start, cur, prev, now, cost) - now
		return s, d
	}
	cur += cost
	est += float64(cost)
	return WindowState{Start: start, Count: cur, Prev: prev},
		Decision{Allowed: true, Remaining: remainingFloat(l.Limit, est), ResetAt: start + 2*l.Window}
}

func remainingFloat(limit int64, used float64) int64 {
	r := math.Floor(float64(limit) - used)
	if r < 0 {
		return 0
	}
	return int64(r)
}

// slidingRetry returns the earliest instant ≥ now at which a hit of cost
// would be admitted by a window holding prev and cur in the bucket at start.
func slidingRetry(l Limit, start, cur, prev, now, cost int64) int64 {
	admits := func(p, c, bucket, at int64) bool {
		return slidingEstimate(p, c, l.Window, at-bucket)+float64(cost) <= float64(l.Limit)
	}
	// earliest finds the first instant in [from, bucket+W) admitting the hit
	// with p and c in that bucket, or -1 if there is none.
	earliest := func(p, c, bucket, from int64) int64 {
		if c+cost > l.Limit {
			return -1
		}
		if p == 0 || admits(p, c, bucket, from) {
			return from
		}
		end := bucket + l.Window
		if !admits(p, c, bucket, end-1) {
			return -1
		}
		// p·(W−e)/W + c + cost ≤ limit  ⇔  e ≥ W − (limit−c−cost)·W/p.
		// The closed form is usually exact; when float rounding moves the
		// boundary (large limits and windows), search for it: admits is
		// monotone in at, and admits(from) is false while admits(end−1)
		// is true.
		e := float64(l.Window) - float64(l.Limit-c-cost)*float64(l.Window)/float64(p)
		at := min(max(from+1, bucket+int64(math.Ceil(e))), end-1)
		if admits(p, c, bucket, at) && !admits(p, c, bucket, at-1) {
			return at
		}
		lo, hi := from, end-1 // !admits(lo), admits(hi)
		for hi-lo > 1 {
			mid := lo + (hi-lo)/2
			if admits(p, c, bucket, mid) {
				hi = mid
			} else {
				lo = mid
			}
		}
		return hi
	}
	if at := earliest(prev, cur, start, now); at >= 0 {
		return at
	}
	next := start + l.Window
	if at := earliest(cur, 0, next, next); at >= 0 {
		return at
	}
	return next + l.Window
}

func hitLog(l Limit, s WindowState, now, cost int64) (WindowState, Decision) {
	if n := len(s.Log); n > 0 {
		now = max(now, s.Log[n-1].At)
	}
	// Entries at or before now−W have left the window (it is (now−W, now]).
	live := s.Log
	for len(live) > 0 && live[0].At <= now-l.Window {
		live = live[1:]
	}
	var used int64
	for _, e := range live {
		used += e.N
	}
	if used+cost > l.Limit {
		d := Decision{Remaining: max(0, l.Limit-used), ResetAt: live[len(live)-1].At + l.Window}
		// Drop the oldest entries until the hit fits; the last one dropped
		// decides when.
		need := used + cost - l.Limit
		for _, e := range live {
			need -= e.N
			if need <= 0 {
				d.RetryAfter = e.At + l.Window - now
				break
			}
		}
		return s, d
	}
	next := make([]Entry, 0, len(live)+1)
	next = append(next, live...)
	if n := len(next); n > 0 && next[n-1].At == now {
		next[n-1].N += cost
	} else {
		next = append(next, Entry{At: now, N: cost})
	}
	used += cost
	return WindowState{Log: next}, Decision{Allowed: true, Remaining: l.Limit - used, ResetAt: now + l.Window}
}

// GCRA keeps its theoretical arrival time (TAT) exactly, as whole
// milliseconds plus a fraction in units of 1/Limit ms, so that the emission
// interval W/Limit needs no rounding: a rested window admits a burst of Limit
// and is rested again exactly W ms later, whatever Limit is.

// gcraStep returns cost·Window/Limit as whole milliseconds and a remainder in
// units of 1/Limit ms. The product is formed in 128 bits: it can exceed int64
// for the largest limits and windows.
func gcraStep(l Limit, cost int64) (ms, frac int64) {
	c, lim := uint64(cost), uint64(l.Limit)
	hi, lo := bits.Mul64(c%lim, uint64(l.Window))
	q, r := bits.Div64(hi, lo, lim) // hi < lim because c%lim < lim
	return int64(c/lim)*l.Window + int64(q), int64(r)
}

// gcraCeil rounds the instant tat + frac/Limit up to whole milliseconds.
func gcraCeil(tat, frac int64) int64 {
	if frac > 0 {
		return tat + 1
	}
	return tat
}

func hitGCRA(l Limit, s WindowState, now, cost int64) (WindowState, Decision) {
	// A state written under another limit is read with under a
	// millisecond's error; a fraction that no longer fits rounds up.
	tat, frac := s.TAT, max(s.Frac, 0)
	if frac >= l.Limit {
		tat, frac = tat+1, 0
	}
	// An allowed hit at instant T leaves TAT ≤ T+W, so ⌈TAT−W⌉ is at most
	// the latest instant seen: an earlier now is treated as that instant.
	now = max(now, gcraCeil(tat, frac)-l.Window)
	if tat < now {
		tat, frac = now, 0
	}
	step, stepFrac := gcraStep(l, cost)
	next, nextFrac := tat+step, frac+stepFrac
	if nextFrac >= l.Limit {
		next, nextFrac = next+1, nextFrac-l.Limit
	}
	// The hit conforms when the new TAT is at most W after now.
	if over := next - now - l.Window; over > 0 || (over == 0 && nextFrac > 0) {
		return s, Decision{
			Remaining:  gcraRemaining(l, tat, frac, now),
			ResetAt:    gcraCeil(tat, frac),
			RetryAfter: gcraCeil(over, nextFrac),
		}
	}
	return WindowState{TAT: next, Frac: nextFrac}, Decision{
		Allowed:   true,
		Remaining: gcraRemaining(l, next, nextFrac, now),
		ResetAt:   gcraCeil(next, nextFrac),
	}
}

// gcraRemaining returns ⌊(W − (TAT−now))·Limit/W⌋: the cost a hit at now
// could still carry. tat must not be before now.
func gcraRemaining(l Limit, tat, frac, now int64) int64 {
	gap := l.Window - (tat - now)
	if gap <= 0 {
		return 0
	}
	// gap ≤ W, so the quotient is at most Limit and fits the division.
	hi, lo := bits.Mul64(uint64(gap), uint64(l.Limit))
	lo, borrow := bits.Sub64(lo, uint64(frac), 0)
	q, _ := bits.Div64(hi-borrow, lo, uint64(l.Window))
	return min(int64(q), l.Limit)
}

// MarshalText implements encoding.TextMarshaler with the wire name.
func (k Kind) MarshalText() ([]byte, error) {
	if int(k) >= len(kindNames) || kindNames[k] == "" {
		return nil, fmt.Errorf("%w: window kind %d", ErrInvalid, k)
	}
	return []byte(kindNames[k]), nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (k *Kind) UnmarshalText(b []byte) error {
	v, err := ParseKind(string(b))
	if err != nil {
		return err
	}
	*k = v
	return nil
}
