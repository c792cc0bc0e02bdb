package diskstore

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"pgregory.net/rapid"

	"github.com/sluicehq/sluice/engine"
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

func TestExpiryKeysSortByExpiry(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		e1, e2 := rapid.Int64().Draw(t, "e1"), rapid.Int64().Draw(t, "e2")
		rk1 := appendRecordKey(nil, name(t, "p1"), name(t, "k1"))
		rk2 := appendRecordKey(nil, name(t, "p2"), name(t, "k2"))
		x1, x2 := appendExpiryKey(nil, e1, rk1), appendExpiryKey(nil, e2, rk2)
		if e1 < e2 && bytes.Compare(x1, x2) >= 0 {
			t.Fatalf("expiry %d sorts after %d", e1, e2)
		}
		if e1 < e2 && bytes.Compare(x1, expiryBound(e2)) >= 0 {
			t.Fatalf("expiry %d is not below the bound of %d", e1, e2)
		}
		at, rk, err := parseExpiryKey(nil, x1)
		if err != nil || at != e1 || !bytes.Equal(rk, rk1) {
			t.Fatalf("parseExpiryKey(%q) = %d, %q, %v; want %d, %q", x1, at, rk, err, e1, rk1)
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
