package diskstore

import (
	"bytes"
	"hash/maphash"
	"math"
	"slices"

	"github.com/cockroachdb/pebble/v2"

	"github.com/sluicehq/sluice/engine"
)

// Replay records are written to disk in the bucket of their expiry and
// deleted a bucket at a time (see layout.go); in memory a partition keeps
// only their fingerprints.

// replaySet holds fingerprints of one partition's replay records (64-bit
// hashes of their keys, with the store's seed), grouped by the bucket of
// their expiry (see layout.go); the records themselves stay on disk. A
// step with an operation id looks its replay key up here: a fresh id,
// nearly always, is absent from every bucket and costs a few map lookups; a
// retried one is read from Pebble in the bucket holding its fingerprint. A
// bucket is dropped whole once it has ended, so forgetting a hot
// partition's expired records costs nothing per record. While the clock
// moves forward there are at most engine.ReplayTTL/bucketMs + 1 buckets.
type replaySet struct {
	buckets []replayBucket // in increasing bucket order
}

type replayBucket struct {
	b   int64
	fps map[uint64]struct{}
}

// add records fingerprint fp in bucket b.
func (r *replaySet) add(fp uint64, b int64) {
	i := len(r.buckets)
	for i > 0 && r.buckets[i-1].b >= b {
		i--
	}
	if i == len(r.buckets) || r.buckets[i].b != b {
		r.buckets = slices.Insert(r.buckets, i, replayBucket{b: b, fps: make(map[uint64]struct{})})
	}
	r.buckets[i].fps[fp] = struct{}{}
}

// trim drops every bucket that has ended at now: all its records have
// expired.
func (r *replaySet) trim(now int64) {
	last := lastEnded(now)
	n := 0
	for n < len(r.buckets) && r.buckets[n].b <= last {
		n++
	}
	if n > 0 {
		r.buckets = slices.Delete(r.buckets, 0, n)
	}
}

// addReplay records the fingerprint of a replay record written in bucket
// b.
func (p *partition) addReplay(fp uint64, b int64) {
	if p.replays == nil {
		p.replays = new(replaySet)
	}
	p.replays.add(fp, b)
}

// replay returns the replay record at key of p, reading Pebble in each
// bucket whose fingerprints hold key's, newest first, until it is found: a
// fingerprint shared by two keys costs a read, never a wrong answer. The
// caller holds p.mu.
func (s *Store) replay(p *partition, key string) (engine.Record, bool, error) {
	if p.replays == nil {
		return engine.Record{}, false, nil
	}
	fp := maphash.String(s.seed, key)
	for i := len(p.replays.buckets) - 1; i >= 0; i-- {
		bk := &p.replays.buckets[i]
		if _, ok := bk.fps[fp]; !ok {
			continue
		}
		rk := appendReplayKey(nil, bk.b, 0, p.name, key)
		if v, ok, err := pendingReplay(p, rk, s.seed); err != nil || ok {
			if err != nil {
				return engine.Record{}, false, err
			}
			rec, err := decodeValue(v)
			rec.Data = bytes.Clone(rec.Data) // v is in p's buffers
			return rec, err == nil, err
		}
		v, ok, err := s.readReplay(rk)
		if err != nil {
			return engine.Record{}, false, err
		}
		if !ok {
			continue
		}
		rec, err := decodeValue(v)
		return rec, err == nil, err
	}
	return engine.Record{}, false, nil
}

// readReplay reads the replay row rk from Pebble, in whichever slice of its
// bucket holds it (rk's slice byte is overwritten), with a seek in each
// slice from the first that has rows. The value returned is the caller's.
func (s *Store) readReplay(rk []byte) ([]byte, bool, error) {
	bucket := rk[:replayHead-1]
	iter, err := s.db.NewIter(&pebble.IterOptions{LowerBound: bucket, UpperBound: prefixEnd(bucket)})
	if err != nil {
		return nil, false, unavailable(err)
	}
	var v []byte
	found := false
	for sl := byte(0); sl < replaySlices; {
		rk[replayHead-1] = sl
		if !iter.SeekGE(rk) {
			break // no row at or past rk in the bucket
		}
		k := iter.Key()
		if bytes.Equal(k, rk) {
			if v, err = iter.ValueAndErr(); err == nil {
				v, found = bytes.Clone(v), true // v dies with the iterator
			}
			break
		}
		// The slices between sl and k's hold no rows.
		sl = max(sl+1, k[replayHead-1])
	}
	if cerr := iter.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, false, unavailable(err)
	}
	return v, found, nil
}

// loadReplays reads the keys of p's replay records from the buckets that
// have not ended at now and may hold some (see replaymarks.go), with a seek
// in each slice of each (skipping the slices that hold no rows at all); it
// opens no iterator for a partition marked in none. Once the marks are
// spoilt it seeks in every bucket that has not ended and holds rows, in
// order.
func (s *Store) loadReplays(p *partition, now int64) error {
	ended := lastEnded(now)
	var buf [replaySlots]int64
	buckets, all := s.replayMarks.candidates(buf[:0], p.hash, ended)
	b := ended + 1
	switch {
	case !all && len(buckets) == 0:
		return nil
	case !all:
		b = buckets[0]
	}
	iter, err := s.db.NewIter(&pebble.IterOptions{LowerBound: replayBound(b), UpperBound: []byte{nsReplay + 1}})
	if err != nil {
		return unavailable(err)
	}
	var replays replaySet
	var seek []byte
	for i := 0; ; {
		// p's rows in bucket b, slice by slice; next is the bucket of the
		// row the iterator stopped at, past them.
		next := b
		for sl := byte(0); sl < replaySlices && next == b; {
			seek = appendReplayPrefix(seek[:0], b, sl, p.name)
			ok := iter.SeekGE(seek)
			for ; ok && bytes.HasPrefix(iter.Key(), seek); ok = iter.Next() {
				replays.add(maphash.Bytes(s.seed, iter.Key()[len(seek):]), b)
			}
			if !ok {
				next = math.MaxInt64 // no rows past p's in any later slice or bucket
				break
			}
			nb, nsl, _, _, err := parseReplayKey(iter.Key())
			if err != nil {
				_ = iter.Close()
				return err
			}
			// The slices between sl and the iterator's hold no rows.
			next, sl = nb, max(sl+1, nsl)
		}
		if next == math.MaxInt64 {
			break
		}
		if !all {
			if i++; i == len(buckets) {
				break
			}
			b = buckets[i]
			continue
		}
		b = max(next, b+1)
	}
	if err := iter.Close(); err != nil {
		return unavailable(err)
	}
	if len(replays.buckets) > 0 {
		p.replays = &replays
	}
	return nil
}

// sweepReplays deletes every replay record in a bucket that has ended at
// now, with one range deletion when another bucket has ended since the last
// pass. Pebble drops the rows in its compactions.
func (s *Store) sweepReplays(now int64) error {
	first := lastEnded(now) + 1 // the first bucket not ended
	if first <= s.replaysCleared.Load() {
		return nil
	}
	// A lost deletion is redone by the next pass after a restart.
	if err := s.db.DeleteRange([]byte{nsReplay}, replayBound(first), pebble.NoSync); err != nil {
		return unavailable(err)
	}
	s.replaysCleared.Store(first)
	return nil
}
