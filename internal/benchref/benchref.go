// Package benchref holds reference rate limiters that Sluice's benchmarks
// measure side by side with its stores. They are floors, not products: each
// does the least work a limiter of its kind can do, so a ratio against them
// shows what Sluice's atomicity, validation and bounds cost.
//
// Nothing outside benchmarks imports this package.
package benchref

import (
	"hash/maphash"
	"sync"
	"time"
)

// Buckets is the plainest shared limiter: a token bucket per key, float
// tokens refilled continuously, in a map split into independently locked
// shards chosen by a maphash of the key. It has no key cap, no expiry, no
// validation, no multi-window atomicity and no replay records.
type Buckets struct {
	seed   maphash.Seed
	mask   uint64
	perNs  float64 // tokens added per nanosecond
	burst  float64
	shards []bucketShard
}

type bucketShard struct {
	mu sync.Mutex
	m  map[string]*bucket
	_  [64]byte // keep neighbouring shards' locks off one cache line
}

type bucket struct {
	tokens float64
	last   int64 // Unix ns of the last refill
}

// NewBuckets returns buckets admitting limit hits per window, with a burst
// of limit, in shards shards (a power of two).
func NewBuckets(limit int64, window time.Duration, shards int) *Buckets {
	if shards < 1 || shards&(shards-1) != 0 {
		panic("benchref: shards must be a power of two")
	}
	b := &Buckets{
		seed:   maphash.MakeSeed(),
		mask:   uint64(shards - 1),
		perNs:  float64(limit) / float64(window.Nanoseconds()),
		burst:  float64(limit),
		shards: make([]bucketShard, shards),
	}
	for i := range b.shards {
		b.shards[i].m = make(map[string]*bucket)
	}
	return b
}

// Allow takes one token from key's bucket at the current time, creating a
// full bucket on first use, and reports whether there was one.
func (b *Buckets) Allow(key string) bool {
	sh := &b.shards[maphash.String(b.seed, key)&b.mask]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	now := time.Now().UnixNano()
	bk := sh.m[key]
	if bk == nil {
		bk = &bucket{tokens: b.burst, last: now}
		sh.m[key] = bk
	}
	if now > bk.last {
		bk.tokens = min(b.burst, bk.tokens+float64(now-bk.last)*b.perNs)
		bk.last = now
	}
	if bk.tokens < 1 {
		return false
	}
	bk.tokens--
	return true
}
