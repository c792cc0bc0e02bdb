package logtest_test

import (
	"log/slog"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/internal/logtest"
)

// TestRecorderKeepsEveryRecord logs from several goroutines at every level:
// the Recorder keeps each record with its own attributes.
func TestRecorderKeepsEveryRecord(t *testing.T) {
	rec := &logtest.Recorder{}
	log := slog.New(rec)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() { log.Debug("m", "i", i); log.Warn("m", "i", i) })
	}
	wg.Wait()
	if n := rec.Len(); n != 16 {
		t.Fatalf("kept %d records, want 16", n)
	}
	seen := map[int64]int{}
	for _, r := range rec.Records() {
		r.Attrs(func(a slog.Attr) bool {
			seen[a.Value.Int64()]++
			return true
		})
	}
	for i := range int64(8) {
		if seen[i] != 2 {
			t.Errorf("goroutine %d: %d records, want 2", i, seen[i])
		}
	}
}
