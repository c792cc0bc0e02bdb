package diskstore

import (
	"context"

	"github.com/cockroachdb/pebble/v2"

	"github.com/sluicehq/sluice/engine"
)

// A joint step (ApplyJoint) runs batches on several partitions as one
// atomic step: it takes the partitions' locks, in the order of their
// hashes (then names), so that two joint steps never wait for each other
// in a cycle and no round of theirs runs meanwhile; it evaluates each
// batch against its partition's records; and, unless one of them is
// denied, it commits every batch's writes in one Pebble batch, applies
// them to memory and releases the locks. The step does not queue into its
// partitions' rounds: it runs between them, under the same locks, and is
// always deferred (ApplyDeferred): under SyncAlways its Pebble batch asks
// for no fsync (see durability), each partition counts it as unsynced
// until an fsync covers it, and the caller makes it durable with Sync.
//
// One Pebble batch is atomic in the write-ahead log, so a crash keeps
// every partition's writes of the step or none; and one commit per step
// instead of one per partition saves a round, a pass through Pebble's
// commit pipeline and a wake-up of the syncer.

// jointStep holds what one joint step needs besides the caller's batches.
type jointStep struct {
	parts   [engine.MaxJointBatches]*partition
	workers [engine.MaxJointBatches]*worker
	writes  [engine.MaxJointBatches][]engine.Write
	order   [engine.MaxJointBatches]int // lock order: indexes into parts
}

// Joins reports true: the embedded store runs joint steps. See
// engine.JointStore.
func (*Store) Joins() bool { return true }

// ApplyJoint runs bs as one atomic step on their partitions, deferred. See
// engine.JointStore.
func (s *Store) ApplyJoint(ctx context.Context, bs []*engine.Batch, outs []engine.StepResult) error {
	n := len(bs)
	if err := engine.CheckJoint(bs, outs); err != nil || n == 0 {
		return err
	}
	s.gate.RLock()
	defer s.gate.RUnlock()
	if err := s.enter(ctx); err != nil {
		return err
	}
	j := s.joints.Get().(*jointStep)
	defer s.putJoint(j, n)
	for i, b := range bs {
		j.parts[i] = s.pin(b.Partition)
		j.workers[i] = s.workers.Get().(*worker)
		j.order[i] = i
	}
	for i := 1; i < n; i++ {
		// The partitions are distinct (CheckJoint): none is locked twice.
		for k := i; k > 0 && before(j.parts[j.order[k]], j.parts[j.order[k-1]]); k-- {
			j.order[k], j.order[k-1] = j.order[k-1], j.order[k]
		}
	}
	for _, i := range j.order[:n] {
		j.parts[i].mu.Lock()
	}
	rd, err := s.joint(j, bs, outs)
	for k := n - 1; k >= 0; k-- {
		j.parts[j.order[k]].mu.Unlock()
	}
	if rd != nil {
		// The syncer waits for the fsync and then counts the partitions
		// synced; the caller goes on at once.
		s.syncq <- rd
	}
	return err
}

// before orders partitions for locking: by hash, then by name.
func before(p, q *partition) bool {
	if p.hash != q.hash {
		return p.hash < q.hash
	}
	return p.name < q.name
}

func (s *Store) putJoint(j *jointStep, n int) {
	for i := range n {
		if j.parts[i] != nil {
			j.parts[i].pins.Add(-1)
		}
		if j.workers[i] != nil {
			s.workers.Put(j.workers[i])
		}
	}
	*j = jointStep{}
	s.joints.Put(j)
}

// joint evaluates and commits a joint step whose partitions j holds
// locked. It returns the round the syncer must finish, if any.
func (s *Store) joint(j *jointStep, bs []*engine.Batch, outs []engine.StepResult) (*round, error) {
	n := len(bs)
	now := engine.UnixMilli(s.clock)
	for _, p := range j.parts[:n] {
		if !p.loaded.Load() {
			if err := s.load(p, now); err != nil {
				return nil, err
			}
		}
		if p.replays != nil {
			p.replays.trim(now)
		}
		p.lastUsed.Store(now)
	}
	denied, writes := false, false
	for i, b := range bs {
		w := j.workers[i]
		view := &w.view
		view.s, view.p, view.writes = s, j.parts[i], nil
		ws, err := w.exec.Run(view, now, b, &outs[i])
		if view.err != nil {
			err = view.err
		}
		*view = roundView{}
		if err != nil {
			return nil, err
		}
		j.writes[i] = ws
		denied = denied || outs[i].Denied
		writes = writes || len(ws) > 0
	}
	if denied || !writes {
		// Nothing to commit. A deferred step does not wait for the state
		// it read: the caller's Sync does.
		return nil, nil
	}

	if err := s.failure(); err != nil {
		return nil, err // entered before an fsync failed: see failure
	}
	w := j.workers[0]
	ops := w.ops[:0]
	var ends [engine.MaxJointBatches]int
	for i, p := range j.parts[:n] {
		if len(j.writes[i]) > 0 {
			s.mark(p) // before the rows exist: the filter has no false negatives
			s.markDirty(p)
			ops = s.encode(w, ops, p, j.writes[i])
		}
		ends[i] = len(ops)
	}
	w.ops = ops
	pb := s.db.NewBatch()
	w.jk = s.journalRow(pb, w.jk, ops)
	// Deferred, the step asks for no fsync, as a deferred round does not
	// (see durability).
	err := s.db.Apply(pb, pebble.NoSync)
	_ = pb.Close()
	if err != nil {
		return nil, unavailable(err)
	}
	var wrote [engine.MaxJointBatches]bool
	start := 0
	for i, p := range j.parts[:n] {
		wrote[i] = len(j.writes[i]) > 0
		p.apply(j.writes[i], s.seed)
		s.pending(p, ops[start:ends[i]])
		start = ends[i]
		j.writes[i] = nil // drop the references into the executors' buffers
	}
	if !s.logged {
		return nil, nil
	}
	rd := s.rounds.Get().(*round)
	rd.lazy = s.durable.committed.Add(1)
	rd.refs.Store(1) // the syncer's finish alone
	rd.durable.Add(1)
	joined := 0
	for i, p := range j.parts[:n] {
		if !wrote[i] {
			continue
		}
		p.unsynced.Add(1)
		if rd.p == nil {
			rd.p = p
		} else {
			rd.joint[joined] = p
			joined++
		}
	}
	return rd, nil
}
