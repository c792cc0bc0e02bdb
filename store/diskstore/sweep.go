package diskstore

import (
	"cmp"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/sluicehq/sluice/engine"
)

// idleEvictLimit is the most partitions one idle-eviction pass removes from
// one shard.
const idleEvictLimit = 4096

// background runs the sweep (and the checkpoint before it), idle eviction
// and the checkpoints asked for early (see pending), until Close.
func (s *Store) background() {
	defer s.bg.Done()
	sweep := time.NewTicker(s.cfg.SweepInterval)
	defer sweep.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-s.ckptSoon:
			if s.failure() != nil {
				continue
			}
			if err := s.checkpoint(engine.UnixMilli(s.clock)); err != nil {
				s.log.Warn("diskstore: checkpoint failed", "err", err)
			}
		case <-sweep.C:
			if s.failure() != nil {
				continue
			}
			now := engine.UnixMilli(s.clock)
			if _, err := s.sweep(now); err != nil {
				s.log.Warn("diskstore: sweep failed", "err", err)
			}
			if s.cfg.IdleTimeout > 0 {
				s.evictIdle(now-s.cfg.IdleTimeout.Milliseconds(), idleEvictLimit)
			}
		}
	}
}

// periodicSync runs SyncOnInterval's fsync of the log every SyncInterval
// until Close, on a goroutine of its own so that a long sweep or
// checkpoint never delays it.
func (s *Store) periodicSync() {
	defer s.bg.Done()
	t := time.NewTicker(s.cfg.SyncInterval)
	defer t.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-t.C:
			_ = s.fsyncLogs()
		}
	}
}

// fsyncLogs is SyncOnInterval's periodic fsync of the write-ahead log
// files (see walFS.syncLogs). A failure fails the store: the batches the
// files hold were answered, and what the operating system failed to write
// may be gone.
func (s *Store) fsyncLogs() error {
	if err := s.failure(); err != nil {
		return err
	}
	if err := s.wal.syncLogs(); err != nil {
		return s.fail(err)
	}
	return nil
}

// due is one expiry index entry of a bucket that has ended.
type due struct {
	xk        []byte // the entry's key
	rk        []byte // the record's Pebble key
	partition string
	key       string
}

// sweep writes a checkpoint (see journal.go), deletes the replay records
// of every bucket that has ended with one range deletion, then reads up to
// Config.SweepLimit expiry index entries of ended buckets, oldest bucket
// first, and deletes each entry, and its record if that has expired. Each partition is locked and each record's
// expiry checked before it is deleted, so a record a batch has renewed
// survives (its current entry is in a later bucket). It returns the number
// of records deleted.
func (s *Store) sweep(now int64) (int, error) {
	// The sweep reads the rows: first bring them up to date.
	if err := s.checkpoint(now); err != nil {
		return 0, err
	}
	if err := s.sweepReplays(now); err != nil {
		return 0, err
	}
	entries, err := s.dueEntries(now)
	if err != nil || len(entries) == 0 {
		return 0, err
	}
	deleted := 0
	for start := 0; start < len(entries); {
		end := start + 1
		for end < len(entries) && entries[end].partition == entries[start].partition {
			end++
		}
		n, err := s.sweepPartition(now, entries[start:end])
		deleted += n
		if err != nil {
			return deleted, err
		}
		select {
		case <-s.done:
			return deleted, nil
		default:
		}
		start = end
	}
	return deleted, nil
}

// dueEntries reads up to Config.SweepLimit expiry index entries of the
// buckets ended at now, sorted by partition and key.
func (s *Store) dueEntries(now int64) ([]due, error) {
	iter, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{nsIndex}, UpperBound: indexBound(lastEnded(now) + 1)})
	if err != nil {
		return nil, unavailable(err)
	}
	var entries []due
	for ok := iter.First(); ok && len(entries) < s.cfg.SweepLimit; ok = iter.Next() {
		xk := append([]byte(nil), iter.Key()...)
		_, rk, err := parseIndexKey(nil, xk)
		if err != nil {
			_ = iter.Close()
			return nil, err
		}
		p, k, _ := parseRecordKey(rk)
		entries = append(entries, due{xk: xk, rk: rk, partition: string(p), key: string(k)})
	}
	if err := iter.Close(); err != nil {
		return nil, unavailable(err)
	}
	// Every partition is locked once per pass, and two entries of one
	// record are adjacent.
	slices.SortFunc(entries, func(a, b due) int {
		return cmp.Or(strings.Compare(a.partition, b.partition), strings.Compare(a.key, b.key))
	})
	return entries, nil
}

// sweepPartition deletes the entries among due, all of one partition, and
// the expired records they name, under the partition's lock.
func (s *Store) sweepPartition(now int64, entries []due) (int, error) {
	p := s.pin(entries[0].partition)
	defer s.unpinShell(p)
	p.mu.Lock()
	defer p.mu.Unlock()

	loaded := p.loaded.Load()
	pb := s.db.NewBatch()
	defer func() { _ = pb.Close() }()
	var gone []string
	var ops []byte
	for i := range entries {
		e := &entries[i]
		_ = pb.Delete(e.xk, nil)
		ops = appendDeleteOp(ops, e.xk)
		if i > 0 && e.key == entries[i-1].key {
			continue // another entry of the same record
		}
		rec, ok, err := s.current(p, loaded, e)
		if err != nil {
			return 0, err
		}
		// A live record was renewed into a later bucket, where its current
		// entry is: only this one, stale, goes.
		if ok && !rec.Live(now) {
			_ = pb.Delete(e.rk, nil)
			ops = appendDeleteOp(ops, e.rk)
			gone = append(gone, e.key)
		}
	}
	if err := s.failure(); err != nil {
		return 0, err // the pass began before an fsync failed: see failure
	}
	// The deletes go to the rows at once, and to the journal too: a crash
	// that keeps a journal row written before them (the partition
	// committed since the last checkpoint) must not bring back what they
	// deleted when the journal is applied.
	s.journalRow(pb, nil, ops)
	// A lost sweep is redone by a later pass: no need to wait for an fsync.
	if err := s.db.Apply(pb, pebble.NoSync); err != nil {
		return 0, unavailable(err)
	}
	if loaded {
		for _, k := range gone {
			p.recs.del(k)
		}
	}
	return len(gone), nil
}

// current returns the record e names as it stands now: from memory if the
// partition is loaded, from disk otherwise.
func (s *Store) current(p *partition, loaded bool, e *due) (engine.Record, bool, error) {
	if loaded {
		rec, ok := p.recs.get(e.key)
		return rec, ok, nil
	}
	v, closer, err := s.db.Get(e.rk)
	if errors.Is(err, pebble.ErrNotFound) {
		return engine.Record{}, false, nil
	}
	if err != nil {
		return engine.Record{}, false, unavailable(err)
	}
	defer func() { _ = closer.Close() }()
	rec, err := decodeValue(v)
	rec.Data = nil // only the header is needed, and v dies with closer
	return rec, err == nil, err
}
