package diskstore

import "time"

// Stats are a store's figures for monitoring: counts since Open, and
// sizes now.
type Stats struct {
	// LogBytes counts the bytes written to the write-ahead log.
	LogBytes int64
	// LogFsyncs counts the write-ahead log's fsyncs: one per group of
	// commits under SyncAlways, one per log file written in a period under
	// SyncOnInterval, none under SyncNever. LogFsyncTime is the wall time
	// spent in them.
	LogFsyncs    int64
	LogFsyncTime time.Duration
	// Partitions is the number of partitions held in memory.
	Partitions int
	// DiskBytes is the space the store's files take on disk; 0 once the
	// store is closed.
	DiskBytes uint64
	// ReadAmp is Pebble's read amplification: the sorted files a read may
	// have to look in (L0's sublevels and each non-empty level below). A
	// figure that keeps growing means compactions fall behind the writes;
	// Pebble stops writes while L0 holds 12 sublevels (its default).
	// CompactionDebt is Pebble's estimate of the bytes compactions must
	// still rewrite to catch up. Both 0 once the store is closed.
	ReadAmp        int
	CompactionDebt uint64
	// Failed reports a store that has failed (a write-ahead log fsync
	// failed): it answers nothing more until reopened.
	Failed bool
}

// Stats returns the store's figures. It may be called from any
// goroutine, also after Close. It reads every shard and Pebble's metrics:
// cheap enough for a scrape every few seconds, not for every request.
func (s *Store) Stats() Stats {
	w := &s.wal.stats
	st := Stats{
		LogBytes:     w.bytes.Load(),
		LogFsyncs:    w.fsyncs.Load(),
		LogFsyncTime: time.Duration(w.fsyncNanos.Load()),
		Partitions:   s.Resident(),
		Failed:       s.failed.Load() != nil,
	}
	s.gate.RLock()
	defer s.gate.RUnlock()
	if !s.closed.Load() {
		m := s.db.Metrics()
		st.DiskBytes = m.DiskSpaceUsage()
		st.ReadAmp = m.ReadAmp()
		st.CompactionDebt = m.Compact.EstimatedDebt
	}
	return st
}
