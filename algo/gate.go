package algo

import (
	"encoding/binary"
	"fmt"
)

// Bounds of a concurrency gate.
const (
	// MaxGateLimit is the largest number of concurrent leases a gate holds.
	MaxGateLimit = 1024
	// MaxLeaseID is the longest lease identifier, in bytes.
	MaxLeaseID = 64
)

// Lease is one live concurrency lease.
type Lease struct {
	ID       string
	ExpireAt int64
}

// GateState is the stored state of a concurrency gate: its leases, in the
// order they were acquired. Expired leases are dropped on every transition.
type GateState struct {
	Leases []Lease
}

// live returns the leases of s still live at now, in a fresh slice with room
// for one more.
func (s GateState) live(now int64) []Lease {
	out := make([]Lease, 0, len(s.Leases)+1)
	for _, l := range s.Leases {
		if l.ExpireAt > now {
			out = append(out, l)
		}
	}
	return out
}

// Acquire takes a lease named id for ttl milliseconds if fewer than limit
// leases are live. Acquiring a lease already held renews it and is allowed,
// so a retried acquire never takes two slots. A denial's RetryAfter is the
// time until the earliest live lease expires.
func (s GateState) Acquire(now int64, id string, limit, ttl int64) (GateState, Decision) {
	leases := s.live(now)
	for i := range leases {
		if leases[i].ID == id {
			leases[i].ExpireAt = max(leases[i].ExpireAt, now+ttl)
			return GateState{Leases: leases}, Decision{Allowed: true, Remaining: max(0, limit-int64(len(leases))), ResetAt: latest(leases)}
		}
	}
	if int64(len(leases)) >= limit {
		if len(leases) == 0 {
			// limit < 1: nothing can ever be admitted (Validate rejects it).
			return s, Decision{}
		}
		earliest := leases[0].ExpireAt
		for _, l := range leases {
			earliest = min(earliest, l.ExpireAt)
		}
		return s, Decision{ResetAt: latest(leases), RetryAfter: earliest - now}
	}
	leases = append(leases, Lease{ID: id, ExpireAt: now + ttl})
	return GateState{Leases: leases}, Decision{Allowed: true, Remaining: limit - int64(len(leases)), ResetAt: latest(leases)}
}

// Renew extends a live lease to now+ttl (never shortening it). It reports
// false, changing nothing, when the lease is not held.
func (s GateState) Renew(now int64, id string, ttl int64) (GateState, bool) {
	leases := s.live(now)
	for i := range leases {
		if leases[i].ID == id {
			leases[i].ExpireAt = max(leases[i].ExpireAt, now+ttl)
			return GateState{Leases: leases}, true
		}
	}
	return s, false
}

// Release drops a lease. It is idempotent: it reports whether the lease was
// live, and releasing an absent lease changes nothing but expired leases.
func (s GateState) Release(now int64, id string) (GateState, bool) {
	leases := s.live(now)
	for i := range leases {
		if leases[i].ID == id {
			return GateState{Leases: append(leases[:i], leases[i+1:]...)}, true
		}
	}
	return GateState{Leases: leases}, false
}

// Live returns the number of leases live at now.
func (s GateState) Live(now int64) int64 {
	var n int64
	for _, l := range s.Leases {
		if l.ExpireAt > now {
			n++
		}
	}
	return n
}

// ExpireAt returns the instant the last lease expires: the gate's record may
// be dropped then.
func (s GateState) ExpireAt() int64 { return latest(s.Leases) }

func latest(leases []Lease) int64 {
	var t int64
	for _, l := range leases {
		t = max(t, l.ExpireAt)
	}
	return t
}

// AppendBinary appends the encoding of s to dst.
func (s GateState) AppendBinary(dst []byte) []byte {
	for _, l := range s.Leases {
		dst = le.AppendUint64(dst, uint64(l.ExpireAt))
		dst = binary.AppendUvarint(dst, uint64(len(l.ID)))
		dst = append(dst, l.ID...)
	}
	return dst
}

// DecodeGate decodes a gate state.
func DecodeGate(data []byte) (GateState, error) {
	var s GateState
	for len(data) > 0 {
		if len(data) < 9 {
			return s, corrupt("gate", len(data))
		}
		exp := int64(le.Uint64(data))
		n, w := binary.Uvarint(data[8:])
		if w <= 0 || n > MaxLeaseID || uint64(len(data)-8-w) < n {
			return s, fmt.Errorf("%w: gate lease id", ErrCorrupt)
		}
		start := 8 + w
		s.Leases = append(s.Leases, Lease{ID: string(data[start : start+int(n)]), ExpireAt: exp})
		data = data[start+int(n):]
	}
	return s, nil
}
