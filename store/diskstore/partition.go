package diskstore

import (
	"bytes"
	"hash/maphash"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"

	"github.com/sluicehq/sluice/engine"
)

// partition is the in-memory copy of one partition's records. Once loaded
// its records mirror the partition's record rows on disk exactly, expired
// rows included, so a batch knows the bucket of each record's current
// expiry index entry; its replay fingerprints cover the replay records on
// disk whose bucket has not ended.
type partition struct {
	mu      sync.Mutex // held by the round in progress (and the sweep)
	name    string
	hash    uint64      // of name, with the store's seed
	recs    records     // guarded by mu
	replays *replaySet  // guarded by mu; nil until the first replay record
	loaded  atomic.Bool // written under mu
	// filtered: the presence filter holds the partition, which it never
	// forgets; guarded by mu. A partition's later commits skip the
	// filter's cache line.
	filtered bool
	// markedReplays is the last bucket the partition was marked in for
	// its replay records (see replaymarks.go); guarded by mu.
	markedReplays int64

	// pins counts the callers using the partition; a pinned partition is
	// never evicted. It is incremented under the shard's lock.
	pins atomic.Int32
	// unsynced counts the batches applied to recs whose log record is not
	// yet fsynced (SyncAlways only).
	unsynced atomic.Int32
	leading  bool // a round is in progress or about to start; guarded by qmu
	// lastUsed is the store-clock instant of the last batch, in Unix ms.
	lastUsed atomic.Int64
	// dirty: the partition's rows lack changes it has committed (in
	// journal rows), which pend and flushing hold until a checkpoint has
	// written them (see journal.go). A dirty partition is never evicted:
	// reloaded from its rows, it would not see them. Written under mu.
	dirty atomic.Bool
	// pend holds the journal ops committed since the last checkpoint took
	// the partition's, and flushing those of the checkpoint in progress;
	// guarded by mu.
	pend, flushing pendingOps

	prev, next *partition // the shard's recency list, guarded by its lock
	same       *partition // the next partition of the shard with the same hash

	qmu   sync.Mutex
	queue []*request // batches waiting for the next round
}

// apply copies committed writes into memory; seed is the store's.
func (p *partition) apply(writes []engine.Write, seed maphash.Seed) {
	for i := range writes {
		w := &writes[i]
		if w.Delete {
			p.recs.del(w.Key)
			continue
		}
		rec := w.Rec
		if isReplay(w.Key, rec.Kind) {
			p.addReplay(maphash.String(seed, w.Key), bucketOf(rec.ExpireAt))
			continue
		}
		if old, exists := p.recs.get(w.Key); exists && cap(old.Data) >= len(rec.Data) {
			// Reuse the record's buffer: the hot path allocates nothing.
			// (A write may alias the old buffer; copy handles overlap.)
			rec.Data = old.Data[:len(rec.Data)]
			copy(rec.Data, w.Rec.Data)
		} else {
			rec.Data = append([]byte(nil), rec.Data...)
		}
		p.recs.set(w.Key, rec)
	}
}

// evictable reports whether p may leave memory: no caller holds it,
// nothing it holds awaits its fsync (a batch applied with ApplyDeferred no
// longer pins it; a partition reloaded from disk would not know that its
// state is not yet durable), and its rows hold all it committed, written
// now if a checkpoint has not yet (see writeRows). The first two rise, and
// p turns dirty, only while p is pinned. The caller holds p's shard's
// lock.
func (s *Store) evictable(p *partition) bool {
	if p.pins.Load() != 0 || p.unsynced.Load() != 0 {
		return false
	}
	return !p.dirty.Load() || s.writeRows(p)
}

// shard is one of the store's partition maps with its recency list, most
// recently used first. The map is keyed by the partitions' hashes, not
// their names: a lookup or a growing map then reads no name but the one
// found, and partitions whose names share a hash (never seen in practice:
// the hash is 64 bits, seeded per store) are chained through same.
type shard struct {
	mu    sync.Mutex
	parts map[uint64]*partition
	n     int       // partitions in parts
	lru   partition // sentinel: lru.next is the most recent, lru.prev the least
	_     [64]byte  // keep neighbouring shards' locks off one cache line
}

func (sh *shard) init() {
	sh.parts = make(map[uint64]*partition)
	sh.lru.next, sh.lru.prev = &sh.lru, &sh.lru
}

// find returns the resident partition named name, whose hash is hash, or
// nil.
func (sh *shard) find(hash uint64, name string) *partition {
	for p := sh.parts[hash]; p != nil; p = p.same {
		if p.name == name {
			return p
		}
	}
	return nil
}

// insert adds p, which is not resident, to the map (not to the recency
// list).
func (sh *shard) insert(p *partition) {
	p.same = sh.parts[p.hash]
	sh.parts[p.hash] = p
	sh.n++
}

func (sh *shard) pushFront(p *partition) {
	p.prev, p.next = &sh.lru, sh.lru.next
	p.prev.next, p.next.prev = p, p
}

func (sh *shard) unlink(p *partition) {
	p.prev.next, p.next.prev = p.next, p.prev
	p.prev, p.next = nil, nil
}

func (sh *shard) remove(p *partition) {
	sh.unlink(p)
	switch head := sh.parts[p.hash]; {
	case head == p && p.same == nil:
		delete(sh.parts, p.hash)
	case head == p:
		sh.parts[p.hash] = p.same
	default:
		for q := head; q != nil; q = q.same {
			if q.same == p {
				q.same = p.same
				break
			}
		}
	}
	p.same = nil
	sh.n--
}

func (s *Store) shard(hash uint64) *shard { return &s.shards[hash%shardCount] }

// pin returns the partition named name, creating an unloaded one if it is
// not resident, marks it most recently used and pins it; the caller
// unpins it with p.pins.Add(-1). Creating a partition may evict the least
// recently used idle ones of the shard.
func (s *Store) pin(name string) *partition {
	hash := maphash.String(s.seed, name)
	sh := s.shard(hash)
	sh.mu.Lock()
	p := sh.find(hash, name)
	if p == nil {
		p = &partition{name: strings.Clone(name), hash: hash}
		sh.insert(p)
		sh.pushFront(p)
		p.pins.Add(1)
		if over := sh.n - s.perShard; over > 0 {
			s.evictLRU(sh, over)
		}
	} else {
		if sh.lru.next != p {
			sh.unlink(p)
			sh.pushFront(p)
		}
		p.pins.Add(1)
	}
	sh.mu.Unlock()
	return p
}

// evictLRU evicts up to n unpinned partitions from the cold end of sh,
// looking at no more than n+8 of them. A pinned partition is skipped: the
// shard may briefly exceed its share while every cold partition is in use.
func (s *Store) evictLRU(sh *shard, n int) {
	p := sh.lru.prev
	for budget := n + 8; n > 0 && budget > 0 && p != &sh.lru; budget-- {
		prev := p.prev
		if s.evictable(p) {
			sh.remove(p)
			n--
		}
		p = prev
	}
}

// evictIdle evicts the unpinned partitions of every shard not used since
// before cutoff, at most limit per shard per call so no shard lock is held
// long.
func (s *Store) evictIdle(cutoff int64, limit int) (evicted int) {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		p := sh.lru.prev
		for n := 0; n < limit && p != &sh.lru && p.lastUsed.Load() < cutoff; n++ {
			prev := p.prev
			if s.evictable(p) {
				sh.remove(p)
				evicted++
			}
			p = prev
		}
		sh.mu.Unlock()
	}
	return evicted
}

// unpinShell unpins p and, if no batch loaded it meanwhile, removes it from
// its shard: the sweep pins partitions without loading them.
func (s *Store) unpinShell(p *partition) {
	sh := s.shard(p.hash)
	sh.mu.Lock()
	if p.pins.Add(-1) == 0 && !p.loaded.Load() && sh.find(p.hash, p.name) == p {
		sh.remove(p)
	}
	sh.mu.Unlock()
}

// Resident returns the number of partitions held in memory.
func (s *Store) Resident() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += sh.n
		sh.mu.Unlock()
	}
	return n
}

// load reads p's records from disk with one prefix scan, and its replay
// records whose bucket has not ended at now with one seek per bucket,
// unless the presence filter shows it has none. The caller holds p.mu.
func (s *Store) load(p *partition, now int64) error {
	if !s.present.mayContain(p.hash) {
		p.loaded.Store(true)
		return nil
	}
	var recs records
	prefix := appendPartitionPrefix(nil, p.name)
	err := s.scan(prefix, prefixEnd(prefix), func(key, v []byte) error {
		rec, err := decodeValue(v)
		if err != nil {
			return err
		}
		rec.Data = append([]byte(nil), rec.Data...)
		recs.set(string(key[len(prefix):]), rec)
		return nil
	})
	if err != nil {
		return err
	}
	if err := s.loadReplays(p, now); err != nil {
		return err
	}
	p.recs = recs
	p.loaded.Store(true)
	return nil
}

// scan calls fn with every row whose key is in [lower, upper), in order.
// key and v are valid only during the call.
func (s *Store) scan(lower, upper []byte, fn func(key, v []byte) error) error {
	iter, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return unavailable(err)
	}
	for ok := iter.First(); ok; ok = iter.Next() {
		v, err := iter.ValueAndErr()
		if err != nil {
			_ = iter.Close()
			return unavailable(err)
		}
		if err := fn(iter.Key(), v); err != nil {
			_ = iter.Close()
			return err
		}
	}
	return unavailable(iter.Close())
}

// fillPresence adds every partition with rows on disk to the presence
// filter: every partition with records, and every partition with replay
// records in a bucket that has not ended at now, which it also marks in
// those buckets (see replaymarks.go).
func (s *Store) fillPresence(now int64) error {
	var last []byte
	add := func(p []byte) {
		if !bytes.Equal(p, last) {
			last = append(last[:0], p...)
			s.present.add(maphash.Bytes(s.seed, p))
		}
	}
	err := s.scanKeys([]byte{nsRecord}, []byte{nsRecord + 1}, func(key []byte) error {
		p, _, err := parseRecordKey(key)
		if err == nil {
			add(p)
		}
		return err
	})
	if err != nil {
		return err
	}
	lastBucket := int64(noBucket)
	return s.scanKeys(replayBound(lastEnded(now)+1), []byte{nsReplay + 1}, func(key []byte) error {
		b, _, p, _, err := parseReplayKey(key)
		if err != nil {
			return err
		}
		if b != lastBucket || !bytes.Equal(p, last) {
			add(p)
			s.replayMarks.mark(b, maphash.Bytes(s.seed, p))
			lastBucket = b
		}
		return nil
	})
}

// scanKeys calls fn with the key of every row in [lower, upper), in order.
func (s *Store) scanKeys(lower, upper []byte, fn func(key []byte) error) error {
	iter, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return unavailable(err)
	}
	for ok := iter.First(); ok; ok = iter.Next() {
		if err := fn(iter.Key()); err != nil {
			_ = iter.Close()
			return err
		}
	}
	return unavailable(iter.Close())
}
