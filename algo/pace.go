package algo

import (
	"fmt"
	"slices"
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

// PaceState is the persisted pacing log and penalty.
//
// Log holds every grant, one entry per instant, including slots reserved in
// the future; entries are sorted by At. A penalty sets ForcedUntil, before
// which no slot is granted, and Hold, the spend the window recovering at
// ForcedUntil carries as if granted there (a phantom grant at ForcedUntil,
// kept out of the log). Hold stands for the grants the penalty found at or
// before PenalizedAt, the instant it arrived: those have run, or were due,
// and stay where they are. Entries after PenalizedAt and before ForcedUntil
// are slots reserved before the penalty that Claim will move; they count
// toward no floor, so that once moved they are new grants in the recovering
// window like any other.
type PaceState struct {
	ForcedUntil int64
	Hold        int64
	PenalizedAt int64
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
// reservations later than t (they are grants a window containing t may
// hold), and the penalty's hold while its deadline is after t−W.
func (s PaceState) used(l PaceLimit, t int64) int64 {
	var n int64
	for _, e := range s.Log {
		if e.At > t-l.Window {
			n += e.N
		}
	}
	if s.ForcedUntil > t-l.Window {
		n += s.Hold
	}
	return n
}

// floor returns the spend the window recovering from a penalty carries:
// Limit − ⌊Limit·RefillPermille/1000⌋.
func (l PaceLimit) floor() int64 { return l.Limit - l.Limit*l.RefillPermille/1000 }

// counted returns the grants the penalty's hold stands for: the entries at
// or before PenalizedAt that lie in the window recovering at ForcedUntil.
func (s PaceState) counted(l PaceLimit) int64 {
	var n int64
	for _, e := range s.Log {
		if e.At > s.PenalizedAt {
			break
		}
		if e.At > s.ForcedUntil-l.Window {
			n += e.N
		}
	}
	return n
}

// pruned returns s as it stands at now, sharing its log: without the entries
// that can no longer count, and without a hold whose deadline has left
// every window that can still matter.
func (s PaceState) pruned(l PaceLimit, now int64) PaceState {
	i := 0
	for i < len(s.Log) && s.Log[i].At <= now-l.Window {
		i++
	}
	next := PaceState{ForcedUntil: s.ForcedUntil, Hold: s.Hold, PenalizedAt: s.PenalizedAt, Log: s.Log[i:]}
	if s.ForcedUntil <= now-l.Window {
		next.Hold, next.PenalizedAt = 0, 0
	}
	return next
}

// slot returns the earliest instant ≥ from at which cost more units fit in
// the log, given that no entry (nor the deadline) is later than from. The
// hold is taken as a grant at ForcedUntil.
func (s PaceState) slot(l PaceLimit, from, cost int64) int64 {
	need := s.used(l, from) + cost - l.Limit
	if need <= 0 {
		return from
	}
	hold := s.Hold
	if s.ForcedUntil <= from-l.Window {
		hold = 0
	}
	for _, e := range s.Log {
		if hold > 0 && s.ForcedUntil <= e.At {
			if need -= hold; need <= 0 {
				return max(from, s.ForcedUntil+l.Window)
			}
			hold = 0
		}
		if e.At <= from-l.Window {
			continue
		}
		if need -= e.N; need <= 0 {
			return max(from, e.At+l.Window)
		}
	}
	if hold > 0 && need-hold <= 0 {
		return max(from, s.ForcedUntil+l.Window)
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
	cur := s.pruned(l, now)
	from := max(now, s.ForcedUntil)
	if n := len(cur.Log); n > 0 {
		from = max(from, cur.Log[n-1].At)
	}
	at := cur.slot(l, from, cost)
	d := PaceDecision{At: at}
	if at-now > maxWait {
		d.Remaining = max(0, l.Limit-cur.used(l, now))
		d.ResetAt = cur.resetAt(l, now)
		d.RetryAfter = at - now
		return s, d
	}
	next := cur
	next.Log = addEntry(cur.Log, at, cost)
	d.Allowed = true
	d.Remaining = max(0, l.Limit-next.used(l, now))
	d.ResetAt = next.resetAt(l, now)
	return next, d
}

// Claim is called by a caller holding a slot at At once its time has come.
// If a penalty arrived after the slot was reserved and the deadline is later
// than the slot, the slot is moved: its grant is removed and a new one taken
// (within maxWait of now), so a penalty never lets a caller run early, and
// the moved grant is a new one in the window recovering at the deadline. A
// caller claiming before its slot is told to wait. A moved slot that cannot
// be re-taken within maxWait is released. A slot that was already due when
// the penalty arrived counted toward the recovering window's floor (see
// Penalize); when it moves, the hold grows to keep that floor.
func (s PaceState) Claim(l PaceLimit, now, at, cost, maxWait int64) (PaceState, PaceDecision) {
	if now < at {
		return s, PaceDecision{At: at, Remaining: max(0, l.Limit-s.used(l, now)), ResetAt: s.resetAt(l, now), RetryAfter: at - now}
	}
	if at >= s.ForcedUntil {
		return s, PaceDecision{Allowed: true, At: at, Remaining: max(0, l.Limit-s.used(l, now)), ResetAt: s.resetAt(l, now)}
	}
	log, removed := removeEntry(s.Log, at, cost)
	moved := PaceState{ForcedUntil: s.ForcedUntil, Hold: s.Hold, PenalizedAt: s.PenalizedAt, Log: log}
	if removed > 0 && at <= s.PenalizedAt && at > s.ForcedUntil-l.Window && s.ForcedUntil > now-l.Window {
		// Exact before the deadline; after it, grants that have since left
		// the log are missing from counted, and the hold errs high.
		moved.Hold = max(moved.Hold, l.floor()-moved.counted(l))
	}
	next, d := moved.Take(l, now, cost, maxWait)
	if !d.Allowed {
		d.Remaining = max(0, l.Limit-next.used(l, now))
	}
	return next, d
}

// Penalize records an upstream rate limit: no slot is granted before until.
// Deadlines take the maximum of the existing and the new one. The window
// recovering at the deadline carries a spend of at least
// Limit − ⌊Limit·RefillPermille/1000⌋: grants at or before now still inside
// it count toward that floor, and the hold, a phantom spend at the
// deadline, makes up the rest. Slots reserved after now and before the
// deadline count toward nothing: Claim moves them, and they then take the
// recovering window's allowance like any new grant. An earlier penalty's
// hold still inside the recovering window is kept in the new one.
func (s PaceState) Penalize(l PaceLimit, now, until int64) PaceState {
	if until <= s.ForcedUntil || until <= now {
		return s
	}
	next := PaceState{ForcedUntil: until, PenalizedAt: now, Log: slices.Clone(s.pruned(l, now).Log)}
	next.Hold = max(0, l.floor()-next.counted(l))
	if s.ForcedUntil > until-l.Window {
		next.Hold = max(next.Hold, s.Hold)
	}
	return next
}

// Used returns the spend counted at now (see Take).
func (s PaceState) Used(l PaceLimit, now int64) int64 { return s.used(l, now) }

// ExpireAt returns the instant at which the state holds nothing of value.
func (s PaceState) ExpireAt(l PaceLimit) int64 {
	t := s.ForcedUntil
	if s.Hold > 0 {
		t += l.Window
	}
	if n := len(s.Log); n > 0 {
		t = max(t, s.Log[n-1].At+l.Window)
	}
	return t
}

func (s PaceState) resetAt(l PaceLimit, now int64) int64 {
	t := max(now, s.ForcedUntil)
	if n := len(s.Log); n > 0 {
		t = max(now, s.Log[n-1].At+l.Window)
	}
	if s.Hold > 0 {
		t = max(t, s.ForcedUntil+l.Window)
	}
	return t
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

// removeEntry returns a fresh log with up to n units removed at at, and how
// many were.
func removeEntry(log []Entry, at, n int64) ([]Entry, int64) {
	out := make([]Entry, 0, len(log))
	var removed int64
	for _, e := range log {
		if e.At == at {
			removed = min(e.N, n)
			if e.N -= removed; e.N == 0 {
				continue
			}
		}
		out = append(out, e)
	}
	return out, removed
}

// AppendBinary appends the encoding of s to dst: ForcedUntil, the log's
// entries, and, when either is not zero, Hold and PenalizedAt.
//
// The trailer is 24 bytes (a format word, 1, then Hold and PenalizedAt),
// so that with the 8 bytes of ForcedUntil it leaves the length a multiple
// of 16, where a state without it, the only form written before the hold
// existed, leaves 8 over: each form is told from the other by its length,
// and a record written before the hold decodes as a state without one.
func (s PaceState) AppendBinary(dst []byte) []byte {
	dst = le.AppendUint64(dst, uint64(s.ForcedUntil))
	dst = appendEntries(dst, s.Log)
	if s.Hold == 0 && s.PenalizedAt == 0 {
		return dst
	}
	dst = le.AppendUint64(dst, paceTrailerV1)
	dst = le.AppendUint64(dst, uint64(s.Hold))
	return le.AppendUint64(dst, uint64(s.PenalizedAt))
}

// paceTrailerV1 opens the trailer of a pacing state holding a hold.
const paceTrailerV1 = 1

// DecodePace decodes a pacing state. An empty input is the empty state.
func DecodePace(data []byte) (PaceState, error) {
	if len(data) == 0 {
		return PaceState{}, nil
	}
	if len(data) < 8 {
		return PaceState{}, corrupt("pace", len(data))
	}
	s := PaceState{ForcedUntil: int64(le.Uint64(data))}
	body := data[8:]
	if len(body)%16 == 8 {
		if len(body) < 24 {
			return PaceState{}, corrupt("pace", len(data))
		}
		tr := body[len(body)-24:]
		body = body[:len(body)-24]
		s.Hold, s.PenalizedAt = int64(le.Uint64(tr[8:])), int64(le.Uint64(tr[16:]))
		if le.Uint64(tr) != paceTrailerV1 || s.Hold < 0 || s.Hold > MaxLimit || (s.Hold == 0 && s.PenalizedAt == 0) {
			return PaceState{}, fmt.Errorf("%w: pace trailer (format %d, hold %d, at %d)", ErrCorrupt, le.Uint64(tr), s.Hold, s.PenalizedAt)
		}
	}
	entries, err := decodeEntries(body)
	if err != nil {
		return PaceState{}, err
	}
	s.Log = entries
	return s, nil
}
