package engine

import (
	"context"
	"strings"
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
