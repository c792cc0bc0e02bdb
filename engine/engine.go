package engine

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"
)

// Engine runs requests on a Store. It validates every request before the
// store sees it, runs the steps in order, skips the rest of a sequential
// request after a denial, and names each step's replay record.
//
// An Engine is safe for concurrent use; it holds no state of its own.
type Engine struct {
	store Store
}

// New returns an Engine running on s.
func New(s Store) *Engine { return &Engine{store: s} }

// Store returns the store e runs on.
func (e *Engine) Store() Store { return e.store }

// Do validates r and runs its steps. On error the response holds the steps
// that completed before the failing one; the error names the failing step.
func (e *Engine) Do(ctx context.Context, r *Request) (*Response, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	if rs, ok := e.store.(RequestStore); ok {
		return rs.Do(ctx, r)
	}
	resp := &Response{Steps: make([]StepResult, len(r.Steps))}
	denied := false
	for i := range r.Steps {
		st := &r.Steps[i]
		if denied && r.Mode != All {
			resp.Steps[i].Skipped = true
			continue
		}
		b := Batch{Partition: st.Partition, Commands: st.Commands, OperationID: r.OperationID, Step: i}
		if r.OperationID != "" {
			h, err := st.Hash()
			if err != nil {
				return nil, err
			}
			b.Hash = h
		}
		if err := e.apply(ctx, &b, &resp.Steps[i]); err != nil {
			resp.Steps = resp.Steps[:i]
			return resp, fmt.Errorf("step %d: %w", i, err)
		}
		denied = denied || resp.Steps[i].Denied
	}
	return resp, nil
}

// Apply validates and runs one batch on one partition, without a replay
// record, writing the outcome into out (whose capacity it reuses). It is the
// allocation-free path for a single step: pass the same out and the same
// cmds slice on every call.
func (e *Engine) Apply(ctx context.Context, partition string, out *StepResult, cmds ...Command) error {
	b := Batch{Partition: partition, Commands: cmds}
	if err := b.Validate(); err != nil {
		return err
	}
	return e.apply(ctx, &b, out)
}

// apply hands a copy of b to the store. The store is called through an
// interface, so the compiler cannot prove that it keeps no pointer to the
// Batch it is given, and would move a caller's Batch to the heap on every
// call; a pooled copy keeps Apply free of allocations. A store keeps no
// reference to a Batch after its Apply returns.
func (e *Engine) apply(ctx context.Context, b *Batch, out *StepResult) error {
	pb := batches.Get().(*Batch)
	*pb = *b
	err := e.store.Apply(ctx, pb, out)
	*pb = Batch{} // hold no reference to the caller's commands while pooled
	batches.Put(pb)
	return err
}

var batches = sync.Pool{New: func() any { return new(Batch) }}

// NewOperationID returns a fresh random operation id: 128 bits, hex.
func NewOperationID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go ≥ 1.24)
	return hex.EncodeToString(b[:])
}
