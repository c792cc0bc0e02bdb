package diskstore_test

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/testclock"
	"github.com/sluicehq/sluice/store/diskstore"
	"github.com/sluicehq/sluice/store/storetest"
)

const t0 = int64(1_800_000_000_000) // a fixed instant, Unix ms

// TestConformance runs the store conformance suite on a diskstore in a
// fresh directory, with the default configuration (fsync always) and under
// fsync interval, whose answers take the same path with the log's fsyncs
// deferred.
func TestConformance(t *testing.T) {
	for _, sync := range []diskstore.SyncPolicy{diskstore.SyncAlways, diskstore.SyncOnInterval} {
		t.Run(string(sync), func(t *testing.T) {
			storetest.Run(t, func(t *testing.T, clock engine.Clock) engine.Store {
				cfg := diskstore.DefaultConfig()
				cfg.Dir = t.TempDir()
				cfg.Clock = clock
				cfg.Sync = sync
				s, err := diskstore.Open(cfg)
				if err != nil {
					t.Fatal(err)
				}
				return s
			})
		})
	}
}

func open(t *testing.T, cfg diskstore.Config) *diskstore.Store {
	t.Helper()
	s, err := diskstore.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func closeStore(t *testing.T, s *diskstore.Store) {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

func apply(t *testing.T, s engine.Store, partition string, cmds ...engine.Command) engine.StepResult {
	t.Helper()
	var out engine.StepResult
	if err := engine.New(s).Apply(t.Context(), partition, &out, cmds...); err != nil {
		t.Fatalf("apply on %q: %v", partition, err)
	}
	return out
}

// TestReopen checks that what a store acknowledged is there after Close and
// Open: a window's spend, a counter, and a replay record that still
// deduplicates.
func TestReopen(t *testing.T) {
	for _, sync := range []diskstore.SyncPolicy{diskstore.SyncAlways, diskstore.SyncOnInterval, diskstore.SyncNever} {
		t.Run(string(sync), func(t *testing.T) {
			clock := testclock.At(t0)
			cfg := diskstore.DefaultConfig()
			cfg.Dir = t.TempDir()
			cfg.Clock = clock
			cfg.Sync = sync
			window := engine.Window{Key: "w", Kind: algo.KindFixed, Limit: 5, WindowMs: 60_000}
			req := &engine.Request{
				OperationID: "op-1",
				Steps: []engine.Step{{Partition: "tenant", Commands: []engine.Command{
					engine.Incr("n", 7, 60_000),
					engine.Hit(1, engine.Window{Key: "ow", Kind: algo.KindSliding, Limit: 3, WindowMs: 60_000}),
				}}},
			}

			s := open(t, cfg)
			for range 3 {
				apply(t, s, "tenant", engine.Hit(1, window))
			}
			first, err := engine.New(s).Do(t.Context(), req)
			if err != nil {
				t.Fatal(err)
			}
			closeStore(t, s)

			s = open(t, cfg)
			defer closeStore(t, s)
			if out := apply(t, s, "tenant", engine.Hit(2, window)); !out.Results[0].Allowed || out.Results[0].Remaining != 0 {
				t.Errorf("after reopening, a hit of 2 on a window of 5 spent 3: %+v, want allowed with 0 remaining", out.Results[0])
			}
			if out := apply(t, s, "tenant", engine.Hit(1, window)); out.Results[0].Allowed {
				t.Error("after reopening, a full window admitted a hit")
			}
			again, err := engine.New(s).Do(t.Context(), req)
			if err != nil {
				t.Fatal(err)
			}
			if !again.Steps[0].Replayed || !reflect.DeepEqual(again.Steps[0].Results, first.Steps[0].Results) {
				t.Errorf("replay after reopening = %+v, want the recorded %+v, replayed", again.Steps[0], first.Steps[0])
			}
			if out := apply(t, s, "tenant", engine.Get("n")); out.Results[0].Value != "7" {
				t.Errorf("counter after a replay = %q, want 7 (charged once)", out.Results[0].Value)
			}
			conflict := *req
			conflict.Steps = []engine.Step{{Partition: "tenant", Commands: []engine.Command{engine.Incr("n", 8, 60_000)}}}
			if _, err := engine.New(s).Do(t.Context(), &conflict); !errors.Is(err, engine.ErrOperationConflict) {
				t.Errorf("operation id reused with other commands after reopening: %v, want ErrOperationConflict", err)
			}
		})
	}
}

// TestMaxResident checks that the resident set stays within its bound.
func TestMaxResident(t *testing.T) {
	cfg := diskstore.DefaultConfig()
	cfg.Dir = t.TempDir()
	cfg.Sync = diskstore.SyncNever
	cfg.MaxResident = 128 // two per shard
	s := open(t, cfg)
	defer closeStore(t, s)
	for i := range 2000 {
		apply(t, s, fmt.Sprintf("p%d", i), engine.Incr("n", 1, 60_000))
	}
	if n := s.Resident(); n > cfg.MaxResident {
		t.Errorf("%d partitions resident, want at most %d", n, cfg.MaxResident)
	}
	// Evicted partitions come back from disk.
	for i := range 2000 {
		if got := apply(t, s, fmt.Sprintf("p%d", i), engine.Get("n")).Results[0].Value; got != "1" {
			t.Fatalf("p%d: n = %q after eviction, want 1", i, got)
		}
	}
}

func TestUnknownFormatIsRefused(t *testing.T) {
	dir := t.TempDir()
	cfg := diskstore.DefaultConfig()
	cfg.Dir = dir
	closeStore(t, open(t, cfg))

	db, err := pebble.Open(dir, &pebble.Options{Logger: quietLogger{}})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Set([]byte("mformat"), []byte{0, 0, 0, 99}, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	_, err = diskstore.Open(cfg)
	if !errors.Is(err, diskstore.ErrFormat) || !strings.Contains(err.Error(), "version 99") {
		t.Fatalf("Open of a version 99 store: %v, want ErrFormat naming version 99", err)
	}

	// A Pebble database that is not a store at all.
	other := t.TempDir()
	db, err = pebble.Open(other, &pebble.Options{Logger: quietLogger{}})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Set([]byte("someone else's key"), []byte("v"), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	cfg.Dir = other
	if _, err := diskstore.Open(cfg); !errors.Is(err, diskstore.ErrFormat) {
		t.Fatalf("Open of a foreign Pebble database: %v, want ErrFormat", err)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*diskstore.Config)
	}{
		{"no dir", func(c *diskstore.Config) { c.Dir = "" }},
		{"unknown sync", func(c *diskstore.Config) { c.Sync = "sometimes" }},
		{"interval without period", func(c *diskstore.Config) { c.Sync, c.SyncInterval = diskstore.SyncOnInterval, 0 }},
		{"no resident partitions", func(c *diskstore.Config) { c.MaxResident = 0 }},
		{"negative idle timeout", func(c *diskstore.Config) { c.IdleTimeout = -time.Second }},
		{"no sweep interval", func(c *diskstore.Config) { c.SweepInterval = 0 }},
		{"sweep limit zero", func(c *diskstore.Config) { c.SweepLimit = 0 }},
		{"sweep limit over 1000", func(c *diskstore.Config) { c.SweepLimit = 1001 }},
		{"negative cache", func(c *diskstore.Config) { c.CacheBytes = -1 }},
		{"tiny memtable", func(c *diskstore.Config) { c.MemTableBytes = 1024 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := diskstore.DefaultConfig()
			cfg.Dir = t.TempDir()
			tc.edit(&cfg)
			if err := cfg.Validate(); !errors.Is(err, engine.ErrInvalid) {
				t.Fatalf("Validate: %v, want ErrInvalid", err)
			}
			if _, err := diskstore.Open(cfg); !errors.Is(err, engine.ErrInvalid) {
				t.Fatalf("Open: %v, want ErrInvalid", err)
			}
		})
	}
	cfg := diskstore.DefaultConfig()
	cfg.Dir = "somewhere"
	if err := cfg.Validate(); err != nil {
		t.Errorf("DefaultConfig with a Dir: %v", err)
	}
}

// TestFailedCommitIsNeverServed makes the write-ahead log fail under a
// batch and checks that its effect is not served afterwards, from memory
// or from disk.
func TestFailedCommitIsNeverServed(t *testing.T) {
	var broken atomic.Bool
	walFails := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if broken.Load() && strings.HasSuffix(op.Path, ".log") && op.Kind.ReadOrWrite() == errorfs.OpIsWrite {
			return errorfs.ErrInjected
		}
		return nil
	})
	cfg := diskstore.DefaultConfig()
	cfg.Dir = t.TempDir()
	cfg.FS = errorfs.Wrap(vfs.Default, walFails)
	s := open(t, cfg)
	if out := apply(t, s, "p", engine.Incr("n", 1, 60_000)); out.Results[0].Int != 1 {
		t.Fatalf("first incr = %d, want 1", out.Results[0].Int)
	}

	broken.Store(true)
	var out engine.StepResult
	eng := engine.New(s)
	if err := eng.Apply(t.Context(), "p", &out, engine.Incr("n", 1, 60_000)); !errors.Is(err, engine.ErrUnavailable) {
		t.Fatalf("incr with a failing log: %v, want ErrUnavailable", err)
	}
	// The store must not answer from the memory that the failed batch
	// touched, on that partition or any other.
	for _, part := range []string{"p", "q"} {
		if err := eng.Apply(t.Context(), part, &out, engine.Get("n")); !errors.Is(err, engine.ErrUnavailable) {
			t.Fatalf("get on %s after a failed commit: %v (%+v), want ErrUnavailable", part, err, out)
		}
	}
	broken.Store(false)
	_ = s.Close() // reports the log's failure; the directory stays usable

	cfg.FS = nil
	s = open(t, cfg)
	defer closeStore(t, s)
	if got := apply(t, s, "p", engine.Get("n")).Results[0].Value; got != "1" {
		t.Errorf("after reopening, n = %q, want 1 (the failed increment absent)", got)
	}
}

func TestClose(t *testing.T) {
	cfg := diskstore.DefaultConfig()
	cfg.Dir = t.TempDir()
	s := open(t, cfg)
	apply(t, s, "p", engine.Set("k", "v", 60_000))
	closeStore(t, s)
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v, want nil", err)
	}
	var out engine.StepResult
	if err := engine.New(s).Apply(t.Context(), "p", &out, engine.Get("k")); !errors.Is(err, engine.ErrClosed) {
		t.Errorf("Apply after Close: %v, want ErrClosed", err)
	}
	// The directory's lock is released: it opens again.
	closeStore(t, open(t, cfg))
}
