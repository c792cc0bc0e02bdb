package diskstore

import (
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"

	"github.com/sluicehq/sluice/engine"
)

// Batches on one partition are combined into rounds. A caller queues its
// batch on the partition; the one that finds no round in progress leads
// the next: it takes every batch queued so far, evaluates them in order
// against the partition's records (each seeing the writes of those before
// it), commits all their writes in one Pebble batch, applies them to
// memory, and hands the lead to the first batch queued meanwhile. Then it
// waits for the round's fsync and releases the round's other callers.
//
// A hot partition thus costs one Pebble commit and one hand-over per round
// rather than per batch, and while one round waits for its fsync the next
// is already being evaluated. Atomicity per batch is unchanged: a batch's
// writes are all in its round's Pebble batch or none are.

// request is one Apply on its way through a round.
type request struct {
	b   *engine.Batch
	out *engine.StepResult
	w   *worker
	// err is the batch's own outcome (an invalid command, a conflicting
	// operation id) or its round's failure to commit.
	err error
	// round is the round that ran the batch; nil if the round failed
	// before evaluating it.
	round *round
	// wake tells a queued caller that its round has run (false) or that it
	// leads the next round (true).
	wake chan bool
	// deferred: the caller (ApplyDeferred) does not wait for the round's
	// fsync; it will call Sync.
	deferred bool
}

// round is one leader's round: what its callers wait for after it ran.
type round struct {
	p       *partition
	joint   [engine.MaxJointBatches - 1]*partition // a joint step's other partitions written
	pb      *pebble.Batch                          // awaiting its fsync; nil if there is none to wait for
	lazy    uint64                                 // committed without asking for an fsync: its number (see durability)
	covers  uint64                                 // the commits pb's fsync covers besides its own (see durability)
	barrier bool                                   // wrote nothing but read state not yet fsynced
	waiters int                                    // callers that wait for the fsync (not deferred)
	durable sync.WaitGroup
	err     error // the fsync's failure, set before durable is released
	// refs counts the round's callers still to read it, and its finisher
	// (see finish); the last one recycles it.
	refs atomic.Int32
}

// run takes r through a round on p and returns its outcome.
func (s *Store) run(p *partition, r *request) error {
	p.qmu.Lock()
	if !p.leading {
		p.leading = true
		p.qmu.Unlock()
		s.lead(p, r, false)
	} else {
		p.queue = append(p.queue, r)
		p.qmu.Unlock()
		if <-r.wake {
			s.lead(p, r, true)
		}
	}
	rd := r.round
	if rd == nil {
		return r.err
	}
	if r.deferred {
		err := r.err
		s.release(rd)
		return err
	}
	rd.durable.Wait()
	err := r.err
	if err == nil {
		err = rd.err
	}
	s.release(rd)
	return err
}

// release drops one reference to rd, recycling it with the last.
func (s *Store) release(rd *round) {
	if rd.refs.Add(-1) == 0 {
		if rd.pb != nil {
			_ = rd.pb.Close()
		}
		*rd = round{}
		s.rounds.Put(rd)
	}
}

// finish waits for rd's fsync (or, for a barrier, for the log's), records
// its outcome and releases its waiting callers.
func (s *Store) finish(rd *round) {
	switch {
	case rd.lazy != 0:
		if err := s.durable.wait(s, rd.lazy); err != nil {
			rd.err = err
		}
		rd.synced()
	case rd.pb != nil:
		// A failure is recorded before the partition counts the round
		// synced (see wroteNothing).
		if err := rd.pb.SyncWait(); err != nil {
			rd.err = s.fail(err)
		} else {
			s.durable.advance(rd.covers)
		}
		rd.synced()
	case rd.barrier && rd.waiters > 0:
		rd.err = s.syncLog()
	}
	rd.durable.Done()
	s.release(rd)
}

// synced counts the round's partitions, the joint step's too, synced.
func (rd *round) synced() {
	rd.p.unsynced.Add(-1)
	for _, p := range rd.joint {
		if p != nil {
			p.unsynced.Add(-1)
		}
	}
}

// syncer finishes the rounds whose leader did not wait for their fsync
// (ApplyDeferred), in the order they were queued. Close stops it after
// every Apply has returned, so it drains the queue before it returns.
func (s *Store) syncer() {
	defer s.bg.Done()
	for {
		select {
		case rd := <-s.syncq:
			s.finish(rd)
		case <-s.done:
			for {
				select {
				case rd := <-s.syncq:
					s.finish(rd)
				default:
					return
				}
			}
		}
	}
}

// lead runs one round on p, with me and the batches queued so far (me
// first among them if queued), hands the lead on, and makes the round
// durable.
func (s *Store) lead(p *partition, me *request, queued bool) {
	w := me.w
	w.reqs = w.reqs[:0]
	if !queued {
		w.reqs = append(w.reqs, me)
	}
	p.qmu.Lock()
	w.reqs = append(w.reqs, p.queue...)
	clear(p.queue)
	p.queue = p.queue[:0]
	p.qmu.Unlock()

	rd := s.round(p, w)

	p.qmu.Lock()
	var next *request
	if len(p.queue) > 0 {
		next = p.queue[0]
	} else {
		p.leading = false
	}
	p.qmu.Unlock()
	if next != nil {
		next.wake <- true
	}
	for _, r := range w.reqs {
		r.round = rd
		if r != me {
			r.wake <- false
		}
	}
	clear(w.reqs)
	if rd == nil {
		return
	}
	if me.deferred && (rd.pb != nil || rd.lazy != 0 || rd.barrier && rd.waiters > 0) {
		// The leader goes on at once; the syncer waits for the fsync.
		s.syncq <- rd
		return
	}
	s.finish(rd)
}

// round evaluates w.reqs on p, commits their writes and applies them to
// memory. It returns nil if the partition could not be loaded, with every
// request's err set.
func (s *Store) round(p *partition, w *worker) *round {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := engine.UnixMilli(s.clock)
	if !p.loaded.Load() {
		if err := s.load(p, now); err != nil {
			for _, r := range w.reqs {
				r.err = err
			}
			return nil
		}
	}
	if p.replays != nil {
		p.replays.trim(now)
	}
	p.lastUsed.Store(now)
	view := &w.view
	view.s, view.p, w.writes = s, p, w.writes[:0]
	for _, r := range w.reqs {
		view.writes = w.writes
		writes, err := r.w.exec.Run(view, now, r.b, r.out)
		if view.err != nil {
			// A replay record could not be read: the batch ran on a
			// guess, and must not count.
			err, view.err = view.err, nil
		}
		r.err = err
		if err == nil {
			// The writes point into r's executor, which r holds until
			// its Apply returns.
			w.writes = append(w.writes, writes...)
		}
	}
	view.s, view.p, view.writes = nil, nil, nil
	rd := s.rounds.Get().(*round)
	rd.p = p
	rd.refs.Store(int32(len(w.reqs)) + 1)
	rd.durable.Add(1)
	for _, r := range w.reqs {
		if !r.deferred {
			rd.waiters++
		}
	}
	if len(w.writes) == 0 {
		return s.wroteNothing(rd, p, w.reqs)
	}

	if err := s.failure(); err != nil {
		// The round entered before an fsync failed: it commits nothing
		// (see failure), and its callers are answered with the failure.
		for _, r := range w.reqs {
			r.err = err
		}
		clear(w.writes)
		return rd
	}
	w.ops = s.encode(w, w.ops[:0], p, w.writes)
	if len(w.ops) == 0 {
		// The writes cancel out (each key's last write deletes a record
		// the partition does not hold: one the round created): the round
		// is one that wrote nothing, and memory is unchanged.
		clear(w.writes)
		return s.wroteNothing(rd, p, w.reqs)
	}
	s.mark(p) // before the rows exist: the filter has no false negatives
	s.markDirty(p)
	pb := s.db.NewBatch()
	w.jk = s.journalRow(pb, w.jk, w.ops)
	// A round whose callers all deferred its fsync asks for none: the
	// fsync their Sync asks for covers it, and so does any other.
	lazy := s.logged && rd.waiters == 0
	var err error
	if s.logged && !lazy {
		rd.covers = s.durable.committed.Load()
		err = s.db.ApplyNoSyncWait(pb, pebble.Sync)
	} else {
		err = s.db.Apply(pb, pebble.NoSync)
		_ = pb.Close()
	}
	if err != nil {
		// Every batch of the round read state that was never committed.
		for _, r := range w.reqs {
			r.err = unavailable(err)
		}
		clear(w.writes)
		return rd
	}
	p.apply(w.writes, s.seed)
	s.pending(p, w.ops)
	clear(w.writes) // drop the references into the executors' buffers
	switch {
	case lazy:
		rd.lazy = s.durable.committed.Add(1)
		p.unsynced.Add(1)
	case s.logged:
		rd.pb = pb
		p.unsynced.Add(1)
	}
	return rd
}

// wroteNothing ends rd, a round on p that commits nothing (denials, reads,
// replayed results). If it read state not yet fsynced it is a barrier: its
// waiting callers are answered after the log's fsync, which fails if the
// store has. If it read none, it still must not answer once the store has
// failed: it may have entered the store before a failed fsync, and read
// what that fsync left in memory after finish counted it synced (finish
// records the failure first, so a round that finds nothing unsynced also
// finds the failure).
func (s *Store) wroteNothing(rd *round, p *partition, reqs []*request) *round {
	if s.logged && p.unsynced.Load() > 0 {
		rd.barrier = true
		return rd
	}
	if err := s.failure(); err != nil {
		for _, r := range reqs {
			r.err = err
		}
	}
	return rd
}

// roundView is what a batch of a round reads: the writes of the batches
// before it in the round over the partition's records and replay records.
type roundView struct {
	s      *Store
	p      *partition
	writes []engine.Write
	err    error // a replay record could not be read
}

// Get returns the record at key. See engine.View.
func (v *roundView) Get(key string) (engine.Record, bool) {
	for i := len(v.writes) - 1; i >= 0; i-- {
		if w := &v.writes[i]; w.Key == key {
			return w.Rec, !w.Delete
		}
	}
	if isReplayKey(key) {
		rec, ok, err := v.s.replay(v.p, key)
		if err != nil && v.err == nil {
			v.err = err
		}
		if ok {
			return rec, true
		}
	}
	return v.p.recs.get(key)
}
