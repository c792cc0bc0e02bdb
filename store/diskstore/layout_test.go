package diskstore

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"pgregory.net/rapid"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/testclock"
)

// name draws an opaque name of 1…24 bytes, NUL and 0xff included.
func name(t *rapid.T, label string) string {
	return string(rapid.SliceOfN(rapid.SampledFrom([]byte{0, 1, 'a', 'b', 0xfe, 0xff}), 1, 24).Draw(t, label))
}

func TestRecordKeysNeverCollide(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p1, k1, p2, k2 := name(t, "p1"), name(t, "k1"), name(t, "p2"), name(t, "k2")
		rk1, rk2 := appendRecordKey(nil, p1, k1), appendRecordKey(nil, p2, k2)
		if same := p1 == p2 && k1 == k2; bytes.Equal(rk1, rk2) != same {
			t.Fatalf("(%q, %q) and (%q, %q) encode to %q and %q", p1, k1, p2, k2, rk1, rk2)
		}
		// A partition's scan prefix covers exactly its own records.
		if bytes.HasPrefix(rk2, appendPartitionPrefix(nil, p1)) != (p1 == p2) {
			t.Fatalf("the prefix of partition %q covers record (%q, %q): %v", p1, p2, k2, p1 != p2)
		}
		p, k, err := parseRecordKey(rk1)
		if err != nil || string(p) != p1 || string(k) != k1 {
			t.Fatalf("parseRecordKey(%q) = %q, %q, %v", rk1, p, k, err)
		}
	})
}

// TestBuckets checks the bucket arithmetic against its definition: bucket b
// holds the instants ((b-1)·bucketMs, b·bucketMs] and has ended at now once
// b·bucketMs ≤ now.
func TestBuckets(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		at := rapid.Int64Range(-1<<60, 1<<60).Draw(t, "t")
		b := bucketOf(at)
		if !((b-1)*bucketMs < at && at <= b*bucketMs) {
			t.Fatalf("bucketOf(%d) = %d, which holds (%d, %d]", at, b, (b-1)*bucketMs, b*bucketMs)
		}
		now := rapid.Int64Range(-1<<60, 1<<60).Draw(t, "now")
		last := lastEnded(now)
		if !(last*bucketMs <= now && now < (last+1)*bucketMs) {
			t.Fatalf("lastEnded(%d) = %d, ending at %d", now, last, last*bucketMs)
		}
		// A bucket has ended exactly when every instant in it is past.
		if ended, expired := b <= lastEnded(now), b*bucketMs <= now; ended != expired {
			t.Fatalf("bucket %d at %d: ended %v, every instant past %v", b, now, ended, expired)
		}
	})
}

func TestIndexKeysSortByBucket(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		b1, b2 := rapid.Int64().Draw(t, "b1"), rapid.Int64().Draw(t, "b2")
		seq1, seq2 := rapid.Uint32().Draw(t, "seq1"), rapid.Uint32().Draw(t, "seq2")
		rk1 := appendRecordKey(nil, name(t, "p1"), name(t, "k1"))
		rk2 := appendRecordKey(nil, name(t, "p2"), name(t, "k2"))
		x1, x2 := appendIndexKey(nil, b1, seq1, rk1), appendIndexKey(nil, b2, seq2, rk2)
		if b1 < b2 && bytes.Compare(x1, x2) >= 0 {
			t.Fatalf("an entry of bucket %d sorts after one of %d", b1, b2)
		}
		if b1 < b2 && bytes.Compare(x1, indexBound(b2)) >= 0 {
			t.Fatalf("an entry of bucket %d is not below the bound of %d", b1, b2)
		}
		if b1 >= b2 && bytes.Compare(x1, indexBound(b2)) < 0 {
			t.Fatalf("an entry of bucket %d is below the bound of %d", b1, b2)
		}
		if b1 == b2 && seq1 < seq2 && bytes.Compare(x1, x2) >= 0 {
			t.Fatalf("entry %d sorts after entry %d of the same bucket", seq1, seq2)
		}
		b, rk, err := parseIndexKey(nil, x1)
		if err != nil || b != b1 || !bytes.Equal(rk, rk1) {
			t.Fatalf("parseIndexKey(%q) = %d, %q, %v; want %d, %q", x1, b, rk, err, b1, rk1)
		}
	})
}

func TestReplayKeys(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		b1, b2 := rapid.Int64().Draw(t, "b1"), rapid.Int64().Draw(t, "b2")
		s1, s2 := rapid.ByteMax(replaySlices-1).Draw(t, "s1"), rapid.ByteMax(replaySlices-1).Draw(t, "s2")
		p1, k1, p2, k2 := name(t, "p1"), name(t, "k1"), name(t, "p2"), name(t, "k2")
		o1, o2 := appendReplayKey(nil, b1, s1, p1, k1), appendReplayKey(nil, b2, s2, p2, k2)
		if b1 < b2 && bytes.Compare(o1, o2) >= 0 {
			t.Fatalf("a replay key of bucket %d sorts after one of %d", b1, b2)
		}
		if b1 == b2 && s1 < s2 && bytes.Compare(o1, o2) >= 0 {
			t.Fatalf("a replay key of slice %d sorts after one of slice %d in the same bucket", s1, s2)
		}
		if b1 < b2 && bytes.Compare(o1, replayBound(b2)) >= 0 {
			t.Fatalf("a replay key of bucket %d is not below the bound of %d", b1, b2)
		}
		// A partition's prefix in a slice covers exactly its replay
		// records of that slice.
		if bytes.HasPrefix(o2, appendReplayPrefix(nil, b1, s1, p1)) != (b1 == b2 && s1 == s2 && p1 == p2) {
			t.Fatalf("the prefix of (%d, %d, %q) covers the replay record (%d, %d, %q, %q)", b1, s1, p1, b2, s2, p2, k2)
		}
		if sameReplay(o1, o2) != (b1 == b2 && p1 == p2 && k1 == k2) {
			t.Fatalf("sameReplay(%q, %q) = %v", o1, o2, !(b1 == b2 && p1 == p2 && k1 == k2))
		}
		b, sl, p, k, err := parseReplayKey(o1)
		if err != nil || b != b1 || sl != s1 || string(p) != p1 || string(k) != k1 {
			t.Fatalf("parseReplayKey(%q) = %d, %d, %q, %q, %v", o1, b, sl, p, k, err)
		}
	})
}

// TestReplaySlices checks that sliceOf cuts each bucket into replaySlices
// slices of replaySliceMs in order: the instants of a bucket that sort
// later fall in the same or a later slice.
func TestReplaySlices(t *testing.T) {
	for _, tc := range []struct {
		t    int64
		want byte
	}{
		{1, 0}, {replaySliceMs, 0}, {replaySliceMs + 1, 1},
		{bucketMs - 1, replaySlices - 1}, {bucketMs, replaySlices - 1}, {bucketMs + 1, 0},
		{0, replaySlices - 1}, {-bucketMs + 1, 0}, {-1, replaySlices - 1},
		{t0 + 180_000, byte((t0 + 180_000 - 1) % bucketMs / replaySliceMs)},
	} {
		if got := sliceOf(tc.t); got != tc.want {
			t.Errorf("sliceOf(%d) = %d, want %d", tc.t, got, tc.want)
		}
	}
	rapid.Check(t, func(t *rapid.T) {
		a := rapid.Int64Range(-1<<50, 1<<50).Draw(t, "a")
		b := a + rapid.Int64Range(0, 2*bucketMs).Draw(t, "d")
		sa, sb := sliceOf(a), sliceOf(b)
		if sa >= replaySlices || sb >= replaySlices {
			t.Fatalf("sliceOf(%d), sliceOf(%d) = %d, %d: past the last slice", a, b, sa, sb)
		}
		if bucketOf(a) == bucketOf(b) && sa > sb {
			t.Fatalf("sliceOf(%d) = %d after sliceOf(%d) = %d in one bucket", a, sa, b, sb)
		}
	})
}

func TestValueRoundTrip(t *testing.T) {
	rec := engine.Record{Kind: engine.RecLog, ExpireAt: -5, Data: []byte{1, 2, 3}}
	got, err := decodeValue(appendValue(nil, &rec))
	if err != nil || got.Kind != rec.Kind || got.ExpireAt != rec.ExpireAt || !bytes.Equal(got.Data, rec.Data) {
		t.Fatalf("round trip of %+v = %+v, %v", rec, got, err)
	}
	for _, bad := range [][]byte{nil, {byte(engine.RecValue), 0, 0}, make([]byte, recordHeader)} {
		if _, err := decodeValue(bad); err == nil {
			t.Errorf("decodeValue(%v) accepted a malformed value", bad)
		}
	}
}

// TestRecordsIsAMap checks the inline-first record set against a map.
func TestRecordsIsAMap(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var r records
		model := map[string]int64{}
		keys := []string{"a", "b", "c"}
		for i := range rapid.IntRange(0, 40).Draw(t, "ops") {
			key := rapid.SampledFrom(keys).Draw(t, "key")
			if rapid.Bool().Draw(t, "set") {
				r.set(key, engine.Record{ExpireAt: int64(i)})
				model[key] = int64(i)
			} else {
				r.del(key)
				delete(model, key)
			}
			if r.len() != len(model) {
				t.Fatalf("len %d, want %d", r.len(), len(model))
			}
			for _, k := range keys {
				rec, ok := r.get(k)
				want, wantOK := model[k]
				if ok != wantOK || rec.ExpireAt != want {
					t.Fatalf("get(%q) = %d, %v; want %d, %v", k, rec.ExpireAt, ok, want, wantOK)
				}
			}
		}
	})
}

func TestPresenceHasNoFalseNegatives(t *testing.T) {
	f := newPresence()
	rng := rand.New(rand.NewPCG(1, 2))
	const n = 100_000
	added := make([]uint64, n)
	for i := range added {
		added[i] = rng.Uint64()
		f.add(added[i])
	}
	for _, h := range added {
		if !f.mayContain(h) {
			t.Fatalf("hash %#x added but not found", h)
		}
	}
	falsePositives := 0
	for range n {
		if f.mayContain(rng.Uint64()) {
			falsePositives++
		}
	}
	if falsePositives > n/1000 {
		t.Errorf("%d false positives in %d lookups with %d partitions present", falsePositives, n, n)
	}
}

// TestShardChainsSharedHashes checks the shard map's handling of names
// sharing a hash, which the store's 64-bit seeded hash makes too rare to
// meet by chance: each is found under its own name, and removing any one
// leaves the others.
func TestShardChainsSharedHashes(t *testing.T) {
	for remove := range 3 {
		var sh shard
		sh.init()
		ps := []*partition{{name: "a", hash: 7}, {name: "b", hash: 7}, {name: "c", hash: 7}, {name: "d", hash: 8}}
		for _, p := range ps {
			sh.insert(p)
			sh.pushFront(p)
		}
		sh.remove(ps[remove])
		if sh.n != 3 {
			t.Fatalf("removing %q: %d resident, want 3", ps[remove].name, sh.n)
		}
		for i, p := range ps {
			got := sh.find(p.hash, p.name)
			if want := p; i == remove {
				want = nil
				if got != want {
					t.Fatalf("removing %q: still found", p.name)
				}
			} else if got != want {
				t.Fatalf("removing %q: find(%q) = %v", ps[remove].name, p.name, got)
			}
		}
		if sh.find(7, "e") != nil {
			t.Fatal("found a name never inserted")
		}
	}
}

// TestTablesStayInTheirNamespace checks that no table Pebble writes, in a
// flush or a compaction, holds rows of two namespaces (namespaceSpans):
// records, index entries, replay records and journal rows, all flushed
// together and compacted.
func TestTablesStayInTheirNamespace(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Clock = testclock.At(t0)
	s := openTest(t, cfg)
	eng := engine.New(s)
	for i := range 200 {
		req := &engine.Request{OperationID: fmt.Sprintf("op-%d", i), Steps: []engine.Step{{
			Partition: fmt.Sprintf("p%d", i%7), Commands: []engine.Command{engine.Incr("n", 1, 3_600_000)},
		}}}
		if _, err := eng.Do(t.Context(), req); err != nil {
			t.Fatal(err)
		}
		if i == 100 {
			checkpoint(t, s) // record and replay rows; the rest stay in the journal
		}
	}
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	check := func(when string) {
		t.Helper()
		levels, err := s.db.SSTables()
		if err != nil {
			t.Fatal(err)
		}
		namespaces := map[byte]bool{}
		for _, tables := range levels {
			for _, tb := range tables {
				lo, hi := tb.Smallest.UserKey, tb.Largest.UserKey
				if tb.Largest.IsExclusiveSentinel() && len(lo) > 0 && bytes.Equal(hi, []byte{lo[0] + 1}) {
					hi = lo // a range deletion to the namespace's end
				}
				if len(lo) == 0 || len(hi) == 0 || lo[0] != hi[0] {
					t.Errorf("%s: a table spans %q to %q", when, lo, hi)
					continue
				}
				namespaces[lo[0]] = true
			}
		}
		for _, ns := range []byte{nsRecord, nsIndex, nsReplay, nsJournal} {
			if !namespaces[ns] {
				t.Errorf("%s: no table of namespace %q: the test would prove nothing", when, ns)
			}
		}
	}
	check("flushed")
	if err := s.db.Compact(t.Context(), []byte{0}, []byte{0xff}, false); err != nil {
		t.Fatal(err)
	}
	check("compacted")
}
