package diskstore

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/testclock"
)

// logFS records, for each write-ahead log file opened for writing, in
// order, whether a write went past the size the file had when opened:
// whether an fsync of it had to commit new blocks.
type logFS struct {
	vfs.FS
	mu       sync.Mutex
	logs     []string
	extended map[string]bool
	// failTemp makes creating a spare fail.
	failTemp bool
}

func newLogFS(fs vfs.FS) *logFS { return &logFS{FS: fs, extended: make(map[string]bool)} }

func (fs *logFS) opened(name string, f vfs.File, err error) (vfs.File, error) {
	if err != nil || !isLog(name) {
		return f, err
	}
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.logs = append(fs.logs, name)
	return &extendFile{File: f, fs: fs, name: name, size: fi.Size()}, nil
}

func (fs *logFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	if fs.failTemp && strings.HasSuffix(name, spareTemp) {
		return nil, errors.New("no room for a spare")
	}
	f, err := fs.FS.Create(name, c)
	return fs.opened(name, f, err)
}

func (fs *logFS) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.ReuseForWrite(oldname, newname, c)
	return fs.opened(newname, f, err)
}

// state returns the log files opened so far and which of them were
// extended.
func (fs *logFS) state() (logs []string, extended map[string]bool) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	extended = make(map[string]bool, len(fs.extended))
	for k, v := range fs.extended {
		extended[k] = v
	}
	return append([]string(nil), fs.logs...), extended
}

type extendFile struct {
	vfs.File
	fs   *logFS
	name string
	size int64
	pos  int64
}

func (f *extendFile) Write(p []byte) (int, error) {
	if f.pos+int64(len(p)) > f.size {
		f.fs.mu.Lock()
		f.fs.extended[f.name] = true
		f.fs.mu.Unlock()
	}
	n, err := f.File.Write(p)
	f.pos += int64(n)
	return n, err
}

// fillLogs commits 1 KiB values, waiting after each commit for the spare
// it may have started, until Pebble has opened n log files in all; it
// returns the values committed, by key.
func fillLogs(t *testing.T, s *Store, fs *logFS, n int) map[string]string {
	t.Helper()
	committed := make(map[string]string)
	for i := 0; ; i++ {
		if logs, _ := fs.state(); len(logs) >= n {
			return committed
		}
		if i == 100_000 {
			t.Fatalf("%d commits opened fewer than %d log files", i, n)
		}
		key, value := fmt.Sprintf("k%d", i), fmt.Sprintf("%d:%s", i, strings.Repeat("v", 1000))
		apply(t, s, fmt.Sprintf("p%d", i%64), engine.Set(key, value, 3_600_000))
		committed[key] = value
		s.wal.waitIdle()
	}
}

// checkValues checks that s holds every value committed.
func checkValues(t *testing.T, s *Store, committed map[string]string) {
	t.Helper()
	missing := 0
	for i := 0; i < len(committed); i++ {
		key := fmt.Sprintf("k%d", i)
		got := apply(t, s, fmt.Sprintf("p%d", i%64), engine.Get(key)).Results[0]
		if !got.Found || got.Value != committed[key] {
			missing++
		}
	}
	if missing > 0 {
		t.Errorf("%d of %d committed values lost", missing, len(committed))
	}
}

func smallMemtables(fs vfs.FS) Config {
	cfg := DefaultConfig()
	cfg.Dir, cfg.FS, cfg.Clock = "db", fs, testclock.At(t0)
	cfg.MemTableBytes = 1 << 20 // a new log file every MiB or so
	cfg.SweepInterval = 1 << 62
	return cfg
}

// TestLogFilesAreWrittenBeforehand checks that, once the store has seen
// one log file filled, Pebble writes its log only into blocks written
// beforehand (a spare), never past a file's end; and that the spare left
// at Close serves the next Open's first log file.
func TestLogFilesAreWrittenBeforehand(t *testing.T) {
	fs := newLogFS(vfs.NewMem())
	cfg := smallMemtables(fs)
	s, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	committed := fillLogs(t, s, fs, 10)
	logs, extended := fs.state()
	// The first log file is opened with the store, the second at the
	// first memtable's end: the first spare is made for the third.
	if !extended[logs[0]] {
		t.Errorf("the first log file (%s), made without a spare, was never extended: the check sees nothing", logs[0])
	}
	for _, name := range logs[2:] {
		if extended[name] {
			t.Errorf("log file %s (of %d) was written past its end", name, len(logs))
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if fi, err := fs.Stat(fs.PathJoin(cfg.Dir, spareName)); err != nil || fi.Size() < spareChunk {
		t.Fatalf("no spare after Close: %v, %v", fi, err)
	}

	s = openTest(t, cfg)
	checkValues(t, s, committed)
	logs, extended = fs.state()
	if len(logs) < 11 {
		t.Fatalf("%d log files opened in all after reopening, want at least 11", len(logs))
	}
	if extended[logs[10]] {
		t.Errorf("the reopened store's first log file was written past its end: the spare was not used")
	}
}

// TestSparesSurviveACrash checks that a power loss leaves every commit
// acknowledged (fsync always) readable from log files that were spares:
// Pebble reads a spare's zeros after the last record as the log's end.
func TestSparesSurviveACrash(t *testing.T) {
	for _, unsynced := range []int{0, 50} {
		t.Run(fmt.Sprintf("unsynced-kept-%d%%", unsynced), func(t *testing.T) {
			mem := vfs.NewCrashableMem()
			fs := newLogFS(mem)
			cfg := smallMemtables(fs)
			s := openTest(t, cfg)
			committed := fillLogs(t, s, fs, 6)
			logs, extended := fs.state()
			if last := logs[len(logs)-1]; extended[last] {
				t.Fatalf("the last log file %s was not a spare: the test would prove nothing", last)
			}

			c := cfg
			c.FS = mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: unsynced, RNG: rand.New(rand.NewPCG(1, uint64(unsynced)))})
			checkValues(t, openTest(t, c), committed)
		})
	}
}

// TestSpareFailureIsNotFatal checks that a store whose spare cannot be
// written goes on, its log files made as they are needed.
func TestSpareFailureIsNotFatal(t *testing.T) {
	fs := newLogFS(vfs.NewMem())
	fs.failTemp = true
	s := openTest(t, smallMemtables(fs))
	committed := fillLogs(t, s, fs, 5)
	checkValues(t, s, committed)
	// The third log file, with spares, is one (see above); without, it is
	// new or a recycled one of a smaller memtable's.
	logs, extended := fs.state()
	if !extended[logs[2]] {
		t.Errorf("log file %s was never written past its end, though no spare could be made", logs[2])
	}
	if _, err := fs.Stat(fs.PathJoin("db", spareName)); err == nil {
		t.Error("a spare exists, though none could be made")
	}
}

// BenchmarkSyncedWrite measures what the spares are for: a 4 KiB write and
// its fdatasync, appended to a file, into a range preallocated as Pebble
// preallocates its log files (fallocate, keeping the size), and
// overwriting blocks written before. It runs on the operating system's
// file system in the benchmark's temporary directory.
func BenchmarkSyncedWrite(b *testing.B) {
	const block = 4 << 10
	for _, mode := range []string{"append", "preallocated", "overwrite"} {
		b.Run(mode, func(b *testing.B) {
			fs := vfs.Default
			name := fs.PathJoin(b.TempDir(), "f")
			f, err := fs.Create(name, "bench")
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			size := int64(b.N) * block
			switch mode {
			case "preallocated":
				err = f.Preallocate(0, size)
			case "overwrite":
				_, err = f.Write(make([]byte, size))
			}
			if err == nil {
				err = f.Sync()
			}
			if err != nil {
				b.Fatal(err)
			}
			buf := make([]byte, block)
			b.SetBytes(block)
			b.ResetTimer()
			for i := range b.N {
				if _, err := f.WriteAt(buf, int64(i)*block); err != nil {
					b.Fatal(err)
				}
				if err := f.SyncData(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestSecondOpenLeavesTheSpareAlone checks that a store failing to open a
// directory another store holds touches nothing of the first's spare,
// even one being written.
func TestSecondOpenLeavesTheSpareAlone(t *testing.T) {
	cfg := smallMemtables(nil)
	cfg.Dir = t.TempDir()
	openTest(t, cfg)
	temp := vfs.Default.PathJoin(cfg.Dir, spareTemp)
	f, err := vfs.Default.Create(temp, "test") // as if the first were writing a spare
	if err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	if second, err := Open(cfg); err == nil {
		_ = second.Close()
		t.Fatal("a second store opened the directory in use")
	}
	if _, err := vfs.Default.Stat(temp); err != nil {
		t.Errorf("the first store's spare in progress is gone after a second store failed to open: %v", err)
	}
}

// TestOversizedSpareIsDeleted checks that a spare larger than the store's
// spares may be (left by a store with larger memtables) is deleted at
// Open rather than used.
func TestOversizedSpareIsDeleted(t *testing.T) {
	fs := newLogFS(vfs.NewMem())
	cfg := smallMemtables(fs)
	if err := fs.MkdirAll(cfg.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := fs.Create(fs.PathJoin(cfg.Dir, spareName), "test")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(make([]byte, 2*cfg.MemTableBytes)); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	openTest(t, cfg)
	if _, err := fs.Stat(fs.PathJoin(cfg.Dir, spareName)); err == nil {
		t.Error("a spare of twice the memtable size is still there after Open")
	}
	if logs, extended := fs.state(); len(logs) != 1 || !extended[logs[0]] {
		t.Errorf("the first log file (%v) was not made new: extended %v", logs, extended)
	}
}
