package engine

import (
	"context"
	"time"
)

// Store runs batches. A batch runs atomically on its partition: all of its
// effects or none, with no other batch on the same partition interleaved.
//
// Apply receives only batches that passed Batch.Validate (Engine.Do
// validates before calling it) and writes the step's outcome into out,
// reusing out.Results' capacity, so a caller that reuses out allocates
// nothing. A denial is a result, not an error. An error means the batch had
// no effect, except ErrUnavailable, after which the outcome is unknown.
// Without an error, out holds one result per command, in order; the Engine
// answers ErrCorrupt for a store that answers otherwise.
//
// A store keeps no reference to the Batch (or its Commands) after Apply
// returns: the engine recycles it.
//
// Every store takes time from one clock of its own (never the caller's) and
// passes store/storetest.
type Store interface {
	Apply(ctx context.Context, b *Batch, out *StepResult) error
	// Close releases the store. Later calls fail with ErrClosed.
	Close() error
}

// DeferredSyncStore is implemented by a store whose commits wait for an
// fsync (the embedded store under its default policy) and that can run a
// batch without that wait. Engine.Do uses it for a request of several
// steps: every step runs with ApplyDeferred and the request waits once, at
// its end, with Sync, so n steps cost one fsync wait instead of n in a row.
// No answer rests on state a crash could lose: Do answers only after Sync.
type DeferredSyncStore interface {
	Store
	// ApplyDeferred is Apply, except that it may return before the batch's
	// effects, and the state it read, are durable.
	ApplyDeferred(ctx context.Context, b *Batch, out *StepResult) error
	// Sync returns once every batch whose ApplyDeferred returned before
	// the call is durable, with the state it read; an error wraps
	// ErrUnavailable (or is ErrClosed), and then those batches' outcome is
	// unknown.
	Sync(ctx context.Context) error
}

// MaxJointBatches is the most batches one joint step runs (JointStore).
const MaxJointBatches = 4

// JointStore is implemented by a store that can run batches on several
// partitions as one atomic step (the embedded store, memstore, and Redis
// on one node). A server uses it for its own state spread over partitions
// (admission charges a fair RPC's source and its principal, which live in
// different partitions, together): one commit instead of one per
// partition, and nothing to give back when one of them refuses.
// Engine.ApplyReservedJointDeferred uses it; a caller falls back to one
// batch per partition on a store that does not implement it, or whose
// Joins reports false.
type JointStore interface {
	Store
	// Joins reports whether the store runs joint steps as it is deployed:
	// the Redis store does on one node (or behind Sentinel), not across a
	// cluster, where one partition's keys on one slot cannot share a
	// script with another's. It does not change over the store's life.
	Joins() bool
	// ApplyJoint runs bs, at most MaxJointBatches, each on a partition of
	// its own, as one atomic step: no other batch on any of their
	// partitions is interleaved, every batch is evaluated against the
	// state before the step, and either the writes of every batch commit
	// together or, when any batch holds a denied command
	// (StepResult.Denied), none do. outs[i] receives bs[i]'s outcome as
	// evaluated, so a batch reported allowed did not commit when another
	// was denied. The batches carry no operation id. An error means the
	// step had no effect, except ErrUnavailable, after which the outcome
	// is unknown; a partition named twice is ErrInvalid.
	//
	// On a DeferredSyncStore ApplyJoint is deferred: it may return before
	// the step's effects, and the state it read, are durable, and the
	// caller calls Sync before it answers anything that rests on them.
	ApplyJoint(ctx context.Context, bs []*Batch, outs []StepResult) error
}

// CheckJoint checks the shape of a joint step as a JointStore receives it:
// at most MaxJointBatches batches, each on a partition of its own, and a
// result for each. An empty step is valid and runs nothing. It returns an
// error wrapping ErrInvalid.
func CheckJoint(bs []*Batch, outs []StepResult) error {
	n := len(bs)
	if n > MaxJointBatches || len(outs) < n {
		return invalid("a joint step of %d batches with %d results (at most %d batches)", n, len(outs), MaxJointBatches)
	}
	for i, b := range bs {
		for _, o := range bs[:i] {
			if o.Partition == b.Partition {
				return invalid("partition %q named twice in a joint step", b.Partition)
			}
		}
	}
	return nil
}

// Batch is one step as a store sees it.
type Batch struct {
	Partition string
	Commands  []Command
	// OperationID and Step name the batch's replay record; Hash identifies
	// its commands (see Step.Hash). With an empty OperationID the batch
	// records nothing.
	OperationID string
	Step        int
	Hash        [32]byte
}

// Validate checks the batch's bounds (see Step.Validate).
func (b *Batch) Validate() error {
	s := Step{Partition: b.Partition, Commands: b.Commands}
	return s.Validate()
}

// Clock is a store's time authority. Stores read it once per batch.
type Clock interface {
	Now() time.Time
}

// SystemClock is the wall clock.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// UnixMilli returns c's current time in Unix milliseconds, the unit of every
// instant in the engine.
func UnixMilli(c Clock) int64 { return c.Now().UnixMilli() }

// RemoteStore is implemented by a store whose calls are round trips over
// the network (Redis, a Sluice server through its client). A caller with
// several independent requests to run gains by running them concurrently,
// as their round trips then overlap; on any other store they are work for
// the CPU, done as well one after another and without a goroutine each.
type RemoteStore interface {
	Store
	// Remote does nothing: it marks the store.
	Remote()
}

// RequestStore is implemented by a store that runs whole requests itself,
// such as a remote server reached in one round trip. Engine.Do hands it the
// validated request instead of calling Apply step by step; it must give the
// same results (sequential skipping, replay records under the request's
// operation id and step indexes), with one exception: when a step fails, it
// may return the error with no results at all, where Engine.Do over a
// local store also returns those of the steps before it. Their effects
// stand either way.
type RequestStore interface {
	Store
	Do(ctx context.Context, r *Request) (*Response, error)
}
