package memstore

import (
	"context"
	"math"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"pgregory.net/rapid"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/testclock"
	"github.com/sluicehq/sluice/store/storetest"
)

// narrowHashes makes the shard map keys of s collide: only the bits of mask
// are kept, so a mask of 0 puts every record of a shard in one chain.
func (s *Store) narrowHashes(mask uint64) {
	for i := range s.shards {
		s.shards[i].hashMask = mask
	}
}

// The conformance suite passes when every record of a shard hashes alike,
// so that every lookup, creation, deletion and sweep walks one chain, with
// the fast paths on and off.
func TestConformanceWithCollidingKeys(t *testing.T) {
	for _, fast := range []bool{true, false} {
		t.Run("fast="+strconv.FormatBool(fast), func(t *testing.T) {
			storetest.Run(t, func(t *testing.T, clock engine.Clock) engine.Store {
				cfg := DefaultConfig()
				cfg.Clock = clock
				s, err := New(cfg)
				if err != nil {
					t.Fatal(err)
				}
				s.noFastPath = !fast
				s.narrowHashes(0)
				return s
			})
		})
	}
}

// A store whose keys collide answers exactly as one whose keys do not:
// two stores on one clock, one with its shard map keys narrowed to a few
// bits (every record in one chain, or in a few), run the same random
// batches of writes, deletions, window hits and reads over partitions and
// keys of lengths that fill records of several sizes, and must
// answer alike after every one and hold the same number of keys. The
// store is small enough to fill, and the clock moves on, so that sweeps
// remove records from the heads, middles and tails of chains.
func TestCollidingKeysMatch(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		clock := testclock.New(time.UnixMilli(1_700_000_000_000))
		maxKeys := rapid.IntRange(1, 12).Draw(t, "maxKeys")
		newStore := func() *Store {
			// One shard: the stores sweep alike.
			s, err := New(Config{MaxKeys: maxKeys, Shards: 1, Clock: clock})
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
		plain, narrow := newStore(), newStore()
		narrow.narrowHashes(rapid.SampledFrom([]uint64{0, 1, 3}).Draw(t, "mask"))
		// Partitions and keys of lengths that fill records of several
		// sizes, the longest allowed among them.
		partitions := []string{"p", "q", strings.Repeat("p", 40), strings.Repeat("q", 51), strings.Repeat("r", engine.MaxKeyBytes)}
		keys := []string{"a", "b", strings.Repeat("k", 11), strings.Repeat("k", 12), strings.Repeat("k", 60), strings.Repeat("l", engine.MaxKeyBytes)}
		for i := range rapid.IntRange(1, 80).Draw(t, "batches") {
			clock.Advance(time.Duration(rapid.IntRange(0, 1500).Draw(t, "advanceMs")) * time.Millisecond)
			key := func(label string) string { return rapid.SampledFrom(keys).Draw(t, label) }
			ttl := int64(rapid.IntRange(1, 4).Draw(t, "ttlSeconds")) * 1000
			b := engine.Batch{Partition: rapid.SampledFrom(partitions).Draw(t, "partition")}
			switch rapid.IntRange(0, 5).Draw(t, "shape") {
			case 0:
				b.Commands = []engine.Command{engine.Set(key("setKey"), strconv.Itoa(i), ttl)}
			case 1:
				b.Commands = []engine.Command{engine.Set(key("setKey1"), "v", ttl), engine.Set(key("setKey2"), "w", ttl)}
			case 2:
				b.Commands = []engine.Command{engine.Del(key("delKey"))}
			case 3:
				w := engine.Window{Key: key("windowKey"), Kind: algo.KindFixed, Limit: 3, WindowMs: ttl}
				b.Commands = []engine.Command{engine.Hit(1, w), engine.TTL(w.Key)}
			case 4:
				b.Commands = []engine.Command{engine.Get(key("getKey")), engine.Get(key("getKey2"))}
			case 5:
				k := key("tmpKey")
				b.Commands = []engine.Command{engine.Set(k, "t", ttl), engine.Del(k)}
			}
			if err := b.Validate(); err != nil {
				continue // a repeated key
			}
			applyBoth(t, i, &b, plain, "the plain store", narrow, "colliding keys")
		}
	})
}

// A record and the room for its partition and key fill one of the
// allocator's size classes exactly, for every length of partition and key:
// what newRecord allocates is the bytes each size reports, no more, and it
// holds the partition and key it was given.
func TestRecordSizes(t *testing.T) {
	if n := unsafe.Sizeof(record{}); n != 80 {
		t.Fatalf("record is %d bytes, want 80", n)
	}
	var stats runtime.MemStats
	// allocated returns the fewest bytes the process allocated over three
	// calls of f: anything else allocating meanwhile (the runtime, a
	// goroutine an earlier test left winding down) only adds.
	allocated := func(f func()) uint64 {
		fewest := uint64(math.MaxUint64)
		for range 3 {
			runtime.ReadMemStats(&stats)
			before := stats.TotalAlloc
			f()
			runtime.ReadMemStats(&stats)
			fewest = min(fewest, stats.TotalAlloc-before)
		}
		return fewest
	}
	for _, tc := range []struct{ n, bytes int }{
		{2, 96}, {16, 96}, {17, 112}, {32, 112}, {33, 128}, {48, 128}, {49, 144}, {64, 144},
		{65, 160}, {80, 160}, {81, 192}, {112, 192}, {113, 256}, {176, 256}, {177, 352},
		{272, 352}, {273, 512}, {432, 512}, {433, 1152}, {2 * engine.MaxKeyBytes, 1152},
	} {
		partition := strings.Repeat("p", tc.n/2)
		key := strings.Repeat("k", tc.n-tc.n/2)
		var r *record
		if got := allocated(func() { r = newRecord(partition, key) }); got != uint64(tc.bytes) {
			t.Errorf("a record of %d bytes of partition and key allocates %d bytes, want %d", tc.n, got, tc.bytes)
		}
		if !r.is(partition, key) || r.is(partition+"k", key[1:]) || r.is(partition, key[1:]+"p") {
			t.Errorf("a record of %d bytes of partition and key does not hold its own", tc.n)
		}
	}
}

// Creating a record is one allocation: the record, its partition and key
// after it (BenchmarkHitNewKey measures the time).
func TestCreatingARecordAllocatesOnce(t *testing.T) {
	s, err := New(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	win := engine.Window{Key: "default:fixed", Kind: algo.KindFixed, Limit: 10, WindowMs: 60_000}
	b := engine.Batch{Commands: []engine.Command{engine.Hit(1, win), engine.TTL(win.Key)}}
	var parts [1000]string
	for i := range parts {
		parts[i] = "route:" + strconv.FormatUint(uint64(i)*0x9e3779b97f4a7c15, 16)
	}
	var out engine.StepResult
	i := 0
	// The shard maps grow as records arrive; over 1,000 records spread
	// across 64 shards their growth is well under one allocation a record.
	allocs := testing.AllocsPerRun(len(parts)-1, func() {
		b.Partition = parts[i]
		i++
		if err := s.Apply(context.Background(), &b, &out); err != nil || out.Denied {
			t.Fatalf("hit: %v, denied %v", err, out.Denied)
		}
	})
	if s.Len() != len(parts) {
		t.Fatalf("Len() = %d, want %d", s.Len(), len(parts))
	}
	if allocs != 1 {
		t.Fatalf("creating a record: %v allocations, want 1", allocs)
	}
}
