package memstore

import (
	"context"
	"reflect"
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
// keys of every length (some fit inside a record, some do not), and must
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
		// Partitions and keys around the inline limit of 52 bytes together.
		partitions := []string{"p", "q", strings.Repeat("p", 40), strings.Repeat("q", 51)}
		keys := []string{"a", "b", strings.Repeat("k", 11), strings.Repeat("k", 12), strings.Repeat("k", 60)}
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
			var outPlain, outNarrow engine.StepResult
			errPlain := plain.Apply(context.Background(), &b, &outPlain)
			errNarrow := narrow.Apply(context.Background(), &b, &outNarrow)
			if (errPlain == nil) != (errNarrow == nil) || errPlain != nil && !sameError(errPlain, errNarrow) {
				t.Fatalf("batch %d %+v: error %v, with colliding keys %v", i, b, errPlain, errNarrow)
			}
			if errPlain == nil && !reflect.DeepEqual(normal(outPlain), normal(outNarrow)) {
				t.Fatalf("batch %d %+v:\n%+v\nwith colliding keys\n%+v", i, b, outPlain, outNarrow)
			}
			if plain.Len() != narrow.Len() {
				t.Fatalf("batch %d %+v: %d keys, with colliding keys %d", i, b, plain.Len(), narrow.Len())
			}
		}
	})
}

// A record, its partition and key inside it, fills the allocator's
// 144-byte size class, the figure docs/operations.md gives.
func TestRecordSize(t *testing.T) {
	if n := unsafe.Sizeof(record{}); n != 144 {
		t.Fatalf("record is %d bytes, want 144", n)
	}
}

// Creating a record is one allocation: the record, its partition and key
// inside it (BenchmarkHitNewKey measures the time).
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
