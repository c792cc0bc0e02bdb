package diskstore

import (
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/sluicehq/sluice/engine"
)

// openTest opens a store in a fresh directory with cfg's settings (Dir is
// filled in when empty) and closes it when the test ends.
func openTest(t testing.TB, cfg Config) *Store {
	t.Helper()
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	s, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// countKeys counts the Pebble rows whose key starts with prefix, once a
// checkpoint has written every change committed so far.
func countKeys(t testing.TB, s *Store, prefix []byte) int {
	t.Helper()
	checkpoint(t, s)
	return countRows(t, s, prefix)
}

// countRows counts the rows whose keys start with prefix as they stand,
// without a checkpoint first.
func countRows(t testing.TB, s *Store, prefix []byte) int {
	t.Helper()
	iter, err := s.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for ok := iter.First(); ok; ok = iter.Next() {
		n++
	}
	if err := iter.Close(); err != nil {
		t.Fatal(err)
	}
	return n
}

// apply runs one batch through an engine on s and fails the test on error.
func apply(t testing.TB, s engine.Store, partition string, cmds ...engine.Command) engine.StepResult {
	t.Helper()
	var out engine.StepResult
	if err := engine.New(s).Apply(t.Context(), partition, &out, cmds...); err != nil {
		t.Fatalf("apply on %q: %v", partition, err)
	}
	return out
}

// checkpoint writes the rows of every change committed so far (see
// journal.go), unless the store has failed.
func checkpoint(t testing.TB, s *Store) {
	t.Helper()
	if s.failure() != nil {
		return
	}
	if err := s.checkpoint(engine.UnixMilli(s.clock)); err != nil {
		t.Fatal(err)
	}
}
