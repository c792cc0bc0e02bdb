package algo

import (
	"fmt"
	"sort"
)

// DefaultRefillPermille is the default share of the limit (in thousandths)
// a window recovering from a penalty reopens with: one half.
const DefaultRefillPermille = 500

// PaceLimit configures a paced limiter: an exact sliding log of at most Limit
// grants per Window milliseconds, which after a penalty reopens with at most
// RefillPermille/1000 of the limit available.
type PaceLimit struct {
	Limit          int64
	Window         int64
	RefillPermille int64 // 0 … 1000
}

// Validate reports whether l is within bounds.
func (l PaceLimit) Validate() error {
	if l.Limit < 1 || l.Limit > MaxLogLimit {
		return fmt.Errorf("%w: pace limit %d outside 1…%d", ErrInvalid, l.Limit, MaxLogLimit)
	}
	if l.Window < 1 || l.Window > MaxWindow {
		return fmt.Errorf("%w: pace window %d ms outside 1…%d", ErrInvalid, l.Window, MaxWindow)
	}
	if l.RefillPermille < 0 || l.RefillPermille > 1000 {
		return fmt.Errorf("%w: refill %d‰ outside 0…1000", ErrInvalid, l.RefillPermille)
	}
	return nil
}

// PaceState is the persisted pacing log: every grant (one entry per instant,
// including slots reserved in the future and the phantom spend a penalty
// carries) and the penalty deadline. Entries are sorted by At.
type PaceState struct {
	ForcedUntil int64
	Log         []Entry
}

// PaceDecision is the outcome of a take or a claim.
type PaceDecision struct {
	// Allowed reports that the caller holds a slot: it may run at At.
	Allowed bool
	// At is the instant of the slot: now for an immediate grant, later for
	// a reservation. For a denial, the slot that would have been offered.
	At int64
	// Remaining is the allowance left in the window at now, never negative.
	Remaining int64
	// ResetAt is the instant the log will hold no grant.
	ResetAt int64
	// RetryAfter is At−now for a denial (the wait exceeded maxWait), 0
	// otherwise.
	RetryAfter int64
}

// used returns the spend counted at t: every entry after t−W, including
// reservations later than t (they are grants a window containing t may hold).
func (s PaceState) used(l PaceLimit, t int64) int64 {
	var n int64
	for _, e := range s.Log {
		if e.At > t-l.Window {
			n += e.N
		}
	}
	return n
}

// prune returns the entries that can still count at or after now.
func (s PaceState) prune(l PaceLimit, now int64) []Entry {
	i := 0
	for i < len(s.Log) && s.Log[i].At <= now-l.Window {
		i++
	}
	return s.Log[i:]
}

// slot returns the earliest instant ≥ from at which cost more units fit in
// the log, given that no entry is later than from.
func (s PaceState) slot(l PaceLimit, from, cost int64) int64 {
	need := s.used(l, from) + cost - l.Limit
	if need <= 0 {
		return from
	}
	for _, e := range s.Log {
		if e.At <= from-l.Window {
			continue
		}
		need -= e.N
		if need <= 0 {
			return max(from, e.At+l.Window)
		}
	}
	return from // unreachable for cost ≤ limit
}

// Take asks for cost grants at now. Waiting callers are served in order: a
// slot is never earlier than the last reserved one, nor than the penalty
// deadline. If the slot is now, the grant is immediate; if it is within
// maxWait milliseconds, it is reserved (recorded in the log, so it counts
// against every window holding it) and the caller must not run before At;
// otherwise nothing is recorded and the decision is a denial.
func (s PaceState) Take(l PaceLimit, now, cost, maxWait int64) (PaceState, PaceDecision) {
	log := s.prune(l, now)
	cur := PaceState{ForcedUntil: s.ForcedUntil, Log: log}
	from := max(now, s.ForcedUntil)
	if n := len(log); n > 0 {
		from = max(from, log[n-1].At)
	}
	at := cur.slot(l, from, cost)
	d := PaceDecision{At: at}
	if at-now > maxWait {
		d.Remaining = max(0, l.Limit-cur.used(l, now))
		d.ResetAt = cur.resetAt(l, now)
		d.RetryAfter = at - now
		return s, d
	}
	next := PaceState{ForcedUntil: s.ForcedUntil, Log: addEntry(log, at, cost)}
	d.Allowed = true
	d.Remaining = max(0, l.Limit-next.used(l, now))
	d.ResetAt = next.resetAt(l, now)
	return next, d
}

// Claim is called by a caller holding a slot at At once its time has come.
// If a penalty arrived after the slot was reserved and the deadline is later
// than the slot, the slot is moved: its grant is removed and a new one taken
// (within maxWait of now), so a penalty never lets a caller run early. A
// caller claiming before its slot is told to wait. A moved slot that cannot
// be re-taken within maxWait is released, but the window recovering at the
// deadline keeps its floor (see Penalize): the released grant may have
// counted toward it.
func (s PaceState) Claim(l PaceLimit, now, at, cost, maxWait int64) (PaceState, PaceDecision) {
	if now < at {
		return s, PaceDecision{At: at, Remaining: max(0, l.Limit-s.used(l, now)), ResetAt: s.resetAt(l, now), RetryAfter: at - now}
	}
	if at >= s.ForcedUntil {
		return s, PaceDecision{Allowed: true, At: at, Remaining: max(0, l.Limit-s.used(l, now)), ResetAt: s.resetAt(l, now)}
	}
	moved := PaceState{ForcedUntil: s.ForcedUntil, Log: removeEntry(s.Log, at, cost)}
	next, d := moved.Take(l, now, cost, maxWait)
	if !d.Allowed {
		next = moved.keepFloor(l)
		d.Remaining = max(0, l.Limit-next.used(l, now))
	}
	return next, d
}

// Penalize records an upstream rate limit: no slot is granted before until.
// Deadlines take the maximum of the existing and the new one. The window
// recovering at the deadline carries a spend of at least
// Limit − ⌊Limit·RefillPermille/1000⌋: grants still inside it count toward
// that floor, and a phantom entry at the deadline makes up the rest.
func (s PaceState) Penalize(l PaceLimit, now, until int64) PaceState {
	if until <= s.ForcedUntil || until <= now {
		return s
	}
	return PaceState{ForcedUntil: until, Log: s.prune(l, now)}.keepFloor(l)
}

// keepFloor returns s, in a fresh log, with a phantom entry at its deadline
// where needed so that the window recovering there carries a spend of at
// least Limit − ⌊Limit·RefillPermille/1000⌋.
func (s PaceState) keepFloor(l PaceLimit) PaceState {
	floor := l.Limit - l.Limit*l.RefillPermille/1000
	if phantom := floor - s.used(l, s.ForcedUntil); phantom > 0 {
		return PaceState{ForcedUntil: s.ForcedUntil, Log: addEntry(s.Log, s.ForcedUntil, phantom)}
	}
	return PaceState{ForcedUntil: s.ForcedUntil, Log: append([]Entry(nil), s.Log...)}
}

// Used returns the spend counted at now (see Take).
func (s PaceState) Used(l PaceLimit, now int64) int64 { return s.used(l, now) }

// ExpireAt returns the instant at which the state holds nothing of value.
func (s PaceState) ExpireAt(l PaceLimit) int64 {
	t := s.ForcedUntil
	if n := len(s.Log); n > 0 {
		t = max(t, s.Log[n-1].At+l.Window)
	}
	return t
}

func (s PaceState) resetAt(l PaceLimit, now int64) int64 {
	if n := len(s.Log); n > 0 {
		return max(now, s.Log[n-1].At+l.Window)
	}
	return max(now, s.ForcedUntil)
}

// addEntry returns a fresh sorted log with n units added at at.
func addEntry(log []Entry, at, n int64) []Entry {
	out := make([]Entry, 0, len(log)+1)
	i := sort.Search(len(log), func(i int) bool { return log[i].At >= at })
	out = append(out, log[:i]...)
	if i < len(log) && log[i].At == at {
		out = append(out, Entry{At: at, N: log[i].N + n})
		i++
	} else {
		out = append(out, Entry{At: at, N: n})
	}
	return append(out, log[i:]...)
}

// removeEntry returns a fresh log with up to n units removed at at.
func removeEntry(log []Entry, at, n int64) []Entry {
	out := make([]Entry, 0, len(log))
	for _, e := range log {
		if e.At == at {
			e.N -= n
			if e.N <= 0 {
				continue
			}
		}
		out = append(out, e)
	}
	return out
}

// AppendBinary appends the encoding of s to dst.
func (s PaceState) AppendBinary(dst []byte) []byte {
	dst = le.AppendUint64(dst, uint64(s.ForcedUntil))
	return appendEntries(dst, s.Log)
}

// DecodePace decodes a pacing state. An empty input is the empty state.
func DecodePace(data []byte) (PaceState, error) {
	if len(data) == 0 {
		return PaceState{}, nil
	}
	if len(data) < 8 {
		return PaceState{}, corrupt("pace", len(data))
	}
	entries, err := decodeEntries(data[8:])
	if err != nil {
		return PaceState{}, err
	}
	return PaceState{ForcedUntil: int64(le.Uint64(data)), Log: entries}, nil
}
