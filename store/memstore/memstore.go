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
// lazily: a batch removes at most 32 of them from its shard, and only when
// the shard's earliest expiry has passed, so the hot path pays nothing for
// expiry.
package memstore

import (
	"context"
	"fmt"
	"hash/maphash"
	"math"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/sluicehq/sluice/engine"
)

// SweepBatch is the most expired records one batch removes.
const SweepBatch = 32

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
	seed   maphash.Seed
	mask   uint64
	max    int64
	keys   atomic.Int64
	closed atomic.Bool
	shards []shard
}

type shard struct {
	mu    sync.Mutex
	parts map[string]*partition
	// nextExpiry is a lower bound on the earliest expiry in the shard:
	// before it, nothing can be swept.
	nextExpiry int64
	exec       engine.Executor
	_          [64]byte // keep neighbouring shards' locks off one cache line
}

// partition is the records of one partition; it implements engine.View.
type partition struct {
	recs map[string]engine.Record
}

func (p *partition) Get(key string) (engine.Record, bool) {
	r, ok := p.recs[key]
	return r, ok
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
	for i := range s.shards {
		s.shards[i].parts = make(map[string]*partition)
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
	sh := &s.shards[maphash.String(s.seed, b.Partition)&s.mask]
	sh.mu.Lock()
	defer sh.mu.Unlock()

	now := engine.UnixMilli(s.clock)
	if now >= sh.nextExpiry {
		s.sweep(sh, now)
	}
	p := sh.parts[b.Partition]
	view := engine.View(emptyView{})
	if p != nil {
		view = p
	}
	writes, err := sh.exec.Run(view, now, b, out)
	if err != nil {
		return err
	}
	if len(writes) == 0 {
		return nil
	}
	created := p == nil
	if created {
		p = &partition{recs: make(map[string]engine.Record, 1)}
	}
	if err := s.reserveKeys(sh, p, writes, now); err != nil {
		return err
	}
	if created {
		sh.parts[strings.Clone(b.Partition)] = p
	}
	for i := range writes {
		w := &writes[i]
		old, exists := p.recs[w.Key]
		if w.Delete {
			if exists {
				delete(p.recs, w.Key)
				s.keys.Add(-1)
			}
			continue
		}
		rec := w.Rec
		if exists && cap(old.Data) >= len(rec.Data) {
			// Reuse the record's buffer: the hot path allocates nothing.
			rec.Data = append(old.Data[:0], rec.Data...)
		} else {
			rec.Data = append([]byte(nil), rec.Data...)
		}
		key := w.Key
		if !exists {
			key = strings.Clone(key)
		}
		p.recs[key] = rec
		sh.nextExpiry = min(sh.nextExpiry, rec.ExpireAt)
	}
	if len(p.recs) == 0 {
		delete(sh.parts, b.Partition)
	}
	return nil
}

// reserveKeys counts the keys writes would create and reserves them against
// the cap, sweeping expired records first if the store is full.
func (s *Store) reserveKeys(sh *shard, p *partition, writes []engine.Write, now int64) error {
	var created int64
	for i := range writes {
		w := &writes[i]
		if _, ok := p.recs[w.Key]; ok || w.Delete || rewritten(writes, i) {
			continue // exists already, or not created, or counted at its last write
		}
		created++
	}
	if created == 0 {
		return nil
	}
	for range 2 {
		if s.keys.Add(created) <= s.max {
			return nil
		}
		s.keys.Add(-created)
		s.sweep(sh, now)
	}
	return fmt.Errorf("%w: %d records held (max %d)", engine.ErrCapacity, s.keys.Load(), s.max)
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

// sweep removes up to SweepBatch expired records from sh. When it examines
// the whole shard it also recomputes the shard's earliest expiry.
func (s *Store) sweep(sh *shard, now int64) {
	removed, examined := 0, 0
	next := int64(math.MaxInt64)
	complete := true
	for name, p := range sh.parts {
		for key, rec := range p.recs {
			examined++
			if !rec.Live(now) {
				delete(p.recs, key)
				s.keys.Add(-1)
				removed++
			} else {
				next = min(next, rec.ExpireAt)
			}
			if removed == SweepBatch || examined == 4*SweepBatch {
				complete = false
				break
			}
		}
		if len(p.recs) == 0 {
			delete(sh.parts, name)
		}
		if !complete {
			break
		}
	}
	if complete {
		sh.nextExpiry = next
	} else {
		// More may be expired: look again from the next millisecond, so a
		// large shard is swept steadily without every batch paying for it.
		sh.nextExpiry = now + 1
	}
}

type emptyView struct{}

func (emptyView) Get(string) (engine.Record, bool) { return engine.Record{}, false }
