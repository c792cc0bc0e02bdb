package diskstore

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
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
