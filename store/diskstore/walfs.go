package diskstore

import (
	"errors"
	"log/slog"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Pebble's write-ahead log goes into files written in full beforehand.
//
// An fsync of data written into blocks the file never held (a new file's
// end, or a preallocated range) must also commit the file system's record
// of those blocks; an fsync of data overwriting written blocks commits the
// data alone. Measured here on ext4 (BenchmarkSyncedWrite), a 4 KiB write
// and its fdatasync took 220–340 µs appended or into a preallocated range,
// 160–175 µs overwriting. Pebble recycles its log files for that reason,
// but only those of memtables it has flushed, and only as far as they
// were written: a store's first memtables are small (256 KiB, doubling up
// to Config.MemTableBytes), so for its first few hundred megabytes of log
// nearly every fsync wrote into new blocks. Under fsync always that was
// the store's slowest phase, and every start went through it: over a
// server's first 12 s, at one decision per call, the spares raised its
// decisions per second by 7–14 % (see docs/benchmarks.md).
//
// So the store keeps a spare: a file of zeros, written and fsynced in the
// background, which walFS hands Pebble in place of a new log file, or of a
// recycled one shorter than the spare. Pebble reads a log's zeroed tail as
// its end, as it reads a recycled file's old tail (the log's records carry
// the log's number), so a spare is to Pebble a recycled file whose old
// contents were zeros. The spare outlives the store, named spareName in its
// directory, for the next Open's first log.
//
// A spare's size follows the logs: eight times the last finished log's
// bytes, rounded up to spareChunk, never shrinking, and at most Pebble's
// preallocation for one log. (Pebble doubles each memtable's size until it
// reaches its own, and a spare made as log n+1 starts, sized on log n,
// serves log n+2: up to four times log n's memtable.) A store that never
// fills a memtable never writes one.

const (
	spareName = "sluice-wal-spare"
	spareTemp = spareName + ".tmp"
	// spareChunk is the unit a spare is written in, and fsynced every
	// spareSyncEvery bytes so that its dirty pages never pile up for the
	// log's own fsyncs to wait behind.
	spareChunk     = 1 << 20
	spareSyncEvery = 4 << 20
)

// errSpareClosed stops a spare's writing when the store closes.
var errSpareClosed = errors.New("diskstore: closed while writing a spare log file")

// walFS is the file system the store opens Pebble on: cfg.FS (or the
// operating system's) with a spare for each write-ahead log file (see
// above) and, under SyncOnInterval, the log files' fsyncs deferred (see
// syncLogs).
type walFS struct {
	vfs.FS
	spare, temp string
	max         int64 // the largest spare: Pebble's preallocation for a log
	log         *slog.Logger
	logBytes    atomic.Int64 // written to the current log file
	stats       logStats
	adopted     sync.Once

	mu      sync.Mutex
	idle    sync.Cond // signalled when a spare's writing ends
	ready   int64     // the complete spare's size; 0: none
	want    int64     // the size of the next spare; 0: none wanted yet
	writing bool
	closed  bool
	failed  bool // writing a spare failed: the store goes on without

	// deferSync: the log files' fsyncs are deferred to syncLogs (see
	// there).
	deferSync bool
	lmu       sync.Mutex            // guards logs
	logs      map[*logFile]struct{} // the log files open, under deferSync
}

// newWALFS wraps fs for a store in dir whose memtables hold memTable
// bytes; deferSync defers the log files' fsyncs to syncLogs.
func newWALFS(fs vfs.FS, dir string, memTable int64, deferSync bool, log *slog.Logger) *walFS {
	w := &walFS{
		FS:    fs,
		spare: fs.PathJoin(dir, spareName),
		temp:  fs.PathJoin(dir, spareTemp),
		// As Pebble's: the log's preallocation is 110 % of a memtable.
		max:       memTable + memTable/10,
		log:       log,
		deferSync: deferSync,
	}
	if deferSync {
		w.logs = make(map[*logFile]struct{})
	}
	w.idle.L = &w.mu
	return w
}

// adopt deletes a spare left half written and adopts a complete one, or
// deletes it if it is larger than this store's spares may be (written
// with larger memtables). It runs when Pebble opens its first log file,
// when it holds the directory's lock: a second store failing to open the
// directory touches nothing of the first's.
func (w *walFS) adopt() {
	_ = w.FS.Remove(w.temp)
	fi, err := w.FS.Stat(w.spare)
	switch {
	case err != nil:
	case fi.Size() > 0 && fi.Size() <= w.max:
		w.mu.Lock()
		w.ready, w.want = fi.Size(), fi.Size()
		w.mu.Unlock()
	default:
		_ = w.FS.Remove(w.spare)
	}
}

// isLog reports whether name is one of Pebble's write-ahead log files.
func isLog(name string) bool { return strings.HasSuffix(name, ".log") }

// Create creates name; a write-ahead log file is the spare, if one is
// ready.
func (w *walFS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	if !isLog(name) {
		return w.FS.Create(name, category)
	}
	if f := w.useSpare(name, category, "", 0); f != nil {
		return f, nil
	}
	return w.track(w.FS.Create(name, category))
}

// ReuseForWrite renames oldname, a log file Pebble recycles, to newname
// and opens it; if oldname is shorter than a ready spare, the spare takes
// its place and oldname is deleted.
func (w *walFS) ReuseForWrite(oldname, newname string, category vfs.DiskWriteCategory) (vfs.File, error) {
	if isLog(newname) {
		size := int64(math.MaxInt64) // unknown: kept
		if fi, err := w.FS.Stat(oldname); err == nil {
			size = fi.Size()
		}
		if f := w.useSpare(newname, category, oldname, size); f != nil {
			return f, nil
		}
	}
	return w.track(w.FS.ReuseForWrite(oldname, newname, category))
}

// useSpare returns the spare, renamed name and open for writing, if one
// larger than replacedSize is ready, deleting replaced (a recycled log
// file, or ""); otherwise nil. Either way Pebble is starting a new log:
// the spare for the next one is sized on the log just finished, and
// written.
func (w *walFS) useSpare(name string, category vfs.DiskWriteCategory, replaced string, replacedSize int64) vfs.File {
	w.adopted.Do(w.adopt)
	finished := w.logBytes.Swap(0)
	w.mu.Lock()
	if finished > 0 {
		want := (8*finished + spareChunk - 1) / spareChunk * spareChunk
		w.want = max(w.want, min(want, w.max))
	}
	size := w.ready
	if size <= replacedSize {
		w.mu.Unlock()
		w.prepare()
		return nil
	}
	w.ready = 0
	w.mu.Unlock()
	defer w.prepare()
	f, err := w.FS.ReuseForWrite(w.spare, name, category)
	if err != nil {
		// The caller makes the log file as Pebble asked: Create truncates
		// whatever the rename left, and ReuseForWrite renames over it.
		w.log.Warn("diskstore: opening the spare log file", "err", err)
		return nil
	}
	if replaced != "" {
		_ = w.FS.Remove(replaced) // an obsolete log: Open deletes one it finds
	}
	tracked, _ := w.track(f, nil)
	return tracked
}

// prepare starts writing a spare if one is wanted and none is ready or
// being written.
func (w *walFS) prepare() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed || w.failed || w.writing || w.ready > 0 || w.want == 0 {
		return
	}
	w.writing = true
	go w.write(w.want)
}

// write writes a spare of size bytes and makes it ready.
func (w *walFS) write(size int64) {
	err := w.writeSpare(size)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.writing = false
	w.idle.Broadcast()
	switch {
	case err == nil:
		w.ready = size
	case !errors.Is(err, errSpareClosed):
		w.failed = true
		w.log.Warn("diskstore: writing a spare log file; new log files are created as they are needed", "err", err)
	}
}

// writeSpare writes size bytes of zeros to the spare's temporary file,
// fsyncs it and renames it the spare; on failure it deletes the file.
func (w *walFS) writeSpare(size int64) error {
	f, err := w.FS.Create(w.temp, "sluice-wal-spare")
	if err != nil {
		return err
	}
	err = w.fill(f, size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = w.FS.Rename(w.temp, w.spare)
	}
	if err != nil {
		_ = w.FS.Remove(w.temp)
	}
	return err
}

// fill writes size bytes of zeros to f and fsyncs them, stopping early if
// the store closes.
func (w *walFS) fill(f vfs.File, size int64) error {
	zeros := make([]byte, spareChunk)
	for off := int64(0); off < size; off += spareChunk {
		if w.isClosed() {
			return errSpareClosed
		}
		if _, err := f.Write(zeros[:min(spareChunk, size-off)]); err != nil {
			return err
		}
		if (off+spareChunk)%spareSyncEvery == 0 {
			if err := f.SyncData(); err != nil {
				return err
			}
		}
	}
	return f.SyncData()
}

func (w *walFS) isClosed() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.closed
}

// close stops writing spares and waits for the one being written, which
// it abandons.
func (w *walFS) close() {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	w.waitIdle()
}

// waitIdle waits until no spare is being written.
func (w *walFS) waitIdle() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for w.writing {
		w.idle.Wait()
	}
}

// track wraps a log file opened for writing to count the bytes written to
// it and, under deferred fsyncs, to defer them.
func (w *walFS) track(f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	lf := &logFile{File: f, n: &w.logBytes, stats: &w.stats}
	if w.deferSync {
		lf.w = w
		w.lmu.Lock()
		w.logs[lf] = struct{}{}
		w.lmu.Unlock()
	}
	return lf, nil
}

// Deferred fsyncs (SyncOnInterval).
//
// Under SyncOnInterval a log file's Sync and SyncData only report that
// its data is written: Pebble calls them after writing the data out of its
// buffer, so a commit that waits for its sync (pebble.Sync) returns once
// its record is in the operating system's hands, which a crash of the
// process does not lose. The store fsyncs the open log files every
// Config.SyncInterval with syncLogs, and a log file is fsynced before it
// is closed (Pebble closes a log when it moves to the next, and at
// Close), so a power loss loses at most the commits of the last
// interval.

// syncLogs fsyncs every open log file written since its last fsync. It
// returns the first failure; the store fails with it, since the operating
// system may have dropped the data it could not write.
func (w *walFS) syncLogs() error {
	w.lmu.Lock()
	files := make([]*logFile, 0, len(w.logs))
	for f := range w.logs {
		files = append(files, f)
	}
	w.lmu.Unlock()
	for _, f := range files {
		if err := f.fsync(); err != nil {
			return err
		}
	}
	return nil
}

// logStats count the bytes written to the write-ahead log and its fsyncs
// over the store's life (Store.Stats).
type logStats struct {
	bytes, fsyncs, fsyncNanos atomic.Int64
}

// fsynced counts an fsync that started at start.
func (s *logStats) fsynced(start time.Time) {
	s.fsyncs.Add(1)
	s.fsyncNanos.Add(int64(time.Since(start)))
}

// logFile is a log file that counts the bytes written to it and, with w
// set, defers its fsyncs to syncLogs.
type logFile struct {
	vfs.File
	n     *atomic.Int64
	stats *logStats
	w     *walFS // set under deferred fsyncs

	written atomic.Int64 // bytes written, under deferred fsyncs
	smu     sync.Mutex   // serialises fsync and Close
	synced  int64        // bytes covered by the last fsync; guarded by smu
	closed  bool         // guarded by smu
}

func (f *logFile) Write(p []byte) (int, error) {
	n, err := f.File.Write(p)
	f.n.Add(int64(n))
	f.stats.bytes.Add(int64(n))
	if f.w != nil {
		f.written.Add(int64(n))
	}
	return n, err
}

// Sync fsyncs the file, or under deferred fsyncs returns at once: what was
// written is with the operating system (see syncLogs).
func (f *logFile) Sync() error {
	if f.w != nil {
		return nil
	}
	defer f.stats.fsynced(time.Now())
	return f.File.Sync()
}

// SyncData is Sync without the file's metadata.
func (f *logFile) SyncData() error {
	if f.w != nil {
		return nil
	}
	defer f.stats.fsynced(time.Now())
	return f.File.SyncData()
}

// SyncTo fsyncs a prefix of the file, or under deferred fsyncs returns at
// once, reporting no sync.
func (f *logFile) SyncTo(length int64) (bool, error) {
	if f.w != nil {
		return false, nil
	}
	defer f.stats.fsynced(time.Now())
	return f.File.SyncTo(length)
}

// fsync fsyncs what was written to the file since its last fsync, unless
// it is closed.
func (f *logFile) fsync() error {
	f.smu.Lock()
	defer f.smu.Unlock()
	n := f.written.Load()
	if f.closed || n == f.synced {
		return nil
	}
	start := time.Now()
	err := f.File.SyncData()
	f.stats.fsynced(start)
	if err != nil {
		return err
	}
	f.synced = n
	return nil
}

// Close closes the file; under deferred fsyncs it fsyncs it first.
func (f *logFile) Close() error {
	if f.w == nil {
		return f.File.Close()
	}
	err := f.fsync()
	f.smu.Lock()
	f.closed = true
	f.smu.Unlock()
	f.w.lmu.Lock()
	delete(f.w.logs, f)
	f.w.lmu.Unlock()
	return errors.Join(err, f.File.Close())
}
