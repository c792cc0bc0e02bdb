package redisstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/sluicehq/sluice/engine"
)

// Joint steps. On one node (or one primary behind Sentinel) the batches of
// a joint step run as one call of the batch code, each on its own
// partition's keys: every batch is evaluated against the state before the
// step, and the writes of all of them are issued, or none are when any is
// denied (engine.JointStore). A server charges a fair RPC's source and
// principal that way: one round trip, nothing to refund. Across a cluster
// the partitions' keys lie on different slots, which no script may span
// (CROSSSLOT), and across a Ring's shards a script would write keys on the
// wrong shard, so a store on either runs no joint steps (Joins).

// jointFormat is ARGV[1] of a joint step (JOINT in lua/prelude.lua).
const jointFormat = "joint 1"

// Joins reports whether the store runs joint steps: on one node or behind
// Sentinel, not on a cluster nor a Ring. See engine.JointStore.
func (s *Store) Joins() bool { return s.joins }

// ApplyJoint runs bs, each on a partition of its own and without an
// operation id, as one atomic step: one call of the batch code. See
// engine.JointStore. On a cluster or a Ring it runs nothing and returns an error
// wrapping errors.ErrUnsupported. On error outs hold no results.
func (s *Store) ApplyJoint(ctx context.Context, bs []*engine.Batch, outs []engine.StepResult) error {
	n := len(bs)
	if err := engine.CheckJoint(bs, outs); err != nil || n == 0 {
		return err
	}
	if !s.joins {
		return fmt.Errorf("redisstore: joint steps across a cluster's slots or a Ring's shards: %w", errors.ErrUnsupported)
	}
	for _, b := range bs {
		if b.OperationID != "" {
			return fmt.Errorf("%w: a batch of a joint step carries an operation id", engine.ErrInvalid)
		}
	}
	for i := range n {
		resetStep(&outs[i])
	}
	if s.closed.Load() {
		return engine.ErrClosed
	}

	var parts [engine.MaxJointBatches]*call
	defer func() {
		for _, p := range parts[:n] {
			if p != nil {
				p.clear()
				s.calls.Put(p)
			}
		}
	}()
	for i, b := range bs {
		parts[i] = s.calls.Get().(*call)
		if err := parts[i].encode(b, &s.cfg, false); err != nil {
			return fmt.Errorf("batch %d: %w", i, err)
		}
	}
	c := s.calls.Get().(*call)
	c.join(parts[:n])
	reply, err := s.send(ctx, c)
	if err != nil {
		return err
	}
	if err := decodeJoint(reply, bs, outs); err != nil {
		for i := range n {
			resetStep(&outs[i])
		}
		return err
	}
	return nil
}

// join fills c with the joint step of the batches encoded in parts (see
// joint in lua/batch.lua): the keys of each in turn, and the arguments
// JOINT, the clock, the number of batches, then for each batch the
// numbers of its keys and arguments and its arguments.
func (c *call) join(parts []*call) {
	c.clear()
	c.args = append(c.args, jointFormat, parts[0].args[1], len(parts))
	for _, p := range parts {
		c.keys = append(c.keys, p.keys...)
		c.args = append(c.args, len(p.keys), len(p.args))
		c.args = append(c.args, p.args...)
	}
}

// decodeJoint decodes the reply of a joint step into outs (reset by the
// caller): {0, denied, each batch's reply}, or {code, command, message,
// batch} when a command of a batch failed and nothing was written. Every
// element is checked, as decodeReply checks a batch's.
func decodeJoint(v any, bs []*engine.Batch, outs []engine.StepResult) error {
	arr, code, err := replyStatus(v)
	if err != nil {
		return err
	}
	if code != 0 {
		if len(arr) != 4 {
			return replyError("joint failure %d with %d elements", code, len(arr))
		}
		i, ok := arr[3].(int64)
		if !ok || i < 1 || i > int64(len(bs)) {
			return replyError("joint failure %d in batch %v of %d", code, arr[3], len(bs))
		}
		return decodeFailure(code, arr[:3], bs[i-1])
	}
	if len(arr) != 2+len(bs) {
		return replyError("%d elements for a joint step of %d batches", len(arr), len(bs))
	}
	denied, err := boolean(arr[1])
	if err != nil {
		return replyError("denied: %v", err)
	}
	some := false
	for i, b := range bs {
		if err := decodeReply(arr[2+i], b, &outs[i]); err != nil {
			return err
		}
		some = some || outs[i].Denied
	}
	if some != denied {
		return replyError("a joint step denied %v with batches denied %v", denied, some)
	}
	return nil
}
