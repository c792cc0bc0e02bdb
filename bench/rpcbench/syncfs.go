package rpcbench

import (
	"strings"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// syncCountingFS is the operating system's file system with a count of the
// fsyncs of Pebble's write-ahead log files (*.log), whatever call made them
// (Sync, SyncData, or a SyncTo that fsynced): how many commits share one
// fsync is the measure of Pebble's group commit. It counts the bytes
// written to those files too, and the time spent in their fsyncs: wall
// time, from the call to its return, so it holds the wait for a processor
// after the system call as well as the call itself.
type syncCountingFS struct {
	vfs.FS
	walSyncs, walBytes, walSyncNanos atomic.Uint64
}

func newSyncCountingFS() *syncCountingFS { return &syncCountingFS{FS: vfs.Default} }

func (fs *syncCountingFS) wrap(name string, f vfs.File, err error) (vfs.File, error) {
	if err != nil || !strings.HasSuffix(name, ".log") {
		return f, err
	}
	return &syncCountingFile{File: f, fs: fs}, nil
}

func (fs *syncCountingFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, c)
	return fs.wrap(name, f, err)
}

func (fs *syncCountingFS) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.ReuseForWrite(oldname, newname, c)
	return fs.wrap(newname, f, err)
}

func (fs *syncCountingFS) OpenReadWrite(name string, c vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := fs.FS.OpenReadWrite(name, c, opts...)
	return fs.wrap(name, f, err)
}

type syncCountingFile struct {
	vfs.File
	fs *syncCountingFS
}

func (f *syncCountingFile) Write(p []byte) (int, error) {
	n, err := f.File.Write(p)
	f.fs.walBytes.Add(uint64(n))
	return n, err
}

// timed runs the fsync sync and counts it if it fsynced.
func (f *syncCountingFile) timed(sync func() (bool, error)) (bool, error) {
	t0 := time.Now()
	synced, err := sync()
	if synced {
		f.fs.walSyncs.Add(1)
		f.fs.walSyncNanos.Add(uint64(time.Since(t0)))
	}
	return synced, err
}

func (f *syncCountingFile) Sync() error {
	_, err := f.timed(func() (bool, error) { return true, f.File.Sync() })
	return err
}

func (f *syncCountingFile) SyncData() error {
	_, err := f.timed(func() (bool, error) { return true, f.File.SyncData() })
	return err
}

func (f *syncCountingFile) SyncTo(length int64) (bool, error) {
	return f.timed(func() (bool, error) { return f.File.SyncTo(length) })
}
