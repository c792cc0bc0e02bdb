package storetest

import (
	"embed"
	"errors"
	"io/fs"
	"path"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/testclock"
)

// NewStore returns a fresh, empty store whose clock is clock. The suite
// closes it.
type NewStore func(t *testing.T, clock engine.Clock) engine.Store

//go:embed testdata/*
var testdata embed.FS

// Run runs the conformance suite against the stores newStore returns: every
// script under testdata as a subtest named after its file, then the
// concurrency and contract checks. Each subtest gets a fresh store.
func Run(t *testing.T, newStore NewStore) {
	t.Helper()
	scripts, err := loadScripts(testdata)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range scripts {
		t.Run(s.name, func(t *testing.T) {
			clock := testclock.At(s.epoch)
			store := openStore(t, newStore, clock)
			if err := s.run(t.Context(), store, clock); err != nil {
				t.Fatal(err)
			}
		})
	}
	t.Run("concurrency", func(t *testing.T) {
		runCheck(t, "kv_set_nx_race", newStore, checkSetNXRace)
		t.Run("one_key_limit", func(t *testing.T) {
			for _, kind := range []algo.Kind{algo.KindFixed, algo.KindSliding, algo.KindLog, algo.KindGCRA} {
				runCheck(t, kind.String(), newStore, checkOneKeyLimit(kind))
			}
		})
		runCheck(t, "many_partitions", newStore, checkManyPartitions)
	})
	t.Run("joint", func(t *testing.T) {
		clock := testclock.At(DefaultEpoch)
		if js, ok := openStore(t, newStore, clock).(engine.JointStore); !ok || !js.Joins() {
			t.Skip("the store runs no joint steps (engine.JointStore)")
		}
		runCheck(t, "all_or_nothing", newStore, checkJointAllOrNothing)
		runCheck(t, "concurrency", newStore, checkJointConcurrency)
	})
	t.Run("reused_result", func(t *testing.T) {
		clock := testclock.At(DefaultEpoch)
		reused, fresh := openStore(t, newStore, clock), openStore(t, newStore, clock)
		if err := checkReusedResult(t.Context(), reused, fresh); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("closed", func(t *testing.T) {
		// The check closes the store itself.
		clock := testclock.At(DefaultEpoch)
		if err := checkClosed(t.Context(), newStore(t, clock), clock); err != nil {
			t.Fatal(err)
		}
	})
}

// runCheck runs c as the subtest name on a fresh store.
func runCheck(t *testing.T, name string, newStore NewStore, c check) {
	t.Helper()
	t.Run(name, func(t *testing.T) {
		clock := testclock.At(DefaultEpoch)
		if err := c(t.Context(), openStore(t, newStore, clock), clock); err != nil {
			t.Fatal(err)
		}
	})
}

// loadScripts parses every *.txt file at the top of fsys's testdata folder,
// in name order.
func loadScripts(fsys fs.FS) ([]*script, error) {
	names, err := fs.Glob(fsys, "testdata/*.txt")
	if err != nil {
		return nil, err
	}
	if len(names) == 0 {
		return nil, errors.New("storetest: no scripts under testdata")
	}
	var scripts []*script
	for _, name := range names {
		text, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, err
		}
		s, err := parseScript(strings.TrimSuffix(path.Base(name), ".txt"), string(text))
		if err != nil {
			return nil, err
		}
		scripts = append(scripts, s)
	}
	return scripts, nil
}

// openStore returns a store from newStore and closes it when t ends.
func openStore(t *testing.T, newStore NewStore, clock engine.Clock) engine.Store {
	t.Helper()
	s := newStore(t, clock)
	if s == nil {
		t.Fatal("storetest: NewStore returned nil")
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}
