package diskstore

import (
	"cmp"
	"errors"
	"slices"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/sluicehq/sluice/engine"
)

// idleEvictLimit is the most partitions one idle-eviction pass removes from
// one shard.
const idleEvictLimit = 4096

// background runs the sweep, idle eviction and, under SyncOnInterval, the
// periodic fsync, until Close.
func (s *Store) background() {
	defer s.bg.Done()
	sweep := time.NewTicker(s.cfg.SweepInterval)
	defer sweep.Stop()
	var syncTick <-chan time.Time
	if s.cfg.Sync == SyncOnInterval {
		t := time.NewTicker(s.cfg.SyncInterval)
		defer t.Stop()
		syncTick = t.C
	}
	for {
		select {
		case <-s.done:
			return
		case <-syncTick:
			if s.failure() == nil {
				_ = s.syncLog()
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

// expired is one expiry index entry at or before the sweep's instant.
type expired struct {
	at        int64
	rk        []byte // the record's Pebble key
	partition string
	key       string
}

// sweep deletes up to Config.SweepLimit expired records, with their expiry
// index entries, reading the index from its oldest entry. Each partition is
// locked and each record's expiry checked again before it is deleted, so a
// record a batch has just renewed survives. It returns the number of records
// deleted.
func (s *Store) sweep(now int64) (int, error) {
	due, err := s.dueEntries(now)
	if err != nil || len(due) == 0 {
		return 0, err
	}
	deleted := 0
	for start := 0; start < len(due); {
		end := start + 1
		for end < len(due) && due[end].partition == due[start].partition {
			end++
		}
		n, err := s.sweepPartition(now, due[start:end])
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

// dueEntries reads up to Config.SweepLimit expiry index entries at or before
// now, grouped by partition.
func (s *Store) dueEntries(now int64) ([]expired, error) {
	lower := []byte{nsExpiry}
	var upper []byte
	if now == 1<<63-1 {
		upper = prefixEnd(lower)
	} else {
		upper = expiryBound(now + 1)
	}
	iter, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return nil, unavailable(err)
	}
	var due []expired
	for ok := iter.First(); ok && len(due) < s.cfg.SweepLimit; ok = iter.Next() {
		at, rk, err := parseExpiryKey(nil, iter.Key())
		if err != nil {
			_ = iter.Close()
			return nil, err
		}
		p, k, _ := parseRecordKey(rk)
		due = append(due, expired{at: at, rk: rk, partition: string(p), key: string(k)})
	}
	if err := iter.Close(); err != nil {
		return nil, unavailable(err)
	}
	// Group by partition, keeping the index order within each, so every
	// partition is locked once per pass.
	groupByPartition(due)
	return due, nil
}

// groupByPartition reorders due so that entries of one partition are
// adjacent, partitions in order of first appearance and entries in index
// order within each.
func groupByPartition(due []expired) {
	first := make(map[string]int, len(due))
	for i := range due {
		if _, ok := first[due[i].partition]; !ok {
			first[due[i].partition] = i
		}
	}
	slices.SortStableFunc(due, func(a, b expired) int {
		return cmp.Compare(first[a.partition], first[b.partition])
	})
}

// sweepPartition deletes the expired records among due, all of one
// partition, under the partition's lock.
func (s *Store) sweepPartition(now int64, due []expired) (int, error) {
	p := s.pin(due[0].partition)
	defer s.unpinShell(p)
	p.mu.Lock()
	defer p.mu.Unlock()

	loaded := p.loaded.Load()
	pb := s.db.NewBatch()
	defer func() { _ = pb.Close() }()
	var gone []string
	var xk []byte
	for i := range due {
		e := &due[i]
		rec, ok, err := s.current(p, loaded, e)
		if err != nil {
			return 0, err
		}
		xk = appendExpiryKey(xk[:0], e.at, e.rk)
		_ = pb.Delete(xk, nil)
		if ok && rec.ExpireAt == e.at && !rec.Live(now) {
			_ = pb.Delete(e.rk, nil)
			gone = append(gone, e.key)
		}
		// Otherwise the entry is stale (the record was renewed or deleted
		// since, and its current entry is elsewhere): drop only the entry.
	}
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
func (s *Store) current(p *partition, loaded bool, e *expired) (engine.Record, bool, error) {
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
