package diskstore

import (
	"math"
	"slices"
	"sync"
	"sync/atomic"
)

// A partition loaded from disk reads its replay records' keys with a seek
// in every bucket that has not ended (loadReplays). A partition with none,
// one not written to in the last engine.ReplayTTL, still paid for those
// seeks: each opens the tables that span the replay namespace to find
// nothing, and it was 17 % of a cold hit's time in BenchmarkColdPartitions.
// So the store keeps, for each bucket, a Bloom filter of the partitions
// that may have replay records in it, and a load seeks only in the buckets
// whose filter holds its partition: none, for a partition without replay
// records (but for a false positive).
//
// A filter has no false negatives: a commit marks its partition in the
// bucket of each replay record it writes, under the partition's lock
// before the record is written (encode), and Open marks every replay
// record on disk in a bucket that has not ended (fillPresence), after
// applying the journal. A load, under the same lock, thus sees the marks
// of every replay record the partition has.
//
// The filters live in replaySlots slots, bucket b in slot b mod
// replaySlots. A slot is given to a new bucket, and emptied, when the
// first record of the new bucket is marked. With the clock moving
// forward, the slot's old bucket ended minutes before: a record is written
// in the bucket of now+ReplayTTL, at most ReplayTTL/bucketMs + 1 buckets
// ahead of the first bucket not ended. A mark for a bucket older than its
// slot's (the clock moved back by more than the slots span) spoils the
// filters: from then on, until the store is reopened, every load seeks in
// every bucket, as before.

const (
	// replaySlots is the number of buckets with a filter: bucket b's is in
	// slot b mod replaySlots.
	replaySlots = 8
	// replayFilterBits is the size of each bucket's filter: 512 KiB, about
	// 3 % false positives with 500,000 partitions marked in one bucket.
	replayFilterBits = 1 << 22
	// noBucket is the bucket of a slot never used.
	noBucket = math.MinInt64
)

type replayMarks struct {
	mu     sync.Mutex // held to give a slot to a new bucket
	slots  [replaySlots]replaySlot
	spoilt atomic.Bool
}

type replaySlot struct {
	b atomic.Int64 // the bucket whose marks the filter holds
	f *presence
}

func newReplayMarks() *replayMarks {
	m := new(replayMarks)
	for i := range m.slots {
		m.slots[i].b.Store(noBucket)
		m.slots[i].f = newFilter(replayFilterBits)
	}
	return m
}

func slotOf(b int64) int { return int(uint64(b) % replaySlots) }

// mark records that the partition whose hash is h may have replay records
// in bucket b.
func (m *replayMarks) mark(b int64, h uint64) {
	sl := &m.slots[slotOf(b)]
	if sl.b.Load() != b && !m.claim(sl, b) {
		return
	}
	sl.f.add(h)
}

// claim gives sl to bucket b unless it holds a later bucket, which spoils
// the filters; it reports whether sl holds b.
func (m *replayMarks) claim(sl *replaySlot, b int64) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch old := sl.b.Load(); {
	case old == b:
		return true
	case old > b:
		m.spoilt.Store(true)
		return false
	}
	sl.f.clear()
	sl.b.Store(b)
	return true
}

// candidates appends to dst, in increasing order, the buckets after ended
// in which the partition whose hash is h may have replay records; all
// reports that any bucket may hold some, the filters being spoilt.
func (m *replayMarks) candidates(dst []int64, h uint64, ended int64) (bs []int64, all bool) {
	if m.spoilt.Load() {
		return dst, true
	}
	for i := range m.slots {
		sl := &m.slots[i]
		if b := sl.b.Load(); b > ended && sl.f.mayContain(h) {
			dst = append(dst, b)
		}
	}
	slices.Sort(dst)
	return dst, false
}

// markReplay marks p in bucket b for its next load, once per bucket. The
// caller holds p.mu.
func (s *Store) markReplay(p *partition, b int64) {
	if p.markedReplays != b {
		s.replayMarks.mark(b, p.hash)
		p.markedReplays = b
	}
}
