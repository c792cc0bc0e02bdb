package engine

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
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
// On a DeferredSyncStore a request of several steps waits for one Sync
// before it returns; if that fails, the response holds no step and the
// error wraps ErrUnavailable.
func (e *Engine) Do(ctx context.Context, r *Request) (*Response, error) {
	return e.do(ctx, r, false)
}

// DoDeferred is Do, except that on a DeferredSyncStore every step of r,
// even a single one, runs without waiting for its fsync, and DoDeferred
// does not wait either: the caller calls Sync before it answers anything
// that rests on r, whether DoDeferred succeeded or failed, and answers no
// grant if Sync fails. A server that already wrote deferred state of its
// own for the request (admission's charges) so waits for one fsync for
// all of it. On any other store DoDeferred is Do.
func (e *Engine) DoDeferred(ctx context.Context, r *Request) (*Response, error) {
	return e.do(ctx, r, true)
}

// Sync returns once every batch the engine ran deferred (DoDeferred,
// ApplyReservedPartitionDeferred) before the call is durable, with the
// state it read; an error wraps ErrUnavailable (or is ErrClosed). On a
// store that is not a DeferredSyncStore, every batch is already as durable
// as the store makes it when it returns, and Sync does nothing.
func (e *Engine) Sync(ctx context.Context) error {
	if ds, ok := e.store.(DeferredSyncStore); ok {
		return ds.Sync(ctx)
	}
	return nil
}

// Remote reports whether e's store is a RemoteStore.
func (e *Engine) Remote() bool {
	_, ok := e.store.(RemoteStore)
	return ok
}

// do runs r; leave leaves the Sync of its deferred steps to the caller
// (DoDeferred), who then defers a single step too.
func (e *Engine) do(ctx context.Context, r *Request, leave bool) (*Response, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	if rs, ok := e.store.(RequestStore); ok {
		resp, err := rs.Do(ctx, r)
		if err == nil {
			err = checkResponse(r, resp)
		}
		return resp, err
	}
	resp := &Response{Steps: make([]StepResult, len(r.Steps))}
	// A request of several steps on a store that can defer its fsyncs runs
	// every step without waiting for its own, then waits once for all (or
	// leaves that wait to the caller, for any number of steps).
	ds, deferred := e.store.(DeferredSyncStore)
	deferred = deferred && (len(r.Steps) > 1 || leave)
	pending := false // a deferred step has run: Sync before answering
	denied := false
	var room resultRoom
	for i := range r.Steps {
		st := &r.Steps[i]
		if denied && r.Mode != All {
			resp.Steps[i].Skipped = true
			continue
		}
		resp.Steps[i].Results = room.take(r, i)
		b := Batch{Partition: st.Partition, Commands: st.Commands, OperationID: r.OperationID, Step: i}
		if r.OperationID != "" {
			h, err := st.Hash()
			if err != nil {
				return nil, e.settle(ctx, ds, pending, err)
			}
			b.Hash = h
		}
		if err := e.apply(ctx, &b, &resp.Steps[i], deferred); err != nil {
			resp.Steps = resp.Steps[:i]
			err = fmt.Errorf("step %d: %w", i, err)
			if serr := e.settle(ctx, ds, pending, nil); serr != nil {
				resp.Steps, err = resp.Steps[:0], errors.Join(err, serr)
			}
			return resp, err
		}
		pending = pending || (deferred && !leave)
		denied = denied || resp.Steps[i].Denied
	}
	if err := e.settle(ctx, ds, pending, nil); err != nil {
		return &Response{}, err
	}
	return resp, nil
}

// resultRoom holds the results of a request's steps, and their windows, in
// one slice each, made when the first step runs: a step's Executor then
// fills the room it is given instead of growing a slice for every step
// and another for every window of every hit (a request of 4 steps of 8
// hits made 48 such slices).
type resultRoom struct {
	results []Result
	windows []WindowResult
}

// take returns the empty room for the results of step i of r, each result
// with room for its command's windows.
func (m *resultRoom) take(r *Request, i int) []Result {
	if m.results == nil {
		nr, nw := 0, 0
		for j := range r.Steps {
			nr += len(r.Steps[j].Commands)
			for k := range r.Steps[j].Commands {
				nw += len(r.Steps[j].Commands[k].Windows)
			}
		}
		m.results = make([]Result, nr)
		m.windows = make([]WindowResult, nw)
	}
	cmds := r.Steps[i].Commands
	res := m.results[:len(cmds):len(cmds)]
	for j := range cmds {
		if n := len(cmds[j].Windows); n > 0 {
			res[j].Windows = m.windows[:0:n]
			m.windows = m.windows[n:]
		}
	}
	m.results = m.results[len(cmds):]
	return res[:0]
}

// checkResponse holds a RequestStore's answer to the shape of r: one
// result per step, and one per command of every step that ran.
func checkResponse(r *Request, resp *Response) error {
	if resp == nil || len(resp.Steps) != len(r.Steps) {
		n := 0
		if resp != nil {
			n = len(resp.Steps)
		}
		return fmt.Errorf("%w: the store answered %d steps for %d", ErrCorrupt, n, len(r.Steps))
	}
	for i := range resp.Steps {
		if resp.Steps[i].Skipped {
			continue
		}
		if err := checkResults(&resp.Steps[i], len(r.Steps[i].Commands)); err != nil {
			return fmt.Errorf("step %d: %w", i, err)
		}
	}
	return nil
}

// settle makes the deferred steps of a request durable, if any ran, and
// returns err, or the failure to make them durable.
func (e *Engine) settle(ctx context.Context, ds DeferredSyncStore, pending bool, err error) error {
	if !pending {
		return err
	}
	if serr := ds.Sync(ctx); serr != nil {
		return errors.Join(err, serr)
	}
	return err
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
	return e.apply(ctx, &b, out, false)
}

// apply hands a copy of b to the store. The store is called through an
// interface, so the compiler cannot prove that it keeps no pointer to the
// Batch it is given, and would move a caller's Batch to the heap on every
// call; a pooled copy keeps Apply free of allocations. A store keeps no
// reference to a Batch after its Apply returns. deferred runs it with
// ApplyDeferred; the store is then a DeferredSyncStore.
func (e *Engine) apply(ctx context.Context, b *Batch, out *StepResult, deferred bool) error {
	pb := batches.Get().(*Batch)
	*pb = *b
	var err error
	if deferred {
		err = e.store.(DeferredSyncStore).ApplyDeferred(ctx, pb, out)
	} else {
		err = e.store.Apply(ctx, pb, out)
	}
	*pb = Batch{} // hold no reference to the caller's commands while pooled
	batches.Put(pb)
	if err == nil {
		err = checkResults(out, len(b.Commands))
	}
	return err
}

// checkResults holds a store to answering one result per command of the
// batch it ran, so that no caller indexing the results can fail on a store
// that does not.
func checkResults(out *StepResult, commands int) error {
	if len(out.Results) != commands {
		return fmt.Errorf("%w: the store answered %d results for %d commands", ErrCorrupt, len(out.Results), commands)
	}
	return nil
}

var batches = sync.Pool{New: func() any { return new(Batch) }}

// NewOperationID returns a fresh random operation id: 128 bits, hex.
func NewOperationID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go ≥ 1.24)
	return hex.EncodeToString(b[:])
}
