// Package keyhash replaces the identifiers of engine requests — partition
// names and keys — with keyed hashes, so that raw identifiers never leave
// the process that holds them.
//
// A value is replaced by the lowercase hex HMAC-SHA256, keyed with a pepper,
// of a purpose, a zero byte and the value. The client package hashes every
// request it sends this way; a server that reaches the same records from
// its own side (the limiter registry of /v1/limiters) wraps its store with
// [NewStore] under the same pepper, so both name the same partitions.
// Hashing in two places with two implementations would let them drift
// apart silently, so both use this one.
package keyhash

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"sync"

	"github.com/sluicehq/sluice/engine"
)

// The purposes of the hashes of a request's identifiers.
const (
	PurposePartition = "partition" // partition names
	PurposeKey       = "key"       // window, kv, budget, receipt, gate and pace keys
)

// Hasher hashes values with one pepper. It is safe for concurrent use.
type Hasher struct {
	pepper []byte
	// states recycles HMAC states keyed with the pepper, with their
	// buffers: keying one costs two SHA-256 blocks and several
	// allocations, Reset only a copy.
	states sync.Pool
}

// state is one HMAC keyed with the pepper and the buffers a hash needs, so
// that a hash allocates only the string it returns.
type state struct {
	mac hash.Hash
	in  []byte
	sum [sha256.Size]byte
	hex [2 * sha256.Size]byte
}

// New returns a Hasher keyed with pepper. The caller checks the pepper's
// length; New keeps its own copy.
func New(pepper []byte) *Hasher {
	h := &Hasher{pepper: append([]byte(nil), pepper...)}
	h.states.New = func() any { return &state{mac: hmac.New(sha256.New, h.pepper)} }
	return h
}

// Hash returns the lowercase hex HMAC-SHA256, keyed with the pepper, of
// purpose, a zero byte and value. A purpose must not contain a zero byte.
func (h *Hasher) Hash(purpose, value string) string {
	st := h.states.Get().(*state)
	st.mac.Reset()
	st.in = append(append(append(st.in[:0], purpose...), 0), value...)
	st.mac.Write(st.in)
	hex.Encode(st.hex[:], st.mac.Sum(st.sum[:0]))
	out := string(st.hex[:])
	if cap(st.in) > maxKept {
		st.in = nil // a rare long value: let its buffer go
	}
	h.states.Put(st)
	return out
}

// maxKept bounds the input buffer a pooled state keeps between hashes.
const maxKept = 1 << 10

// Step returns a copy of the step of partition and cmds with the partition
// name and every key hashed. Values, lease ids and numbers are data and
// stay as they are. cmds is not modified.
func (h *Hasher) Step(partition string, cmds []engine.Command) engine.Step {
	out := make([]engine.Command, len(cmds))
	for j, cmd := range cmds {
		if cmd.Key != "" {
			cmd.Key = h.Hash(PurposeKey, cmd.Key)
		}
		if cmd.Receipt != "" {
			cmd.Receipt = h.Hash(PurposeKey, cmd.Receipt)
		}
		if len(cmd.Windows) > 0 {
			ws := make([]engine.Window, len(cmd.Windows))
			for k, w := range cmd.Windows {
				w.Key = h.Hash(PurposeKey, w.Key)
				ws[k] = w
			}
			cmd.Windows = ws
		}
		if len(cmd.Budgets) > 0 {
			bs := make([]engine.Budget, len(cmd.Budgets))
			for k, b := range cmd.Budgets {
				b.Key = h.Hash(PurposeKey, b.Key)
				bs[k] = b
			}
			cmd.Budgets = bs
		}
		out[j] = cmd
	}
	return engine.Step{Partition: h.Hash(PurposePartition, partition), Commands: out}
}

// Steps returns a copy of steps with every partition name and key hashed
// (see Step).
func (h *Hasher) Steps(steps []engine.Step) []engine.Step {
	out := make([]engine.Step, len(steps))
	for i := range steps {
		out[i] = h.Step(steps[i].Partition, steps[i].Commands)
	}
	return out
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
