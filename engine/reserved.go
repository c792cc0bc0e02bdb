package engine

import "context"

// ReservedPartition returns the name of a partition that only code holding
// the Engine can reach: requests can never name it, because Validate
// rejects a partition starting with a NUL byte. Servers keep their own state
// (the stop fence, admission counters) in reserved partitions of the same
// store as their callers' data.
func ReservedPartition(name string) string { return "\x00" + name }

// ApplyReserved is Apply on a reserved partition (see ReservedPartition).
// The commands are validated as usual.
func (e *Engine) ApplyReserved(ctx context.Context, name string, out *StepResult, cmds ...Command) error {
	b := Batch{Partition: ReservedPartition(name), Commands: cmds}
	s := Step{Partition: name, Commands: cmds}
	if err := s.Validate(); err != nil {
		return err
	}
	return e.apply(ctx, &b, out, false) // a pooled copy: b would escape to the heap
}
