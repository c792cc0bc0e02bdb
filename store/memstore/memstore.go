// Package memstore is the in-process Sluice store: sharded, bounded, with no
// timers and no goroutines.
//
// Use it for a single process, for tests and for development. Separate
// Stores, and separate processes, have separate quotas; for a quota shared by
// a fleet use the embedded store behind `sluice serve`, or Redis.
//
// The store holds at most Config.MaxKeys records. At capacity it rejects a
// batch that would create a new key with engine.ErrCapacity, after first
// trying to reclaim expired records; it never evicts a live record (a live
// quota, lease or replay record) to make room. Expired records are removed
// lazily: a batch removes at most 32 of them (SweepBatch), from its shard
// and, at capacity, from others, and only when the shard's earliest
// expiry has passed, so the hot path pays nothing for
// expiry; a shard whose last sweep found few expired records among many
// pauses its sweeps for SweepPause, so that one always holding a few
// expired records (windows of milliseconds) is not swept on every batch.
//
// Memory: a record is one allocation holding the record, its partition and
// its key, rounded up to a size class of Go's allocator, and a 16-byte slot
// in its shard's map. That is about 120 bytes of heap for a short partition
// and key, 167 for a route quota's (a 32-hex-digit partition name and its
// window key, about 50 bytes together), and about the length of longer ones
// on top. A value of more than 24 bytes (a log window's, a replay
// record's) takes a second allocation of its own size. Size MaxKeys by
// that.
//
// A batch of the shape of nearly every rate-limit check, one win.hit of one
// fixed, sliding or gcra window, perhaps followed by a kv.ttl of its key,
// runs on its record directly instead of through the executor's buffered
// writes, with the same results and effects. So does a batch of one
// res.reserve without a receipt over counters that all exist, the shape of
// every admission quota check.
//
// The store runs joint steps (engine.JointStore): batches on up to
// engine.MaxJointBatches partitions, all committed or, when any is denied
// or their new keys do not fit, none. A server charges a fair RPC's source
// and principal that way.
package memstore

import (
	"context"
	"fmt"
	"hash/maphash"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/engine"
)

// SweepBatch is the most expired records one batch (or joint step) removes,
// in passing and to make room at capacity together.
const SweepBatch = 32

// SweepPause is how long a shard's batches stop sweeping after a sweep that
// examined 4 × SweepBatch records and found fewer than SweepBatch of them
// expired. Without it, a shard that always holds some expired record (a
// window of a few milliseconds, hit steadily) would sweep on every batch,
// and an RPC making several batches would pay for several sweeps. Expired
// records then make up less than about a quarter of such a shard, plus
// what expires within one pause; a sweep that finds more keeps sweeping on
// every millisecond, and a batch that needs room at capacity sweeps
// regardless.
const SweepPause = 100 * time.Millisecond

// Config configures a Store. The zero value is not valid; start from
// DefaultConfig.
type Config struct {
	// MaxKeys caps the records held, across all partitions.
	MaxKeys int
	// Shards is the number of independently locked shards; a power of two.
	Shards int
	// Clock is the store's time authority. Nil means the system clock.
	Clock engine.Clock
}

// DefaultConfig returns a configuration holding up to 1,000,000 records in
// 64 shards on the system clock.
func DefaultConfig() Config {
	return Config{MaxKeys: 1_000_000, Shards: 64}
}

// Validate reports whether c is usable.
func (c Config) Validate() error {
	if c.MaxKeys < 1 {
		return fmt.Errorf("%w: memstore MaxKeys %d must be positive", engine.ErrInvalid, c.MaxKeys)
	}
	if c.Shards < 1 || c.Shards > 1<<16 || c.Shards&(c.Shards-1) != 0 {
		return fmt.Errorf("%w: memstore Shards %d must be a power of two up to 65536", engine.ErrInvalid, c.Shards)
	}
	return nil
}

// Store is the in-memory store. It is safe for concurrent use.
type Store struct {
	clock  engine.Clock
	seed   maphash.Seed // hashes partition names, choosing their shards
	mask   uint64
	max    int64
	keys   atomic.Int64
	closed atomic.Bool
	shards []shard
	// noFastPath sends every batch through the executor, so that tests can
	// hold the fast path to it.
	noFastPath bool
}

// A shard holds every record of the partitions whose names hash to it in
// one map, keyed by a 64-bit hash of the record's partition and key
// together (see view.hash). One map rather than a map of partitions each
// holding a map of records means one hash of the key (the partition's
// chose the shard) and two memory reads (the map slot, the record with its
// partition and key after it) to find a record, which is what a hit costs
// among millions of keys. Records whose partition and key hash
// alike, which a 64-bit keyed hash makes rare, share the slot in a chain
// (record.next); the record's own copy of its partition and key tells them
// apart. See docs/decisions/0073-memstore-records-by-hash.md.
type shard struct {
	mu   sync.Mutex
	recs map[uint64]*record
	seed maphash.Seed // hashes keys; the store's, shared by every shard
	// hashMask is all ones; tests narrow it so that keys collide.
	hashMask uint64
	// nextExpiry is a lower bound on the earliest expiry in the shard:
	// before it, nothing can be swept.
	nextExpiry int64
	// pausedUntil is when batches may sweep the shard again in passing
	// after a sweep that stopped early: the next millisecond, or after
	// SweepPause if it found few expired records; a batch that needs room
	// at capacity ignores it.
	pausedUntil int64
	exec        engine.Executor
	view        view            // the partition being run, lent to exec
	one         [1]engine.Write // the write runHit reserves a key for
	_           [64]byte        // keep neighbouring shards' locks off one cache line
}

// view is the engine.View of the partition a shard is running a batch on.
// It remembers its last lookup, so that committing the one write of a
// typical hit finds the record without hashing again.
type view struct {
	sh        *shard
	partition string
	phash     uint64 // the hash of partition that chose sh
	hasLast   bool
	lastKey   string
	last      *record // nil when lastKey is absent
	// lastHash is lastKey's shard map key and lastHead the chain there,
	// so that creating the record a lookup missed hashes and reads the map
	// no more.
	lastHash uint64
	lastHead *record
}

func (v *view) reset(sh *shard, partition string, phash uint64) {
	v.sh, v.partition, v.phash = sh, partition, phash
	v.forget()
}

// forget drops the remembered lookup. It must be called whenever a record
// is removed from the shard.
func (v *view) forget() { v.hasLast, v.lastKey, v.last, v.lastHead = false, "", nil, nil }

// hash returns the shard map key of key in v's partition: the partition's
// hash, which chose the shard, combined with the key's under a second seed.
// Distinct (partition, key) pairs collide only as two random 64-bit values
// do; the map's own hash of this value spreads the slots.
func (v *view) hash(key string) uint64 {
	return (v.phash ^ maphash.String(v.sh.seed, key)) & v.sh.hashMask
}

// lookup returns the record at key in v's partition, or nil.
func (v *view) lookup(key string) *record {
	if v.hasLast && key == v.lastKey {
		return v.last
	}
	h := v.hash(key)
	head := v.sh.recs[h]
	r := head
	for r != nil && !r.is(v.partition, key) {
		r = r.next
	}
	v.hasLast, v.lastKey, v.last, v.lastHash, v.lastHead = true, key, r, h, head
	return r
}

// create adds an empty record at key in v's partition, which must not hold
// one, and returns it. The caller has reserved it against the cap.
func (v *view) create(key string) *record {
	if !v.hasLast || key != v.lastKey {
		v.lookup(key)
	}
	r := newRecord(v.partition, key)
	r.next = v.lastHead
	v.sh.recs[v.lastHash] = r
	// The new record is what a lookup of key now finds, at the head of
	// its chain; no other key's record has moved.
	v.last, v.lastHead = r, r
	return r
}

// remove removes r, the record at key in v's partition, from the shard.
func (v *view) remove(key string, r *record) {
	h := v.hash(key)
	v.sh.unlink(h, r, v.sh.recs[h], nil)
	v.forget()
}

// unlink removes r from the chain at h, whose head is head. prev is r's
// predecessor in the chain, or nil if r is the head or the caller does not
// know it.
func (sh *shard) unlink(h uint64, r, head, prev *record) {
	if prev == nil && head != r {
		for prev = head; prev.next != r; prev = prev.next {
		}
	}
	switch {
	case prev != nil:
		prev.next = r.next
	case r.next != nil:
		sh.recs[h] = r.next
	default:
		delete(sh.recs, h)
	}
	r.next = nil
}

// Get implements engine.View.
func (v *view) Get(key string) (engine.Record, bool) {
	if r := v.lookup(key); r != nil {
		return r.Record, true
	}
	return engine.Record{}, false
}

// New returns a Store configured by cfg.
func New(cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	clock := cfg.Clock
	if clock == nil {
		clock = engine.SystemClock{}
	}
	s := &Store{
		clock:  clock,
		seed:   maphash.MakeSeed(),
		mask:   uint64(cfg.Shards - 1),
		max:    int64(cfg.MaxKeys),
		shards: make([]shard, cfg.Shards),
	}
	keySeed := maphash.MakeSeed()
	for i := range s.shards {
		s.shards[i].recs = make(map[uint64]*record)
		s.shards[i].seed = keySeed
		s.shards[i].hashMask = math.MaxUint64
		s.shards[i].nextExpiry = math.MaxInt64
	}
	return s, nil
}

// Len returns the number of records held, including expired ones not yet
// swept.
func (s *Store) Len() int { return int(s.keys.Load()) }

// Close marks the store closed; later calls fail with engine.ErrClosed.
func (s *Store) Close() error {
	s.closed.Store(true)
	return nil
}

// Apply runs b atomically on its partition. See engine.Store.
func (s *Store) Apply(ctx context.Context, b *engine.Batch, out *engine.StepResult) error {
	if s.closed.Load() {
		return engine.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	phash := maphash.String(s.seed, b.Partition)
	sh := &s.shards[phash&s.mask]
	sh.mu.Lock()
	defer sh.mu.Unlock()

	now := engine.UnixMilli(s.clock)
	left := SweepBatch // what the batch's sweeps may still remove
	if now >= sh.nextExpiry && now >= sh.pausedUntil {
		left -= s.sweep(sh, now, false, left)
	}
	if hitShape(b) && !s.noFastPath {
		if done, err := s.runHit(sh, b, phash, now, left, out); done {
			return err
		}
	}
	if reserveShape(b) && !s.noFastPath && s.runReserve(sh, b, phash, now, out) {
		return nil
	}
	v := &sh.view
	v.reset(sh, b.Partition, phash)
	defer v.reset(nil, "", 0) // hold no reference to the caller's strings
	writes, err := sh.exec.Run(v, now, b, out)
	if err != nil || len(writes) == 0 {
		return err
	}
	cs := [1]change{{v, writes}}
	if err := s.reserveKeys(now, left, cs[:]); err != nil {
		return err
	}
	s.commit(v, writes)
	return nil
}

// change is a batch's writes, evaluated on v, waiting to be committed.
type change struct {
	v      *view
	writes []engine.Write
}

// commit applies writes to v's partition. The keys they create have been
// reserved (reserveKeys).
func (s *Store) commit(v *view, writes []engine.Write) {
	sh := v.sh
	for i := range writes {
		w := &writes[i]
		if rewritten(writes, i) {
			continue // only a key's last write takes effect
		}
		r := v.lookup(w.Key)
		if w.Delete {
			if r != nil {
				v.remove(w.Key, r)
				s.keys.Add(-1)
			}
			continue
		}
		if r == nil {
			r = v.create(w.Key)
		}
		r.set(w.Rec)
		sh.nextExpiry = min(sh.nextExpiry, r.ExpireAt)
	}
}

// reserveKeys counts the keys the changes would create and reserves them
// against the cap. If the store is full it sweeps expired records, first
// from the changes' shards, then from the others, removing at most left
// (what the batch's sweeps may still remove: SweepBatch in all); a sweep
// may remove expired records that the changes then create anew, so each
// attempt counts again. These sweeps examine a whole shard if need be: a
// new key is refused only when no shard it could sweep holds an expired
// record, or the batch has already removed SweepBatch records (room that
// concurrent batches took meanwhile). A shard's earliest expiry gates
// them, so a full store refusing new keys scans a shard again only once
// one of its records has expired. The caller holds the lock of every
// change's shard.
func (s *Store) reserveKeys(now int64, left int, cs []change) error {
	for attempt := 0; ; attempt++ {
		var created int64
		for _, c := range cs {
			for i := range c.writes {
				w := &c.writes[i]
				if w.Delete || rewritten(c.writes, i) || c.v.lookup(w.Key) != nil {
					continue // not created, or counted at its last write, or exists already
				}
				created++
			}
		}
		if created == 0 || s.keys.Add(created) <= s.max {
			return nil
		}
		s.keys.Add(-created)
		if attempt > 1 || left <= 0 {
			return fmt.Errorf("%w: %d records held (max %d)", engine.ErrCapacity, s.keys.Load(), s.max)
		}
		if attempt == 0 {
			for k, c := range cs {
				if sh := c.v.sh; now >= sh.nextExpiry && !slices.ContainsFunc(cs[:k], func(o change) bool { return o.v.sh == sh }) {
					left -= s.sweep(sh, now, true, left)
				}
			}
			for _, c := range cs {
				c.v.forget() // a sweep may have removed what it remembers
			}
			continue
		}
		// The other shards the changes hold are locked: sweepOthers skips
		// them.
		left -= s.sweepOthers(cs[0].v.sh, now, created, left)
	}
}

// sweepOthers sweeps the shards but sh that hold expired records until it
// has removed need records, or left, so that an expired record anywhere
// makes room for a new key. It skips a shard whose lock is taken rather
// than wait: the caller holds sh's lock (and, in a joint step, the locks
// of other shards, whose TryLock fails), and waiting could deadlock with a
// batch doing the same from that shard. It returns the records removed.
func (s *Store) sweepOthers(sh *shard, now, need int64, left int) int {
	removed := 0
	for i := 0; i < len(s.shards) && int64(removed) < need && removed < left; i++ {
		o := &s.shards[i]
		if o == sh || !o.mu.TryLock() {
			continue
		}
		if now >= o.nextExpiry {
			removed += s.sweep(o, now, true, left-removed)
		}
		o.mu.Unlock()
	}
	return removed
}

// rewritten reports whether a later write in writes touches the key of
// writes[i].
func rewritten(writes []engine.Write, i int) bool {
	for j := i + 1; j < len(writes); j++ {
		if writes[j].Key == writes[i].Key {
			return true
		}
	}
	return false
}

// sweep removes up to limit (at most SweepBatch) expired records from sh.
// A routine sweep, the one a batch makes in passing, examines at most 4 ×
// SweepBatch records; a sweep for room (full) examines the whole shard if
// need be. When a sweep examines the whole shard it also recomputes the
// shard's earliest expiry. It returns the number of records removed.
func (s *Store) sweep(sh *shard, now int64, full bool, limit int) int {
	if limit <= 0 {
		return 0
	}
	removed, examined := 0, 0
	next := int64(math.MaxInt64)
	complete := true
scan:
	for h, head := range sh.recs {
		var prev *record
		for r := head; r != nil; {
			examined++
			after := r.next
			if !r.Live(now) {
				sh.unlink(h, r, head, prev)
				if prev == nil {
					head = after
				}
				s.keys.Add(-1)
				removed++
			} else {
				next = min(next, r.ExpireAt)
				prev = r
			}
			r = after
			if removed == limit || !full && examined == 4*SweepBatch {
				complete = false
				break scan
			}
		}
	}
	if removed > 0 {
		sh.view.forget()
	}
	if complete {
		sh.nextExpiry = next
	} else if removed < limit {
		// Few of the records examined had expired: sweeping on every batch
		// would cost more than those records do.
		sh.pausedUntil = now + SweepPause.Milliseconds()
	} else {
		// More may be expired: look again from the next millisecond, so a
		// large shard is swept steadily without every batch paying for it.
		sh.pausedUntil = now + 1
	}
	return removed
}
