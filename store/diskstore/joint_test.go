package diskstore

import (
	"fmt"
	"hash/maphash"
	"testing"
	"testing/synctest"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/testclock"
)

// reserveIn returns a joint step's batch reserving 1 of limit on budget
// "b" of the reserved partition name.
func reserveIn(name string, limit int64) engine.Step {
	return engine.Step{
		Partition: engine.ReservedPartition(name),
		Commands:  []engine.Command{engine.Reserve("", 1, engine.Budget{Key: "b", Limit: limit, WindowMs: 60_000})},
	}
}

// resident returns the resident partition named name, or nil.
func resident(s *Store, name string) *partition {
	h := maphash.String(s.seed, name)
	sh := s.shard(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.find(h, name)
}

// TestJointStepIsDeferred holds the write-ahead log's fsync and checks that
// a joint step returns before its fsync, with both partitions holding its
// writes counted unsynced (so neither is evicted, and a read of either
// waits for the fsync), and that both are counted synced once it is done.
func TestJointStepIsDeferred(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, log := openStalled(t, func(cfg *Config) { cfg.MaxResident = 64 }) // one partition per shard
		eng := engine.New(s)

		log.hold()
		outs := make([]engine.StepResult, 2)
		if err := eng.ApplyReservedJointDeferred(t.Context(), []engine.Step{reserveIn("a", 10), reserveIn("b", 10)}, outs); err != nil {
			t.Fatal(err)
		}
		if !outs[0].Results[0].Allowed || !outs[1].Results[0].Allowed {
			t.Fatalf("joint step = %+v", outs)
		}
		read := make(chan engine.StepResult, 1)
		go func() {
			var out engine.StepResult
			if err := eng.ApplyReserved(t.Context(), "b", &out, engine.Get("b")); err != nil {
				t.Error(err)
			}
			read <- out
		}()
		synctest.Wait()
		select {
		case out := <-read:
			t.Fatalf("a read of the joint step's unsynced state was answered (%+v) before the fsync", out)
		default:
		}
		for i := range 256 {
			apply(t, s, fmt.Sprintf("x%d", i), engine.Get("n"))
		}
		for _, name := range []string{"a", "b"} {
			if p := resident(s, engine.ReservedPartition(name)); p == nil || p.unsynced.Load() != 1 {
				t.Fatalf("partition %q: resident %v, with its unsynced state counted", name, p != nil)
			}
		}

		log.unhold()
		if out := <-read; out.Results[0].Value != "1" {
			t.Errorf("get = %q, want 1", out.Results[0].Value)
		}
		if err := eng.Sync(t.Context()); err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // the syncer has counted the step synced
		for _, name := range []string{"a", "b"} {
			if p := resident(s, engine.ReservedPartition(name)); p != nil && p.unsynced.Load() != 0 {
				t.Errorf("partition %q: %d batches still counted unsynced after the fsync", name, p.unsynced.Load())
			}
		}
	})
}

// TestJointStepSurvivesReopen: a joint step made durable with Sync is found
// whole after a reopen, and a refused one left nothing on disk.
func TestJointStepSurvivesReopen(t *testing.T) {
	dir := t.TempDir()
	cfg := DefaultConfig()
	cfg.Dir = dir
	cfg.Clock = testclock.At(t0)
	s, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	eng := engine.New(s)
	outs := make([]engine.StepResult, 2)
	for _, limits := range [][2]int64{{5, 5}, {5, 5}, {5, 2}, {1, 5}} {
		if err := eng.ApplyReservedJointDeferred(t.Context(), []engine.Step{reserveIn("a", limits[0]), reserveIn("b", limits[1])}, outs); err != nil {
			t.Fatal(err)
		}
	}
	if err := eng.Sync(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openTest(t, cfg)
	for _, name := range []string{"a", "b"} {
		var out engine.StepResult
		if err := engine.New(s).ApplyReserved(t.Context(), name, &out, engine.Get("b")); err != nil {
			t.Fatal(err)
		}
		if got := out.Results[0].Value; got != "2" {
			t.Errorf("after a reopen partition %q counts %q, want the 2 of the two allowed steps", name, got)
		}
	}
}
