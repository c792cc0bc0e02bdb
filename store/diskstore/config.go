package diskstore

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/sluicehq/sluice/engine"
)

// SyncPolicy decides when Pebble's write-ahead log is fsynced, and so what an
// acknowledged batch survives. See the package documentation.
type SyncPolicy string

// The sync policies.
const (
	// SyncAlways answers a batch only after its write-ahead log record was
	// fsynced. Concurrent batches share one fsync (Pebble groups them), so
	// throughput grows with concurrency. Nothing acknowledged is lost to a
	// process crash or a power loss. It is the default.
	SyncAlways SyncPolicy = "always"
	// SyncOnInterval answers once the batch's write-ahead log record is
	// written to the operating system, and fsyncs the log every
	// Config.SyncInterval. A crash of the process loses nothing
	// acknowledged; a power loss or a kernel crash loses at most the
	// batches acknowledged in the last SyncInterval. Answers wait on no
	// disk, so it costs far less than SyncAlways wherever fsyncs are slow.
	SyncOnInterval SyncPolicy = "interval"
	// SyncNever answers once the batch is in Pebble's write-ahead log
	// buffer and leaves writing it back to Pebble and the operating system.
	// A process crash loses the acknowledged batches Pebble had not yet
	// written to the operating system (the log is written a 32 KiB block at
	// a time, so a quiet store may hold its last batches in memory
	// indefinitely); a power loss also loses what the operating system had
	// not written back. Use it for benchmarks and for quotas that may be
	// forgotten.
	SyncNever SyncPolicy = "never"
)

// Bounds of the sweep.
const (
	// MaxSweepLimit is the most expired rows one sweep pass removes.
	MaxSweepLimit = 1000
)

// Config configures a Store. The zero value is not valid; start from
// DefaultConfig and set Dir.
type Config struct {
	// Dir is the data directory. It is created if missing; a directory of
	// on-disk format version 1 is migrated, and one holding data of
	// another version is refused with ErrFormat.
	Dir string

	// Sync is the fsync policy of the write-ahead log.
	Sync SyncPolicy
	// SyncInterval is the fsync period under SyncOnInterval; it is ignored
	// by the other policies.
	SyncInterval time.Duration

	// MaxResident caps the partitions held in memory. Past it the least
	// recently used idle partition is evicted (its records stay on disk and
	// are reloaded on its next batch); partitions in use by a batch at that
	// moment are never evicted, so the cap can be passed by at most their
	// number. The cap is kept per shard of the store's 64, so it is rounded
	// down to a multiple of 64, and is at least 64.
	MaxResident int
	// IdleTimeout evicts a partition from memory once no batch has touched
	// it for this long, by the store's clock. Zero keeps partitions until
	// MaxResident forces them out.
	IdleTimeout time.Duration

	// SweepInterval is the period of the background sweep that deletes
	// expired records from disk and memory.
	SweepInterval time.Duration
	// SweepLimit is the most expired rows one sweep pass deletes,
	// 1…MaxSweepLimit.
	SweepLimit int

	// CacheBytes is the size of Pebble's block cache.
	CacheBytes int64
	// MemTableBytes is the size of a Pebble memtable: the amount of writes
	// buffered in memory before they are flushed to a table file (the
	// write-ahead log holds them meanwhile). A busy store holds up to two.
	// A larger one flushes and compacts less often: 128 MiB gave 9–17 %
	// more decisions per second under a sustained heavy load of 32-hit
	// requests, but makes the log's fsyncs slower for longer after each
	// start (see docs/benchmarks.md).
	MemTableBytes int64

	// Clock is the store's time authority. Nil means the system clock.
	Clock engine.Clock
	// Logger receives Pebble's messages and the store's own. Nil discards
	// them.
	Logger *slog.Logger
	// FS is the file system Pebble uses. Nil means the operating system's;
	// vfs.NewMem gives a store that lives in memory, for tests.
	FS vfs.FS
}

// DefaultConfig returns the recommended configuration, with Dir unset:
// fsync always; up to 1,048,576 partitions in memory, each evicted after
// ten idle minutes; a sweep every second of up to 1,000 expired rows; a
// 64 MiB block cache and 64 MiB memtables.
func DefaultConfig() Config {
	return Config{
		Sync:          SyncAlways,
		SyncInterval:  100 * time.Millisecond,
		MaxResident:   1 << 20,
		IdleTimeout:   10 * time.Minute,
		SweepInterval: time.Second,
		SweepLimit:    MaxSweepLimit,
		CacheBytes:    64 << 20,
		MemTableBytes: 64 << 20,
	}
}

// Validate reports whether c is usable.
func (c Config) Validate() error {
	switch {
	case c.Dir == "":
		return invalid("Dir is empty")
	case c.Sync != SyncAlways && c.Sync != SyncOnInterval && c.Sync != SyncNever:
		return invalid("Sync %q (want always, interval or never)", c.Sync)
	case c.Sync == SyncOnInterval && c.SyncInterval <= 0:
		return invalid("SyncInterval %v must be positive under the interval policy", c.SyncInterval)
	case c.MaxResident < 1:
		return invalid("MaxResident %d must be positive", c.MaxResident)
	case c.IdleTimeout < 0:
		return invalid("IdleTimeout %v is negative", c.IdleTimeout)
	case c.SweepInterval <= 0:
		return invalid("SweepInterval %v must be positive", c.SweepInterval)
	case c.SweepLimit < 1 || c.SweepLimit > MaxSweepLimit:
		return invalid("SweepLimit %d outside 1…%d", c.SweepLimit, MaxSweepLimit)
	case c.CacheBytes < 0:
		return invalid("CacheBytes %d is negative", c.CacheBytes)
	case c.MemTableBytes < 1<<20 || c.MemTableBytes > 1<<30:
		return invalid("MemTableBytes %d outside 1 MiB…1 GiB", c.MemTableBytes)
	}
	return nil
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: diskstore "+format, append([]any{engine.ErrInvalid}, args...)...)
}
