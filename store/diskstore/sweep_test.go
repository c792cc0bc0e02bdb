package diskstore

import (
	"fmt"
	"math"
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

			clock.Advance(2 * time.Second)
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
			if got := countKeys(t, s, []byte{nsExpiry}); got != parts {
				t.Errorf("%d expiry entries left, want %d", got, parts)
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
	if n := countKeys(t, s, []byte{nsExpiry}); n != 0 {
		t.Errorf("%d expiry index entries left on disk", n)
	}
}

// TestSweepRechecksExpiry checks that the sweep deletes a record only if it
// is still the one the index entry names, and still expired.
func TestSweepRechecksExpiry(t *testing.T) {
	clock := testclock.At(t0)
	cfg := DefaultConfig()
	cfg.Clock = clock
	cfg.SweepInterval = time.Hour
	s := openTest(t, cfg)

	apply(t, s, "p", engine.Set("k", "v", 10_000))
	apply(t, s, "p", engine.Expire("k", 3_600_000)) // renewed: the entry moves
	if n := countKeys(t, s, []byte{nsExpiry}); n != 1 {
		t.Fatalf("%d expiry entries after renewing, want exactly 1", n)
	}
	// A stale entry at the old expiry, as a crash between two versions of
	// the layout might leave: the sweep must drop it and keep the record.
	rk := appendRecordKey(nil, "p", "k")
	if err := s.db.Set(appendExpiryKey(nil, t0+10_000, rk), nil, nil); err != nil {
		t.Fatal(err)
	}

	clock.Advance(20 * time.Second)
	for _, evict := range []bool{false, true} {
		if evict {
			s.evictIdle(math.MaxInt64, math.MaxInt) // check against disk, not memory
		}
		n, err := s.sweep(engine.UnixMilli(clock))
		if err != nil || n != 0 {
			t.Fatalf("sweep deleted %d records (err %v), want 0", n, err)
		}
		if out := apply(t, s, "p", engine.Get("k")); !out.Results[0].Found {
			t.Fatal("the sweep deleted a renewed record")
		}
	}
	if n := countKeys(t, s, []byte{nsExpiry}); n != 1 {
		t.Errorf("%d expiry entries left, want 1 (the stale one dropped)", n)
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

		clock.Advance(2 * time.Second)
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
