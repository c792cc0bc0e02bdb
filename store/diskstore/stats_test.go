package diskstore

import (
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/engine"
)

// TestStatsCountTheLog checks Stats against the file system under each
// fsync policy: the log's fsyncs as the file system saw them, the log's
// bytes (growing with each batch answered, where an answer waits for the
// log's write; under SyncNever, Pebble holds a block's worth in memory),
// the partitions held in memory and the space on disk; and
// that a store that has not failed says so.
func TestStatsCountTheLog(t *testing.T) {
	for _, policy := range []SyncPolicy{SyncAlways, SyncOnInterval, SyncNever} {
		t.Run(string(policy), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var fsyncs atomic.Int64
				cfg := countedConfig(&fsyncs, policy)
				s := openTest(t, cfg)
				synctest.Wait()

				const batches = 12
				first := s.Stats()
				last := first
				for i := range batches {
					apply(t, s, fmt.Sprintf("p%d", i), engine.Incr("n", 1, 60_000))
					st := s.Stats()
					if policy != SyncNever && st.LogBytes <= last.LogBytes {
						t.Fatalf("batch %d: LogBytes %d, not above %d before it", i, st.LogBytes, last.LogBytes)
					}
					last = st
				}
				synctest.Wait()
				st := s.Stats()
				if policy != SyncNever && st.LogBytes <= first.LogBytes {
					t.Errorf("LogBytes %d after %d batches, not above %d before them", st.LogBytes, batches, first.LogBytes)
				}
				if got, want := st.LogFsyncs, fsyncs.Load(); got != want {
					t.Errorf("LogFsyncs = %d, the file system saw %d", got, want)
				}
				switch n := st.LogFsyncs - first.LogFsyncs; policy {
				case SyncAlways:
					if n < batches {
						t.Errorf("%d fsyncs counted for %d batches answered one by one, want one each at least", n, batches)
					}
				case SyncOnInterval, SyncNever:
					if n != 0 {
						t.Errorf("%d fsyncs counted before any period ended, want 0", n)
					}
				}
				if policy == SyncOnInterval {
					time.Sleep(cfg.SyncInterval)
					synctest.Wait()
					if st := s.Stats(); st.LogFsyncs != first.LogFsyncs+1 || st.LogFsyncs != fsyncs.Load() {
						t.Errorf("after a period that wrote: %d fsyncs counted, the file system saw %d, want %d", st.LogFsyncs, fsyncs.Load(), first.LogFsyncs+1)
					}
				}
				if st.Partitions != batches {
					t.Errorf("Partitions = %d, want %d", st.Partitions, batches)
				}
				if st.DiskBytes == 0 {
					t.Errorf("DiskBytes = 0 for a store that holds %d batches", batches)
				}
				if st.Failed {
					t.Errorf("Failed for a store that has not failed")
				}
			})
		})
	}
}

// TestStatsAfterClose checks Pebble's read amplification after a flush,
// and that Stats answers after Close, with the counts of the store's life
// and no size on disk.
func TestStatsAfterClose(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Dir = t.TempDir()
	s, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	apply(t, s, "p", engine.Incr("n", 1, 60_000))
	before := s.Stats()
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.ReadAmp < 1 {
		t.Errorf("ReadAmp = %d after a flush wrote a sorted file, want 1 at least", st.ReadAmp)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	st := s.Stats()
	if st.LogFsyncs < before.LogFsyncs || st.LogBytes < before.LogBytes || st.LogBytes == 0 {
		t.Errorf("after Close: %+v, before: %+v", st, before)
	}
	if st.DiskBytes != 0 || st.ReadAmp != 0 {
		t.Errorf("DiskBytes = %d and ReadAmp = %d after Close, want 0", st.DiskBytes, st.ReadAmp)
	}
}
