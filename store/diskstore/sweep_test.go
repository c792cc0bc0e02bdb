package diskstore

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/testclock"
)

const t0 = int64(1_800_000_000_000) // a fixed instant, Unix ms

// fillExpiring writes perPartition kv records with a one-second TTL and one
// record with a one-hour TTL ("keep") into each of parts partitions.
func fillExpiring(t *testing.T, s *Store, parts, perPartition int) {
	t.Helper()
	for p := range parts {
		name := fmt.Sprintf("p%d", p)
		apply(t, s, name, engine.Set("keep", "v", 3_600_000))
		for k := 0; k < perPartition; k += 8 {
			var cmds []engine.Command
			for j := k; j < min(k+8, perPartition); j++ {
				cmds = append(cmds, engine.Set(fmt.Sprintf("k%d", j), "v", 1000))
			}
			apply(t, s, name, cmds...)
		}
	}
}

func TestSweepIsBoundedPerPass(t *testing.T) {
	for _, evicted := range []bool{false, true} {
		t.Run(fmt.Sprintf("evicted=%v", evicted), func(t *testing.T) {
			clock := testclock.At(t0)
			cfg := DefaultConfig()
			cfg.Clock = clock
			cfg.SweepInterval = time.Hour // passes are run by hand
			s := openTest(t, cfg)
			const parts, per = 50, 50
			fillExpiring(t, s, parts, per)
			if got, want := countKeys(t, s, []byte{nsRecord}), parts*(per+1); got != want {
				t.Fatalf("%d record rows, want %d", got, want)
			}
			if evicted {
				s.evictIdle(math.MaxInt64, math.MaxInt)
				if n := s.Resident(); n != 0 {
					t.Fatalf("%d partitions resident after evicting all", n)
				}
			}

			// The one-second records' bucket ends a minute after t0.
			clock.Advance(time.Minute)
			now := engine.UnixMilli(clock)
			var passes []int
			for range 5 {
				n, err := s.sweep(now)
				if err != nil {
					t.Fatal(err)
				}
				passes = append(passes, n)
			}
			if want := []int{1000, 1000, 500, 0, 0}; fmt.Sprint(passes) != fmt.Sprint(want) {
				t.Fatalf("passes deleted %v, want %v", passes, want)
			}
			if got := countKeys(t, s, []byte{nsRecord}); got != parts {
				t.Errorf("%d record rows left, want %d (the live ones)", got, parts)
			}
			if got := countKeys(t, s, []byte{nsIndex}); got != parts {
				t.Errorf("%d expiry index entries left, want %d", got, parts)
			}
			if evicted {
				if n := s.Resident(); n != 0 {
					t.Errorf("the sweep left %d partitions resident", n)
				}
			} else {
				for p := range parts {
					part := s.pin(fmt.Sprintf("p%d", p))
					part.pins.Add(-1)
					if n := part.recs.len(); n != 1 {
						t.Fatalf("partition %s holds %d records in memory, want 1", part.name, n)
					}
				}
			}
			out := apply(t, s, "p7", engine.Get("keep"), engine.Get("k3"))
			if !out.Results[0].Found || out.Results[1].Found {
				t.Errorf("after the sweep: keep found=%v, k3 found=%v; want true, false", out.Results[0].Found, out.Results[1].Found)
			}
		})
	}
}

// TestSweepEmptiesIdlePartition fills one partition with every kind of
// record, lets them all expire, and checks the sweep leaves nothing of it on
// disk.
func TestSweepEmptiesIdlePartition(t *testing.T) {
	clock := testclock.At(t0)
	cfg := DefaultConfig()
	cfg.Clock = clock
	cfg.SweepInterval = time.Hour
	s := openTest(t, cfg)

	const part = "tenant"
	windows := []engine.Window{
		{Key: "fixed", Kind: algo.KindFixed, Limit: 5, WindowMs: 10_000},
		{Key: "sliding", Kind: algo.KindSliding, Limit: 5, WindowMs: 10_000},
		{Key: "log", Kind: algo.KindLog, Limit: 5, WindowMs: 10_000},
		{Key: "gcra", Kind: algo.KindGCRA, Limit: 5, WindowMs: 10_000},
	}
	pace := engine.Pace{Key: "pace", Limit: 3, WindowMs: 10_000}
	apply(t, s, part,
		engine.Hit(1, windows...),
		engine.Set("value", "v", 10_000),
		engine.Incr("counter", 2, 10_000),
		engine.Reserve("receipt", 1, engine.Budget{Key: "budget", Limit: 5, WindowMs: 10_000, Refundable: true}),
		engine.Acquire("gate", "lease-1", 2, 10_000),
		pace.Take(1, 0),
	)
	resp, err := engine.New(s).Do(t.Context(), &engine.Request{
		OperationID: "op-1",
		Steps:       []engine.Step{{Partition: part, Commands: []engine.Command{engine.Incr("counter", 1, 10_000)}}},
	})
	if err != nil || resp.Steps[0].Replayed {
		t.Fatalf("Do: %v, %+v", err, resp)
	}
	prefix := appendPartitionPrefix(nil, part)
	if n := countKeys(t, s, prefix); n < 10 {
		t.Fatalf("%d rows on disk before expiry, want at least 10", n)
	}

	clock.Advance(time.Hour)
	for pass := 0; ; pass++ {
		n, err := s.sweep(engine.UnixMilli(clock))
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if pass == 3 {
			t.Fatal("the sweep does not converge")
		}
	}
	if n := countKeys(t, s, prefix); n != 0 {
		t.Errorf("%d record rows of the idle partition left on disk", n)
	}
	if n := countKeys(t, s, []byte{nsIndex}); n != 0 {
		t.Errorf("%d expiry index entries left on disk", n)
	}
	if n := countKeys(t, s, []byte{nsReplay}); n != 0 {
		t.Errorf("%d replay records left on disk", n)
	}
}

// TestSweepKeepsRenewedRecords checks that the sweep deletes a record only
// once it has expired: a record renewed into a later bucket survives the
// end of its first entry's bucket, and a record whose expiry was brought
// forward into an earlier bucket goes when that bucket ends.
func TestSweepKeepsRenewedRecords(t *testing.T) {
	for _, evict := range []bool{false, true} {
		t.Run(fmt.Sprintf("evicted=%v", evict), func(t *testing.T) {
			clock := testclock.At(t0)
			cfg := DefaultConfig()
			cfg.Clock = clock
			cfg.SweepInterval = time.Hour
			s := openTest(t, cfg)

			apply(t, s, "p", engine.Set("renewed", "v", 10_000), engine.Set("shortened", "v", 3_600_000))
			apply(t, s, "p", engine.Expire("renewed", 3_600_000), engine.Expire("shortened", 10_000))
			// Each record has its current entry and the one it left.
			if n := countKeys(t, s, []byte{nsIndex}); n != 4 {
				t.Fatalf("%d expiry index entries after moving two records, want 4", n)
			}

			// The first minute's bucket ends: "shortened" has expired,
			// "renewed" lives on.
			clock.Advance(time.Minute)
			if evict {
				s.evictIdle(math.MaxInt64, math.MaxInt) // check against disk, not memory
			}
			if n, err := s.sweep(engine.UnixMilli(clock)); err != nil || n != 1 {
				t.Fatalf("sweep deleted %d records (err %v), want 1", n, err)
			}
			out := apply(t, s, "p", engine.Get("renewed"))
			if !out.Results[0].Found {
				t.Fatal("the sweep deleted a renewed record")
			}
			if n := countKeys(t, s, appendPartitionPrefix(nil, "p")); n != 1 {
				t.Errorf("%d record rows left, want 1", n)
			}
			if n := countKeys(t, s, []byte{nsIndex}); n != 2 {
				t.Errorf("%d expiry index entries left, want 2 (both in the hour's bucket)", n)
			}

			clock.Advance(time.Hour)
			if n, err := s.sweep(engine.UnixMilli(clock)); err != nil || n != 1 {
				t.Fatalf("sweep an hour later deleted %d records (err %v), want 1", n, err)
			}
			if n := countKeys(t, s, []byte{nsRecord}) + countKeys(t, s, []byte{nsIndex}); n != 0 {
				t.Errorf("%d rows left", n)
			}
		})
	}
}

// TestIndexEntriesFollowBuckets checks what a round writes to Pebble: a
// record's row alone while its expiry stays in its bucket, an index entry
// besides when the record is new or its expiry moves to another bucket, and
// a replay record's row alone.
func TestIndexEntriesFollowBuckets(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Clock = testclock.At(t0)
	s := openTest(t, cfg)
	w := new(worker)
	base := int64(t0 + 10_000) // in the bucket ending at t0 + 1m
	rec := func(kind engine.RecordKind, expireAt int64) engine.Record {
		return engine.Record{Kind: kind, ExpireAt: expireAt, Data: []byte("data")}
	}
	for _, tc := range []struct {
		name  string
		write engine.Write
		want  []byte // the namespaces written, in order
	}{
		{"a new record", engine.Write{Key: "new", Rec: rec(engine.RecGCRA, base)}, []byte{nsRecord, nsIndex}},
		{"expiry unchanged", engine.Write{Key: "w", Rec: rec(engine.RecGCRA, base)}, []byte{nsRecord}},
		{"expiry later in the bucket", engine.Write{Key: "w", Rec: rec(engine.RecGCRA, t0+60_000)}, []byte{nsRecord}},
		{"expiry earlier in the bucket", engine.Write{Key: "w", Rec: rec(engine.RecGCRA, t0+1)}, []byte{nsRecord}},
		{"expiry in the next bucket", engine.Write{Key: "w", Rec: rec(engine.RecGCRA, t0+60_001)}, []byte{nsRecord, nsIndex}},
		{"expiry in an earlier bucket", engine.Write{Key: "w", Rec: rec(engine.RecGCRA, t0)}, []byte{nsRecord, nsIndex}},
		{"a deletion", engine.Write{Key: "w", Delete: true}, []byte{nsRecord}},
		{"an absent record's deletion", engine.Write{Key: "new", Delete: true}, nil},
		{"a replay record", engine.Write{Key: "\x00op\x00id\x000", Rec: rec(engine.RecReplay, t0+180_000)}, []byte{nsReplay}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &partition{name: "p"}
			p.recs.set("w", rec(engine.RecGCRA, base))
			var got []byte
			for ops := s.encode(w, nil, p, []engine.Write{tc.write}); len(ops) > 0; {
				_, key, _, rest, err := nextOp(ops)
				if err != nil {
					t.Fatal(err)
				}
				got, ops = append(got, key[0]), rest
			}
			if string(got) != string(tc.want) {
				t.Errorf("wrote rows in namespaces %q, want %q", got, tc.want)
			}
		})
	}
}

// TestSweepIsInvisible runs one random workload, replay-safe requests
// included, on a store swept after every batch and on one never swept:
// every answer must be the same, so the sweep never deletes a live record.
// Then every record expires, and the swept store must empty to nothing.
func TestSweepIsInvisible(t *testing.T) {
	clock := testclock.At(t0)
	newStore := func() *Store {
		cfg := DefaultConfig()
		cfg.Clock = clock
		cfg.Sync = SyncNever
		cfg.SweepInterval = time.Hour // passes are run by hand
		return openTest(t, cfg)
	}
	swept, kept := newStore(), newStore()
	w := &workload{rng: rand.New(rand.NewPCG(3, 4)), clock: clock}
	sweeps := 0
	for i := range 3000 {
		w.compare(t, i, swept, kept)
		if i%7 == 0 {
			swept.evictIdle(math.MaxInt64, math.MaxInt) // the sweep reads from disk too
		}
		n, err := swept.sweep(engine.UnixMilli(clock))
		if err != nil {
			t.Fatal(err)
		}
		sweeps += n
		clock.Advance(time.Duration(w.rng.IntN(2000)) * time.Millisecond)
	}
	if sweeps == 0 {
		t.Fatal("the sweep deleted nothing: the workload does not exercise it")
	}
	clock.Advance(24 * time.Hour)
	for pass := 0; ; pass++ {
		n, err := swept.sweep(engine.UnixMilli(clock))
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if pass == 100 {
			t.Fatal("the sweep does not converge")
		}
	}
	for _, ns := range []byte{nsRecord, nsIndex, nsReplay} {
		if n := countKeys(t, swept, []byte{ns}); n != 0 {
			t.Errorf("%d rows left in namespace %q a day after the last batch", n, ns)
		}
	}
}

// TestBackgroundLoop runs the store's background goroutine on a fake clock:
// the sweep empties expired partitions, idle partitions leave memory, and
// Close stops it all (synctest fails the test if a goroutine outlives the
// bubble).
func TestBackgroundLoop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clock := testclock.At(t0)
		cfg := DefaultConfig()
		cfg.Dir = "db"
		cfg.FS = vfs.NewMem()
		cfg.Clock = clock
		cfg.SweepInterval = time.Second
		cfg.IdleTimeout = time.Minute
		s, err := Open(cfg)
		if err != nil {
			t.Fatal(err)
		}
		fillExpiring(t, s, 3, 20)
		apply(t, s, "busy", engine.Set("k", "v", 3_600_000))

		clock.Advance(time.Minute) // the one-second records' bucket ends
		time.Sleep(cfg.SweepInterval + time.Millisecond)
		synctest.Wait()
		if n := countKeys(t, s, []byte{nsRecord}); n != 4 {
			t.Errorf("%d record rows after one sweep, want 4 (the live ones)", n)
		}
		if n := s.Resident(); n != 4 {
			t.Errorf("%d partitions resident before the idle timeout, want 4", n)
		}

		clock.Advance(2 * time.Minute)
		apply(t, s, "busy", engine.Get("k"))
		time.Sleep(cfg.SweepInterval)
		synctest.Wait()
		if n := s.Resident(); n != 1 {
			t.Errorf("%d partitions resident after the idle timeout, want 1 (the busy one)", n)
		}

		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Errorf("second Close: %v", err)
		}
	})
}

// TestSweepCommitsNothingAfterAFailedFsync runs a sweep pass that has read
// its index entries and waits for a partition's lock while an fsync fails:
// the pass deletes nothing once the store has failed, as no other commit
// does (see TestNothingIsLoggedAfterAFailedFsync).
func TestSweepCommitsNothingAfterAFailedFsync(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clock := testclock.At(t0)
		s, log := openStalled(t, func(cfg *Config) { cfg.Clock = clock; cfg.SweepInterval = time.Hour })
		apply(t, s, "p", engine.Incr("n", 1, 1_000))
		clock.Advance(time.Hour) // the record has expired, its bucket ended
		// The record's row is written, so the pass's own checkpoint has
		// nothing to take p's lock for.
		if err := s.checkpoint(engine.UnixMilli(clock)); err != nil {
			t.Fatal(err)
		}

		p := resident(s, "p")
		p.mu.Lock()
		swept := make(chan error, 1)
		go func() {
			_, err := s.sweep(engine.UnixMilli(clock))
			swept <- err
		}()
		for p.pins.Load() < 1 { // the pass has its entries and waits for p
			runtime.Gosched()
		}
		log.breakSync()
		if err := s.Sync(t.Context()); !errors.Is(err, engine.ErrUnavailable) {
			t.Fatalf("Sync with the fsync failing: %v, want ErrUnavailable", err)
		}
		before := s.db.Metrics().WAL.BytesIn
		p.mu.Unlock()
		if err := <-swept; !errors.Is(err, engine.ErrUnavailable) {
			t.Errorf("a sweep pass that began before the failure: %v, want ErrUnavailable", err)
		}
		if n := s.db.Metrics().WAL.BytesIn - before; n != 0 {
			t.Errorf("the sweep put %d bytes into the log after its fsync failed, want none", n)
		}
	})
}
