package memstore

import (
	"context"
	"hash/maphash"
	"slices"
	"sync"

	"github.com/sluicehq/sluice/engine"
)

// Joint steps. A server charges a fair RPC's source and its principal,
// which live in partitions of their own, in one joint step, so that both
// charges commit together or neither does (engine.JointStore). The store
// locks every shard the step's partitions hash to, in the order of the
// shards, so two joint steps never wait for each other in a cycle; and a
// plain batch takes only its own shard's lock. With the locks held it
// evaluates every batch against the state before the step, and commits
// all their writes only if none was denied.

// joint is the working state of one joint step: pooled, since a server
// makes one for every fair RPC its quota leases do not cover.
type joint struct {
	views  [engine.MaxJointBatches]view
	execs  [engine.MaxJointBatches]engine.Executor
	rs     [engine.MaxJointBatches]reservation
	fast   [engine.MaxJointBatches]bool   // the batch was evaluated as a reservation (rs)
	cs     [engine.MaxJointBatches]change // the batches' writes (none if fast)
	shards [engine.MaxJointBatches]uint64 // the shards' indexes: distinct, in the order they are locked
}

var joints = sync.Pool{New: func() any { return new(joint) }}

// Joins reports true: memstore runs joint steps. See engine.JointStore.
func (*Store) Joins() bool { return true }

// ApplyJoint runs bs, each on a partition of its own, as one atomic step.
// See engine.JointStore.
func (s *Store) ApplyJoint(ctx context.Context, bs []*engine.Batch, outs []engine.StepResult) error {
	n := len(bs)
	if err := engine.CheckJoint(bs, outs); err != nil || n == 0 {
		return err
	}
	if s.closed.Load() {
		return engine.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}

	j := joints.Get().(*joint)
	defer func() {
		for i := range n {
			j.views[i].reset(nil, "", 0) // hold no reference to the caller's strings
		}
		j.rs, j.cs = [engine.MaxJointBatches]reservation{}, [engine.MaxJointBatches]change{}
		joints.Put(j)
	}()
	shards := j.shards[:0]
	for i, b := range bs {
		phash := maphash.String(s.seed, b.Partition)
		j.views[i].reset(&s.shards[phash&s.mask], b.Partition, phash)
		if !slices.Contains(shards, phash&s.mask) {
			shards = append(shards, phash&s.mask)
		}
	}
	slices.Sort(shards)
	for _, k := range shards {
		s.shards[k].mu.Lock()
	}
	defer func() {
		for _, k := range slices.Backward(shards) {
			s.shards[k].mu.Unlock()
		}
	}()

	now := engine.UnixMilli(s.clock)
	left := SweepBatch // what the step's sweeps may still remove
	for _, k := range shards {
		if sh := &s.shards[k]; now >= sh.nextExpiry && now >= sh.pausedUntil {
			left -= s.sweep(sh, now, false, left)
		}
	}
	denied := false
	for i, b := range bs {
		v := &j.views[i]
		v.forget() // a sweep may have removed what it remembers
		j.fast[i] = reserveShape(b) && !s.noFastPath && j.rs[i].evaluate(v, b, now, &outs[i])
		if !j.fast[i] {
			writes, err := j.execs[i].Run(v, now, b, &outs[i])
			if err != nil {
				return err
			}
			j.cs[i] = change{v, writes}
		}
		denied = denied || outs[i].Denied
	}
	if denied {
		return nil
	}
	// The reservations create no keys; the other batches' writes may. To
	// make room reserveKeys sweeps the shards of the changes it is given
	// (sweepOthers skips the shards this step holds), so it is given every
	// batch, writing or not.
	writes := false
	for i := range n {
		j.cs[i].v = &j.views[i]
		writes = writes || len(j.cs[i].writes) > 0
	}
	if writes {
		if err := s.reserveKeys(now, left, j.cs[:n]); err != nil {
			return err
		}
	}
	for i := range n {
		switch {
		case j.fast[i]:
			j.rs[i].commit(j.views[i].sh)
		case len(j.cs[i].writes) > 0:
			// Another batch's commit on the same shard may have changed
			// the chain this view remembers.
			j.views[i].forget()
			s.commit(&j.views[i], j.cs[i].writes)
		}
	}
	return nil
}
