// Package keyhash replaces the identifiers of engine requests — partition
// names and keys — with keyed hashes, so that raw identifiers never leave
// the process that holds them.
//
// A value is replaced by its name: the HMAC-SHA256, keyed with a pepper, of
// a purpose, a zero byte and the value, written in one of two forms that
// the pepper chooses. A pepper in the compact form, one that begins with
// [CompactPrefix] (as [NewPepper]'s do), names a value by the MAC's first
// 16 bytes in unpadded base64url, 22 characters; any other pepper by the
// whole MAC in lowercase hex, 64 characters. Since the pepper chooses, two
// processes sharing a pepper always name alike, and a store named under a
// pepper of the hex form keeps its names (decision 0086).
//
// The client package hashes every request it sends this way; a server
// that reaches the same records from its own side (the limiter registry of
// /v1/limiters) wraps its store with [NewStore] under the same pepper, so
// both name the same partitions. Hashing in two places with two
// implementations would let them drift apart silently, so both use this
// one.
//
// A [Hasher] remembers its recent hashes, so that a value hashed again —
// the same user's or the same API key's limit, call after call — costs a
// lookup instead of an HMAC. The memo holds at most 16,384 hashes (4,096
// sets of 4, each set replacing its oldest entry first) and takes a value
// in on its second miss in a short while; an input (purpose, zero byte and
// value) of more than 255 bytes is never remembered. Full, it takes about
// 2.5 MiB for keys of a few dozen bytes and under 6 MiB however long. A
// remembered name is the string the HMAC gave, so the memo changes no
// output (decision 0076).
package keyhash

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"hash"
	"hash/maphash"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/sluicehq/sluice/engine"
)

// The purposes of the hashes of a request's identifiers.
const (
	PurposePartition = "partition" // partition names
	PurposeKey       = "key"       // window, kv, budget, receipt, gate and pace keys
)

// CompactPrefix begins a pepper in the compact form, whose names are 22
// characters of unpadded base64url (see the package documentation). The
// prefix is part of the pepper: the whole pepper keys the HMAC.
const CompactPrefix = "pepper-v2:"

// compactBytes is how much of the MAC a compact name holds: 128 bits, half
// of HMAC-SHA256's output, the shortest truncation RFC 2104 advises.
const compactBytes = 16

// NewPepper returns a fresh random pepper in the compact form:
// CompactPrefix followed by 32 random bytes in unpadded base64url.
func NewPepper() string {
	var b [32]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go ≥ 1.24)
	return CompactPrefix + base64.RawURLEncoding.EncodeToString(b[:])
}

// Hasher hashes values with one pepper. It is safe for concurrent use.
type Hasher struct {
	pepper []byte
	// compact reports whether the pepper is in the compact form, whose
	// names are base64url rather than hex.
	compact bool
	// states recycles HMAC states keyed with the pepper, with their
	// buffers: keying one costs two SHA-256 blocks and several
	// allocations, Reset only a copy.
	states sync.Pool
	// memo holds recent hashes: a value's set is chosen by seed.
	seed maphash.Seed
	memo []memoSet
	// narrow masks the value hash: all ones, or in tests nothing, which
	// puts every input in one set under one tag.
	narrow uint64
}

// The memo's shape: memoSets sets of memoWays entries, and the longest
// input (purpose, zero byte and value) it holds, which bounds the size of
// an entry.
const (
	memoSets  = 4096
	memoWays  = 4
	memoMaxIn = 255
)

// A memoSet holds up to memoWays hashes. Each entry is immutable,
// published by an atomic store and never written after it: the input
// (purpose, zero byte and value) and the name of its hash. A
// reader loads an entry, compares the input it holds with its own and, if
// they are equal, returns the name, which is the string the HMAC gave.
//
// tags holds 16 bits of the value hash of each entry, so that a lookup
// reads only the entries that may match. A tag is a hint, written apart
// from its entry: it may be stale for a moment, which costs a hash, never
// a wrong answer, since every hit compares the whole input.
//
// An input is remembered on its second miss, not its first: seen holds the
// tags of the last four inputs of the set that missed once. An input
// never seen again (every key distinct) so costs one more load and store
// and a hash string of the usual size; an entry is a larger string, its
// memoEntry and two more stores. A second miss replaces the set's entries in turn (next).
// seen and next are read and written without a read-modify-write: two
// misses at once in one set may lose an update, which delays an entry or
// replaces one entry twice, never more.
//
// No lock: a hit is two atomic loads and a comparison. The bound is exact:
// 4,096 sets of 4 places, one entry a place.
type memoSet struct {
	ents [memoWays]atomic.Pointer[memoEntry]
	tags atomic.Uint64
	seen atomic.Uint64
	next atomic.Uint32
	_    [64 - memoWays*8 - 8 - 8 - 4]byte // one set per cache line
}

// A memoEntry is one remembered hash: in is the input (purpose, zero byte
// and value) and name the name of its hash, the two parts of one string,
// so that an entry is two allocations.
type memoEntry struct {
	in, name string
}

// state is one HMAC keyed with the pepper and the buffers a hash needs, so
// that a hash allocates only the string it returns.
type state struct {
	mac  hash.Hash
	in   []byte
	sum  [sha256.Size]byte
	name [2 * sha256.Size]byte // room for the longer form of a name
}

// New returns a Hasher keyed with pepper, naming values in the form the
// pepper chooses (see the package documentation). The caller checks the
// pepper's length; New keeps its own copy.
func New(pepper []byte) *Hasher {
	h := &Hasher{
		pepper:  append([]byte(nil), pepper...),
		compact: strings.HasPrefix(string(pepper), CompactPrefix),
		seed:    maphash.MakeSeed(),
		memo:    make([]memoSet, memoSets),
		narrow:  ^uint64(0),
	}
	h.states.New = func() any { return &state{mac: hmac.New(sha256.New, h.pepper)} }
	return h
}

// Hash returns the name of purpose and value: the HMAC-SHA256, keyed with
// the pepper, of purpose, a zero byte and value, in the form the pepper
// chooses (see the package documentation). A purpose must not contain a
// zero byte. A hash asked for again is answered from the memo.
func (h *Hasher) Hash(purpose, value string) string {
	n := len(purpose) + 1 + len(value)
	if n > memoMaxIn {
		return h.hash(purpose, value)
	}
	// The purpose's length stirs the value's hash, so that one value under
	// the two purposes (a partition and a key of the same name) takes two
	// sets. Either way, an entry matches only on its whole input.
	vh := (maphash.String(h.seed, value) ^ uint64(len(purpose))*0x9e3779b97f4a7c15) & h.narrow
	set := &h.memo[vh%memoSets]
	tag := vh >> 48
	tags := set.tags.Load()
	for i := range memoWays {
		if tags>>(16*i)&0xffff != tag {
			continue
		}
		if e := set.ents[i].Load(); e != nil && len(e.in) == n {
			if e.in[:len(purpose)] == purpose && e.in[len(purpose)] == 0 && e.in[len(purpose)+1:] == value {
				return e.name
			}
		}
	}
	seen := set.seen.Load()
	if seen&0xffff != tag && seen>>16&0xffff != tag && seen>>32&0xffff != tag && seen>>48 != tag {
		set.seen.Store(seen<<16 | tag)
		return h.hash(purpose, value)
	}
	st := h.states.Get().(*state)
	st.mac.Reset()
	st.in = append(append(append(st.in[:0], purpose...), 0), value...)
	st.mac.Write(st.in)
	st.in = h.appendName(st.in, st.mac.Sum(st.sum[:0]))
	s := string(st.in)
	h.states.Put(st)
	e := &memoEntry{in: s[:n], name: s[n:]}
	i := set.next.Load() % memoWays
	set.next.Store(i + 1)
	set.ents[i].Store(e)
	for {
		old := set.tags.Load()
		if set.tags.CompareAndSwap(old, old&^(0xffff<<(16*i))|tag<<(16*i)) {
			break
		}
	}
	return e.name
}

// hash is Hash without the memo: for an input too long for it, and for an
// input's first miss.
func (h *Hasher) hash(purpose, value string) string {
	st := h.states.Get().(*state)
	st.mac.Reset()
	st.in = append(append(append(st.in[:0], purpose...), 0), value...)
	st.mac.Write(st.in)
	out := string(h.appendName(st.name[:0], st.mac.Sum(st.sum[:0])))
	if cap(st.in) > maxKept {
		st.in = nil // a rare long value: let its buffer go
	}
	h.states.Put(st)
	return out
}

// appendName appends the name of MAC sum to dst, in the pepper's form.
func (h *Hasher) appendName(dst, sum []byte) []byte {
	if h.compact {
		return base64.RawURLEncoding.AppendEncode(dst, sum[:compactBytes])
	}
	return hex.AppendEncode(dst, sum)
}

// maxKept bounds the input buffer a pooled state keeps between hashes.
const maxKept = 1 << 10

// Step returns a copy of the step of partition and cmds with the partition
// name and every key hashed. Values, lease ids and numbers are data and
// stay as they are. cmds is not modified.
func (h *Hasher) Step(partition string, cmds []engine.Command) engine.Step {
	var a arrays
	a.count(cmds)
	a.reuse()
	return h.step(partition, cmds, &a)
}

// Scratch holds the backing arrays of the copies StepsIn makes, so that
// they are reused: a copy made in a Scratch is valid until the Scratch is
// used again or reset. Its zero value is ready to use.
type Scratch struct {
	a     arrays
	steps []engine.Step
}

// Reset drops the copies made in sc, and with them every reference they
// hold to the values copied, keeping the arrays for the next copy.
func (sc *Scratch) Reset() {
	clear(sc.steps[:cap(sc.steps)])
	clear(sc.a.cmds[:cap(sc.a.cmds)])
	clear(sc.a.windows[:cap(sc.a.windows)])
	clear(sc.a.budgets[:cap(sc.a.budgets)])
}

// StepsIn returns a copy of steps with every partition name and key
// hashed (see Step), made in sc: once sc's arrays have grown to a
// request's size, hashing another of that size allocates nothing. The copy
// is valid until sc is used again or reset.
func (h *Hasher) StepsIn(sc *Scratch, steps []engine.Step) []engine.Step {
	a := &sc.a
	a.nc, a.nw, a.nb = 0, 0, 0
	for i := range steps {
		a.count(steps[i].Commands)
	}
	a.reuse()
	if cap(sc.steps) < len(steps) {
		sc.steps = make([]engine.Step, len(steps))
	}
	out := sc.steps[:len(steps)]
	for i := range steps {
		out[i] = h.step(steps[i].Partition, steps[i].Commands, a)
	}
	return out
}

// arrays holds the backing arrays of the commands, windows and budgets
// that the copies of some steps take their slices from: three allocations
// for a request, rather than one for each command's windows. Each slice
// taken is capped at its length, so that appending to one copy never
// writes into another.
type arrays struct {
	cmds       []engine.Command
	windows    []engine.Window
	budgets    []engine.Budget
	nc, nw, nb int // what count counted
}

// count adds the commands, windows and budgets of cmds to those the
// arrays are to hold.
func (a *arrays) count(cmds []engine.Command) {
	a.nc += len(cmds)
	for i := range cmds {
		a.nw += len(cmds[i].Windows)
		a.nb += len(cmds[i].Budgets)
	}
}

// reuse empties the arrays for what count counted, making those without
// room for it (every one, the first time).
func (a *arrays) reuse() {
	a.cmds = grown(a.cmds, a.nc)
	a.windows = grown(a.windows, a.nw)
	a.budgets = grown(a.budgets, a.nb)
}

// grown returns s emptied, or a new slice if s has no room for n.
func grown[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, 0, n)
	}
	return s[:0]
}

// step is Step, its copies taken from a.
func (h *Hasher) step(partition string, cmds []engine.Command, a *arrays) engine.Step {
	first := len(a.cmds)
	for _, cmd := range cmds {
		if cmd.Key != "" {
			cmd.Key = h.Hash(PurposeKey, cmd.Key)
		}
		if cmd.Receipt != "" {
			cmd.Receipt = h.Hash(PurposeKey, cmd.Receipt)
		}
		if len(cmd.Windows) > 0 {
			start := len(a.windows)
			for _, w := range cmd.Windows {
				w.Key = h.Hash(PurposeKey, w.Key)
				a.windows = append(a.windows, w)
			}
			cmd.Windows = a.windows[start:len(a.windows):len(a.windows)]
		}
		if len(cmd.Budgets) > 0 {
			start := len(a.budgets)
			for _, b := range cmd.Budgets {
				b.Key = h.Hash(PurposeKey, b.Key)
				a.budgets = append(a.budgets, b)
			}
			cmd.Budgets = a.budgets[start:len(a.budgets):len(a.budgets)]
		}
		a.cmds = append(a.cmds, cmd)
	}
	return engine.Step{Partition: h.Hash(PurposePartition, partition), Commands: a.cmds[first:len(a.cmds):len(a.cmds)]}
}

// Store is an engine.Store that hashes every batch's partition name and
// keys before handing it to the store it wraps: over a server's own store,
// it reaches exactly the records that clients sharing its pepper reach
// through the RPC.
type Store struct {
	inner engine.Store
	h     *Hasher
}

var _ engine.Store = (*Store)(nil)

// NewStore returns inner seen through h.
func NewStore(inner engine.Store, h *Hasher) *Store { return &Store{inner: inner, h: h} }

// Apply hashes b and runs it on the wrapped store. A batch carrying a replay
// record is identified by the hash of its hashed step, as the server
// identifies a client's.
func (s *Store) Apply(ctx context.Context, b *engine.Batch, out *engine.StepResult) error {
	st := s.h.Step(b.Partition, b.Commands)
	hb := engine.Batch{Partition: st.Partition, Commands: st.Commands, OperationID: b.OperationID, Step: b.Step}
	if b.OperationID != "" {
		sum, err := st.Hash()
		if err != nil {
			return err
		}
		hb.Hash = sum
	}
	return s.inner.Apply(ctx, &hb, out)
}

// Close does nothing: the wrapped store belongs to its owner, who closes
// it.
func (s *Store) Close() error { return nil }
