package rpcbench

import (
	"strings"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// syncCountingFS is the operating system's file system with a count of the
// fsyncs of Pebble's write-ahead log files (*.log), whatever call made them
// (Sync, SyncData, or a SyncTo that fsynced): how many commits share one
// fsync is the measure of Pebble's group commit. It counts the bytes
// written to those files too.
type syncCountingFS struct {
	vfs.FS
	walSyncs, walBytes atomic.Uint64
}

func newSyncCountingFS() *syncCountingFS { return &syncCountingFS{FS: vfs.Default} }

func (fs *syncCountingFS) wrap(name string, f vfs.File, err error) (vfs.File, error) {
	if err != nil || !strings.HasSuffix(name, ".log") {
		return f, err
	}
	return &syncCountingFile{File: f, n: &fs.walSyncs, bytes: &fs.walBytes}, nil
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
	n, bytes *atomic.Uint64
}

func (f *syncCountingFile) Write(p []byte) (int, error) {
	n, err := f.File.Write(p)
	f.bytes.Add(uint64(n))
	return n, err
}

func (f *syncCountingFile) Sync() error {
	f.n.Add(1)
	return f.File.Sync()
}

func (f *syncCountingFile) SyncData() error {
	f.n.Add(1)
	return f.File.SyncData()
}

func (f *syncCountingFile) SyncTo(length int64) (bool, error) {
	full, err := f.File.SyncTo(length)
	if full {
		f.n.Add(1)
	}
	return full, err
}
