package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
)

// reservedMark begins the name of every reserved partition.
const reservedMark = "\x00"

// ReservedPartition returns the name of a partition that only code holding
// the Engine can reach: requests can never name it, because Validate
// rejects a partition starting with a NUL byte. Servers keep their own state
// (the stop fence, admission counters) in reserved partitions of the same
// store as their callers' data.
func ReservedPartition(name string) string { return reservedMark + name }

// ApplyReserved is Apply on a reserved partition (see ReservedPartition).
// The commands are validated as usual.
func (e *Engine) ApplyReserved(ctx context.Context, name string, out *StepResult, cmds ...Command) error {
	return e.ApplyReservedPartition(ctx, ReservedPartition(name), out, cmds...)
}

// ApplyReservedPartition is ApplyReserved given the reserved partition's
// whole name, as ReservedPartition returns it: a caller that builds the
// name on every call can build it reserved, and spare ApplyReserved's copy.
// A partition that is not reserved fails with ErrInvalid.
func (e *Engine) ApplyReservedPartition(ctx context.Context, partition string, out *StepResult, cmds ...Command) error {
	return e.applyReserved(ctx, partition, out, false, cmds)
}

// ApplyReservedPartitionDeferred is ApplyReservedPartition, except that on
// a DeferredSyncStore it may return before the batch's effects, and the
// state it read, are durable: the caller calls Sync before it answers
// anything that rests on them. On any other store it is
// ApplyReservedPartition.
func (e *Engine) ApplyReservedPartitionDeferred(ctx context.Context, partition string, out *StepResult, cmds ...Command) error {
	_, deferred := e.store.(DeferredSyncStore)
	return e.applyReserved(ctx, partition, out, deferred, cmds)
}

func (e *Engine) applyReserved(ctx context.Context, partition string, out *StepResult, deferred bool, cmds []Command) error {
	name, ok := strings.CutPrefix(partition, reservedMark)
	if !ok {
		return invalid("partition %q is not reserved", partition)
	}
	s := Step{Partition: name, Commands: cmds}
	if err := s.Validate(); err != nil {
		return err
	}
	b := Batch{Partition: partition, Commands: cmds}
	return e.apply(ctx, &b, out, deferred) // a pooled copy: b would escape to the heap
}

// Joins reports whether e's store runs joint steps (JointStore), so that
// ApplyReservedJointDeferred does not answer errors.ErrUnsupported.
func (e *Engine) Joins() bool {
	js, ok := e.store.(JointStore)
	return ok && js.Joins()
}

// ApplyReservedJointDeferred runs steps as one atomic step on a
// JointStore: each step's commands on its reserved partition (the whole
// name, as ReservedPartition returns it), the partitions all distinct;
// either every step's writes commit or, when any step holds a denied
// command, none do. outs[i] receives steps[i]'s outcome as evaluated (see
// JointStore.ApplyJoint); outs must be at least as long as steps. Like
// ApplyReservedPartitionDeferred it may return before the effects, and the
// state they read, are durable: the caller calls Sync before it answers
// anything that rests on them.
//
// On a store that is not a JointStore it runs nothing and returns an error
// wrapping errors.ErrUnsupported: the caller runs the steps one by one.
func (e *Engine) ApplyReservedJointDeferred(ctx context.Context, steps []Step, outs []StepResult) error {
	js, ok := e.store.(JointStore)
	if !ok || !js.Joins() {
		return fmt.Errorf("engine: joint steps on %T: %w", e.store, errors.ErrUnsupported)
	}
	if len(steps) == 0 || len(steps) > MaxJointBatches {
		return invalid("a joint step of %d batches: want 1…%d", len(steps), MaxJointBatches)
	}
	if len(outs) < len(steps) {
		return invalid("%d results for a joint step of %d batches", len(outs), len(steps))
	}
	for i := range steps {
		name, ok := strings.CutPrefix(steps[i].Partition, reservedMark)
		if !ok {
			return invalid("partition %q is not reserved", steps[i].Partition)
		}
		s := Step{Partition: name, Commands: steps[i].Commands}
		if err := s.Validate(); err != nil {
			return err
		}
		for j := range i {
			if steps[j].Partition == steps[i].Partition {
				return invalid("partition %q named twice in a joint step", steps[i].Partition)
			}
		}
	}
	j := joints.Get().(*joint)
	for i := range steps {
		j.batches[i] = Batch{Partition: steps[i].Partition, Commands: steps[i].Commands}
		j.ptrs[i] = &j.batches[i]
	}
	err := js.ApplyJoint(ctx, j.ptrs[:len(steps)], outs[:len(steps)])
	*j = joint{} // hold no reference to the caller's commands while pooled
	joints.Put(j)
	for i := 0; err == nil && i < len(steps); i++ {
		if err = checkResults(&outs[i], len(steps[i].Commands)); err != nil {
			err = fmt.Errorf("joint batch %d: %w", i, err)
		}
	}
	return err
}

// joint holds the batches of one joint step: pooled, for the reason apply
// pools a Batch.
type joint struct {
	batches [MaxJointBatches]Batch
	ptrs    [MaxJointBatches]*Batch
}

var joints = sync.Pool{New: func() any { return new(joint) }}
