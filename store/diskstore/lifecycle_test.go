package diskstore

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/testclock"
)

// plant creates a store in a fresh directory, closes it, and then writes
// rows of its own into the directory with Pebble directly.
func plant(t *testing.T, rows map[string][]byte) string {
	t.Helper()
	dir := t.TempDir()
	cfg := DefaultConfig()
	cfg.Dir = dir
	s, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := pebble.Open(dir, &pebble.Options{Logger: pebbleLogger{slog.New(slog.DiscardHandler)}})
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range rows {
		if err := db.Set([]byte(k), v, pebble.NoSync); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestFailedOpenReleasesEverything makes Open fail on each of its error
// paths, on the operating system's file system (with Config.FS nil where
// the path allows), and checks that it leaves no goroutine behind and releases the directory's
// lock: Pebble can open the directory afterwards.
func TestFailedOpenReleasesEverything(t *testing.T) {
	// A record key whose partition length runs past its end.
	corrupt := string([]byte{nsRecord, 0, 9, 'a', 'b'})
	for _, tc := range []struct {
		name string
		dir  func(t *testing.T) (dir string, release func())
		fs   vfs.FS // nil: the operating system's
		want error
	}{
		{"lock held", func(t *testing.T) (string, func()) {
			cfg := DefaultConfig()
			cfg.Dir = t.TempDir()
			s, err := Open(cfg)
			if err != nil {
				t.Fatal(err)
			}
			return cfg.Dir, func() {
				if err := s.Close(); err != nil {
					t.Error(err)
				}
			}
		}, nil, engine.ErrUnavailable},
		{"directory is a file", func(t *testing.T) (string, func()) {
			file := filepath.Join(t.TempDir(), "file")
			if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
			return file, nil
		}, nil, engine.ErrUnavailable},
		{"directory below a file", func(t *testing.T) (string, func()) {
			file := filepath.Join(t.TempDir(), "file")
			if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
			return filepath.Join(file, "db"), nil
		}, nil, engine.ErrUnavailable},
		{"unwritable directory", func(t *testing.T) (string, func()) {
			return t.TempDir(), nil
		}, errorfs.Wrap(vfs.Default, errorfs.InjectorFunc(func(op errorfs.Op) error {
			if op.Kind == errorfs.OpCreate {
				return errorfs.ErrInjected
			}
			return nil
		})), engine.ErrUnavailable},
		{"failed fsync of the format version", func(t *testing.T) (string, func()) {
			return t.TempDir(), nil
		}, errorfs.Wrap(vfs.Default, errorfs.InjectorFunc(func(op errorfs.Op) error {
			switch op.Kind {
			case errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo:
				if strings.HasSuffix(op.Path, ".log") {
					return errorfs.ErrInjected
				}
			}
			return nil
		})), engine.ErrUnavailable},
		{"unknown format version", func(t *testing.T) (string, func()) {
			return plant(t, map[string][]byte{string(formatKey): encodeFormat(99)}), nil
		}, nil, ErrFormat},
		{"corrupt format version", func(t *testing.T) (string, func()) {
			return plant(t, map[string][]byte{string(formatKey): {2}}), nil
		}, nil, ErrFormat},
		{"data without a format version", func(t *testing.T) (string, func()) {
			dir := t.TempDir()
			db, err := pebble.Open(dir, &pebble.Options{Logger: pebbleLogger{slog.New(slog.DiscardHandler)}})
			if err != nil {
				t.Fatal(err)
			}
			if err := db.Set([]byte("someone else's key"), nil, pebble.Sync); err != nil {
				t.Fatal(err)
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			return dir, nil
		}, nil, ErrFormat},
		{"corrupt record key", func(t *testing.T) (string, func()) {
			return plant(t, map[string][]byte{corrupt: {byte(engine.RecValue), 0, 0, 0, 0, 0, 0, 0, 0}}), nil
		}, nil, engine.ErrCorrupt},
		{"failed migration", func(t *testing.T) (string, func()) {
			return plant(t, map[string][]byte{
				string(formatKey): encodeFormat(1),
				corrupt:           {byte(engine.RecValue), 0, 0, 0, 0, 0, 0, 0, 0},
			}), nil
		}, nil, engine.ErrCorrupt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			dir, release := tc.dir(t)
			cfg := DefaultConfig()
			cfg.Dir = dir
			cfg.Clock = testclock.At(t0)
			cfg.FS = tc.fs
			s, err := Open(cfg)
			if err == nil {
				s.Close()
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("Open: %v, want an error wrapping %v", err, tc.want)
			}
			if release != nil {
				release()
			}
			if _, statErr := os.Stat(filepath.Join(dir, "LOCK")); statErr != nil {
				return // Open never got as far as the lock
			}
			db, err := pebble.Open(dir, &pebble.Options{Logger: pebbleLogger{slog.New(slog.DiscardHandler)}})
			if err != nil {
				t.Fatalf("the directory does not open after a failed Open: %v", err)
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestCloseDuringCalls closes a store twice at once while calls of every
// kind run on it: each call either completes or returns engine.ErrClosed,
// both Closes return nil, every call after Close returns ErrClosed, and
// the reopened directory holds exactly the increments that were
// acknowledged.
func TestCloseDuringCalls(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Dir = t.TempDir()
	cfg.Clock = testclock.At(t0)
	s, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	incr := []engine.Command{engine.Incr("n", 1, 3_600_000)}
	batch := func(p string) *engine.Batch { return &engine.Batch{Partition: p, Commands: incr} }
	// call runs one increment of kind k%3 on partition p (and, for a joint
	// step, on p's twin) and reports whether it took effect.
	call := func(k int, p string) (bool, error) {
		var out engine.StepResult
		switch k % 3 {
		case 0:
			err := s.Apply(t.Context(), batch(p), &out)
			return err == nil, err
		case 1:
			if err := s.ApplyDeferred(t.Context(), batch(p), &out); err != nil {
				return false, err
			}
			return true, s.Sync(t.Context()) // in memory either way, and Close fsyncs it
		default:
			outs := make([]engine.StepResult, 2)
			err := s.ApplyJoint(t.Context(), []*engine.Batch{batch(p), batch(p + "-twin")}, outs)
			return err == nil, err
		}
	}

	const workers = 6
	var acked, joint [workers]int64
	var started, done sync.WaitGroup
	started.Add(workers)
	for w := range workers {
		done.Go(func() {
			p := string(rune('a' + w))
			for k := w; ; k++ {
				applied, err := call(k, p)
				if applied {
					acked[w]++
					if k%3 == 2 {
						joint[w]++
					}
				}
				if k == w {
					started.Done()
				}
				if errors.Is(err, engine.ErrClosed) {
					return
				}
				if err != nil {
					t.Errorf("worker %d: %v", w, err)
					return
				}
			}
		})
	}
	started.Wait()
	var closes sync.WaitGroup
	for range 2 {
		closes.Go(func() {
			if err := s.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
	}
	closes.Wait()
	done.Wait()

	for k := range 3 {
		if _, err := call(k, "a"); !errors.Is(err, engine.ErrClosed) {
			t.Errorf("call of kind %d after Close: %v, want ErrClosed", k, err)
		}
	}
	if err := s.Sync(t.Context()); !errors.Is(err, engine.ErrClosed) {
		t.Errorf("Sync after Close: %v, want ErrClosed", err)
	}

	s = openTest(t, cfg)
	count := func(p string) int64 {
		out := apply(t, s, p, engine.Get("n"))
		n, _ := strconv.ParseInt(out.Results[0].Value, 10, 64) // absent: 0
		return n
	}
	for w := range workers {
		p := string(rune('a' + w))
		if got := count(p); got != acked[w] {
			t.Errorf("partition %s holds %d after reopening, want the %d increments acknowledged", p, got, acked[w])
		}
		if got := count(p + "-twin"); got != joint[w] {
			t.Errorf("partition %s-twin holds %d after reopening, want the %d joint increments acknowledged", p, got, joint[w])
		}
	}
}
