package diskstore

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/sluicehq/sluice/engine"
)

// shardCount is the number of independently locked partition maps. It only
// spreads lock contention on the map; each partition has its own lock.
const shardCount = 64

// Store is the embedded durable store. It is safe for concurrent use.
type Store struct {
	db    *pebble.DB
	wal   *walFS // the file system Pebble is opened on (see walfs.go)
	cfg   Config
	clock engine.Clock
	log   *slog.Logger
	// logged: an answer waits for the log's sync of its batch: an fsync
	// under SyncAlways; under SyncOnInterval, whose fsyncs walFS defers,
	// the write to the operating system (Config.Sync != SyncNever).
	logged bool

	seed     maphash.Seed
	shards   [shardCount]shard
	perShard int // resident partitions per shard before eviction

	workers  sync.Pool // *worker
	requests sync.Pool // *request
	rounds   sync.Pool // *round
	joints   sync.Pool // *jointStep
	present  *presence
	// replayMarks: the partitions that may have replay records, by bucket.
	replayMarks *replayMarks
	// syncq holds the rounds whose fsync the syncer waits for.
	syncq chan *round
	// durable tracks which commits an fsync has covered (see durability).
	durable durability
	// smu guards syncing (a syncLog record and its fsync are in flight)
	// and nextSync (the callers waiting for the next): see syncLog.
	smu      sync.Mutex
	syncing  bool
	nextSync *syncGroup
	// seq numbers the expiry index entries (see layout.go): it keeps new
	// entries at the end of their bucket; it may wrap.
	seq atomic.Uint32
	// replaysCleared is the first replay bucket the sweep has not deleted.
	replaysCleared atomic.Int64

	// jseq numbers the journal rows: the last number handed out.
	jseq atomic.Uint64
	// dmu guards dirty, the partitions whose rows a checkpoint is to
	// write, dirtySpare, its spare buffer, and spareOps.
	dmu        sync.Mutex
	dirty      []*partition
	dirtySpare []*partition
	// spareOps holds buffers of journal ops that checkpoints took back
	// from partitions they left clean, for partitions turning dirty: a
	// partition's ops then grow in a buffer that has grown before.
	spareOps spareBufs
	// pendBytes counts the journal ops partitions hold for a checkpoint;
	// past checkpointBytes, ckptSoon asks the background loop for one.
	pendBytes atomic.Int64
	ckptSoon  chan struct{}
	// ckmu serialises checkpoints and guards ckptTo (the last journal row
	// a checkpoint deleted) and ckpt (its buffers).
	ckmu   sync.Mutex
	ckptTo uint64
	ckpt   ckptBuf

	// gate is held shared by every Apply and exclusively by Close, so Close
	// waits for the batches in flight before it closes Pebble.
	gate   sync.RWMutex
	closed atomic.Bool
	// failed holds the error that made the store unusable: a write-ahead
	// log fsync that failed after the batch's partition had moved on.
	failed atomic.Pointer[error]

	closeOnce sync.Once
	closeErr  error
	done      chan struct{}
	bg        sync.WaitGroup
}

// worker holds the buffers one Apply needs; workers are pooled so that a
// steady stream of batches allocates nothing.
type worker struct {
	exec   engine.Executor
	rk     []byte // a record's (or replay record's) Pebble key
	xk     []byte // an expiry index key
	val    []byte // a record's Pebble value
	reqs   []*request
	writes []engine.Write // a round's writes, in order
	view   roundView
	last   map[string]int // a large round's last write of each key
	ops    []byte         // a commit's journal ops (see journal.go)
	jk     []byte         // a journal row's key
}

// Open opens (creating if needed) the store in cfg.Dir. It migrates a
// directory of on-disk format version 1 and refuses one of another version
// with an error wrapping ErrFormat.
func Open(cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Store{
		cfg:         cfg,
		clock:       cfg.Clock,
		log:         cfg.Logger,
		logged:      cfg.Sync != SyncNever,
		seed:        maphash.MakeSeed(),
		perShard:    max(1, cfg.MaxResident/shardCount),
		done:        make(chan struct{}),
		present:     newPresence(),
		replayMarks: newReplayMarks(),
		syncq:       make(chan *round, syncQueue),
		ckptSoon:    make(chan struct{}, 1),
	}
	s.replaysCleared.Store(math.MinInt64)
	if s.clock == nil {
		s.clock = engine.SystemClock{}
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.workers.New = func() any { return new(worker) }
	s.requests.New = func() any { return &request{wake: make(chan bool, 1)} }
	s.rounds.New = func() any { return new(round) }
	s.joints.New = func() any { return new(jointStep) }
	for i := range s.shards {
		s.shards[i].init()
	}

	fs := cfg.FS
	if fs == nil {
		// Pebble wraps a nil FS in a disk-health checker whose goroutine
		// only DB.Close stops: a pebble.Open that fails (the directory
		// locked, not a directory) would leave it running. Its reports go
		// to an event listener the store does not set, so the operating
		// system's file system is used as it is.
		fs = vfs.Default
	}
	s.wal = newWALFS(fs, cfg.Dir, cfg.MemTableBytes, cfg.Sync == SyncOnInterval, s.log)
	db, err := pebble.Open(cfg.Dir, s.pebbleOptions())
	if err != nil {
		s.wal.close()
		return nil, fmt.Errorf("%w: diskstore: opening %s: %w", engine.ErrUnavailable, cfg.Dir, err)
	}
	s.db = db
	fail := func(err error) (*Store, error) {
		_ = db.Close()
		s.wal.close()
		return nil, err
	}
	moveReplays, err := s.checkFormat()
	if err != nil {
		return fail(err)
	}
	if err := s.recoverJournal(engine.UnixMilli(s.clock)); err != nil {
		return fail(fmt.Errorf("diskstore: applying the journal of %s: %w", cfg.Dir, err))
	}
	if moveReplays {
		if err := s.migrateReplays(engine.UnixMilli(s.clock)); err != nil {
			return fail(err)
		}
	}
	if err := s.fillPresence(engine.UnixMilli(s.clock)); err != nil {
		return fail(err)
	}
	s.bg.Add(2)
	go s.background()
	go s.syncer()
	if cfg.Sync == SyncOnInterval {
		s.bg.Add(1)
		go s.periodicSync()
	}
	return s, nil
}

func (s *Store) pebbleOptions() *pebble.Options {
	o := &pebble.Options{
		FS:                 s.wal,
		CacheSize:          s.cfg.CacheBytes,
		MemTableSize:       uint64(s.cfg.MemTableBytes),
		FormatMajorVersion: pebble.FormatNewest,
		Logger:             pebbleLogger{s.log},
	}
	o.Experimental.SpanPolicyFunc = namespaceSpans
	return o
}

// namespaceSpans keeps every table Pebble writes, in flushes and
// compactions, within one namespace (see layout.go): a table ends where
// the namespace of its first key does. A table of replay records, written
// in key order, then spans no other namespace's rows, so Pebble can move it
// down its levels without merging it into tables of records or journal
// rows (see decision 0085).
func namespaceSpans(start []byte) (pebble.SpanPolicy, []byte, error) {
	if len(start) == 0 || start[0] == 0xff {
		return pebble.SpanPolicy{}, nil, nil
	}
	return pebble.SpanPolicy{}, []byte{start[0] + 1}, nil
}

// checkFormat writes the format version into a new store and checks it in
// an existing one, migrating a store of version 1 (see migrate.go) and
// recording the current version over version 5. It reports a store of
// versions 2 to 4, whose replay records Open moves once their journal is
// applied (see migrateReplays).
func (s *Store) checkFormat() (moveReplays bool, err error) {
	v, closer, err := s.db.Get(formatKey)
	switch {
	case err == nil:
		version, derr := decodeFormat(v)
		_ = closer.Close()
		switch {
		case derr != nil:
			return false, derr
		case version == formatVersion:
			return false, nil
		case version == 5:
			// Version 6 reads everything version 5 wrote.
			return false, s.writeFormat()
		case version >= 2 && version <= 4:
			// Version 3 is version 2 with a journal, version 4 version 3
			// with one more journal op, and version 5 version 4 with its
			// replay records moved (see layout.go).
			return true, nil
		case version == 1:
			return false, s.migrateV1(engine.UnixMilli(s.clock))
		}
		return false, fmt.Errorf("%w: %s holds format version %d; this build reads version %d and migrates versions 1 to 5: "+
			"open it with a build that reads version %d, or move it aside to start with an empty store",
			ErrFormat, s.cfg.Dir, version, formatVersion, version)
	case !errors.Is(err, pebble.ErrNotFound):
		return false, fmt.Errorf("%w: diskstore: reading the format version: %w", engine.ErrUnavailable, err)
	}
	iter, err := s.db.NewIter(nil)
	if err != nil {
		return false, fmt.Errorf("%w: diskstore: %w", engine.ErrUnavailable, err)
	}
	empty := !iter.First()
	if err := iter.Close(); err != nil {
		return false, fmt.Errorf("%w: diskstore: %w", engine.ErrUnavailable, err)
	}
	if !empty {
		return false, fmt.Errorf("%w: %s holds data but no format version", ErrFormat, s.cfg.Dir)
	}
	return false, s.writeFormat()
}

// writeFormat records this build's format version, fsynced.
func (s *Store) writeFormat() error {
	err := s.db.Set(formatKey, encodeFormat(formatVersion), pebble.NoSync)
	if err == nil {
		err = s.logSync()
	}
	if err != nil {
		return fmt.Errorf("%w: diskstore: writing the format version: %w", engine.ErrUnavailable, err)
	}
	return nil
}

// Apply runs b atomically on its partition. See engine.Store.
//
// Batches on one partition are run in rounds (see commit.go): the caller
// that finds the partition idle leads a round, evaluating every batch that
// has queued meanwhile, in arrival order, against the partition's records
// in memory; their writes go to Pebble in one batch and only then to
// memory, so a round Pebble refuses changes nothing. Under SyncAlways the
// next round starts as soon as Pebble has sequenced this one in its log,
// and every batch of a round is answered once the log is fsynced; a round
// that wrote nothing but read state not yet fsynced waits for that fsync
// too, so no answer ever rests on state a crash could lose. Under
// SyncOnInterval the same holds with "fsynced" read as "written to the
// operating system" (see walFS.syncLogs).
//
// Apply does not observe ctx once it has queued its batch: a commit in
// flight cannot be abandoned.
func (s *Store) Apply(ctx context.Context, b *engine.Batch, out *engine.StepResult) error {
	return s.apply(ctx, b, out, false)
}

// ApplyDeferred is Apply without the wait for the fsync of the batch's
// round under SyncAlways (for its write, under SyncOnInterval): it returns
// once the batch is in Pebble's log and memory. A caller makes what it
// applied durable with Sync before it answers anyone. See
// engine.DeferredSyncStore.
//
// Until its fsync completes the partition is not evicted from memory (a
// reloaded partition would not know its state is unsynced).
func (s *Store) ApplyDeferred(ctx context.Context, b *engine.Batch, out *engine.StepResult) error {
	return s.apply(ctx, b, out, true)
}

// Sync returns once everything every batch so far wrote or read is
// fsynced; under SyncOnInterval, once it is written to the operating
// system (the fsync follows within SyncInterval). Under SyncNever it
// returns at once, as Apply does. Like Apply, it returns an error once the
// store is closed or has failed. See engine.DeferredSyncStore.
func (s *Store) Sync(ctx context.Context) error {
	s.gate.RLock()
	defer s.gate.RUnlock()
	if s.closed.Load() {
		return engine.ErrClosed
	}
	if err := s.failure(); err != nil {
		return err
	}
	if !s.logged {
		return nil
	}
	return s.syncLog()
}

// syncQueue bounds the rounds awaiting the syncer; a leader that finds it
// full waits for room.
const syncQueue = 1024

// enter reports why a call may not run: the store is closed or has failed,
// or ctx has ended. The caller holds the gate shared.
func (s *Store) enter(ctx context.Context) error {
	if s.closed.Load() {
		return engine.ErrClosed
	}
	if err := s.failure(); err != nil {
		return err
	}
	return ctx.Err()
}

func (s *Store) apply(ctx context.Context, b *engine.Batch, out *engine.StepResult, deferred bool) error {
	s.gate.RLock()
	defer s.gate.RUnlock()
	if err := s.enter(ctx); err != nil {
		return err
	}
	p := s.pin(b.Partition)
	defer p.pins.Add(-1)
	r := s.requests.Get().(*request)
	r.b, r.out, r.w, r.deferred = b, out, s.workers.Get().(*worker), deferred && s.logged
	err := s.run(p, r)
	s.workers.Put(r.w)
	*r = request{wake: r.wake}
	s.requests.Put(r)
	return err
}

// encode appends to ops the Pebble form of writes on partition p, as
// journal ops (see journal.go): each record's row, with an expiry index
// entry where the record is new or its expiry moved to another bucket, and
// each replay record's row in its bucket. Only the last write of a key
// counts; p must not yet hold any of writes.
func (s *Store) encode(w *worker, ops []byte, p *partition, writes []engine.Write) []byte {
	// A round of many batches finds each key's last write with a map; the
	// usual handful of writes, by scanning.
	large := len(writes) > 16
	if large {
		if w.last == nil {
			w.last = make(map[string]int)
		}
		clear(w.last)
		for i := range writes {
			w.last[writes[i].Key] = i
		}
	}
	named := false // a record op has named p (see opSetRecord)
	for i := range writes {
		if large && w.last[writes[i].Key] != i || !large && rewritten(writes, i) {
			continue
		}
		wr := &writes[i]
		w.val = appendValue(w.val[:0], &wr.Rec)
		if !wr.Delete && isReplay(wr.Key, wr.Rec.Kind) {
			b := bucketOf(wr.Rec.ExpireAt)
			s.markReplay(p, b)
			w.rk = appendReplayKey(w.rk[:0], b, sliceOf(wr.Rec.ExpireAt), p.name, wr.Key)
			ops = appendSetOp(ops, w.rk, w.val)
			continue
		}
		w.rk = appendRecordKey(w.rk[:0], p.name, wr.Key)
		old, had := p.recs.get(wr.Key)
		if wr.Delete {
			// The record's index entry is left behind, stale: the sweep
			// drops it when its bucket ends.
			if had {
				ops = appendDeleteOp(ops, w.rk)
				named = true
			}
			continue
		}
		if named {
			ops = appendSetRecordOp(ops, wr.Key, w.val)
		} else {
			ops = appendSetOp(ops, w.rk, w.val)
			named = true
		}
		if b := bucketOf(wr.Rec.ExpireAt); !had || bucketOf(old.ExpireAt) != b {
			w.xk = appendIndexKey(w.xk[:0], b, s.seq.Add(1), w.rk)
			ops = appendSetOp(ops, w.xk, nil)
		}
	}
	return ops
}

// rewritten reports whether a later write in writes touches the key of
// writes[i].
func rewritten(writes []engine.Write, i int) bool {
	for j := i + 1; j < len(writes); j++ {
		if writes[j].Key == writes[i].Key {
			return true
		}
	}
	return false
}

// syncLog waits until everything Pebble has sequenced so far is fsynced.
//
// Callers share the empty records that ask for the fsyncs (group commit):
// while one caller's record and fsync are in flight, the callers that
// arrive meanwhile join the next group, and when the fsync in flight
// returns one of them writes a single record for the whole group, every
// member's writes being in the log before it. Without the groups each
// caller wrote a record of its own: Pebble already fsyncs concurrent
// records together, so each fsync covers as much as before, but every
// record was a pass through Pebble's commit pipeline. A member nearly
// always waits as long as it would have (its own record could not have
// been fsynced by the fsync in flight, which began before it was
// written), plus the hand-over to the group's writer. The exception is a
// member that arrives while the writer in flight has not yet had its own
// record sequenced (its commit is in Pebble's pipeline, or stalled there
// behind a full memtable): its own record would have shared that fsync,
// and it waits for the next.
func (s *Store) syncLog() error {
	s.smu.Lock()
	if !s.syncing {
		s.syncing = true
		s.smu.Unlock()
		return s.leadSync(nil)
	}
	g := s.nextSync
	if g == nil {
		g = &syncGroup{done: make(chan struct{}), lead: make(chan struct{}, 1)}
		s.nextSync = g
	}
	s.smu.Unlock()
	select {
	case <-g.done:
		return g.err
	case <-g.lead:
		return s.leadSync(g)
	}
}

// syncGroup is the callers of syncLog waiting for the next fsync to begin.
type syncGroup struct {
	done chan struct{} // closed once err is set
	lead chan struct{} // receives once, when a member is to write the record
	err  error
}

// leadSync writes the record of group g (nil for a caller alone), waits
// for its fsync, releases g's members and hands the lead to the group
// formed meanwhile, if any. The caller has set s.syncing.
func (s *Store) leadSync(g *syncGroup) error {
	// Every member's writes precede this: each joined g before its
	// group was taken (under smu), and the record is written after.
	covered := s.durable.committed.Load()
	// Once an fsync has failed nothing more goes into the log (see
	// failure): the group formed behind the failed fsync, a barrier or a
	// deferred round's wait is answered with the failure.
	err := s.failure()
	if err == nil {
		if err = s.logSync(); err != nil {
			err = s.fail(err)
		} else {
			s.durable.advance(covered)
		}
	}
	if g != nil {
		g.err = err
		close(g.done)
	}
	s.smu.Lock()
	if next := s.nextSync; next != nil {
		s.nextSync = nil
		next.lead <- struct{}{} // s.syncing stays set: next's writer holds it
	} else {
		s.syncing = false
	}
	s.smu.Unlock()
	return err
}

// logSync writes an empty record to the write-ahead log and waits for its
// fsync. It commits the record without the wait and waits with SyncWait:
// Pebble treats an error of a commit it waited for itself (DB.LogData or
// DB.Apply with pebble.Sync) as fatal, and its logger's Fatalf panics,
// while SyncWait returns a failed fsync as an error, which fails the store.
func (s *Store) logSync() error {
	b := s.db.NewBatch()
	defer func() { _ = b.Close() }()
	_ = b.LogData(nil, nil)
	if err := s.db.ApplyNoSyncWait(b, pebble.Sync); err != nil {
		return err
	}
	return b.SyncWait()
}

// fail records err as the reason the store can no longer serve and returns
// it wrapped in engine.ErrUnavailable. A failed fsync leaves memory ahead of
// the disk (the partitions have already moved on), and Pebble's log cannot
// be trusted with another write (see failure), so the store answers and
// commits nothing more: reopening it recovers exactly what reached the
// disk.
func (s *Store) fail(err error) error { return s.failIn("write-ahead log", err) }

// failIn is fail for a failure in what, which names the store's work that
// failed (the write-ahead log, a checkpoint) in the error and the log.
func (s *Store) failIn(what string, err error) error {
	err = fmt.Errorf("%w: diskstore: %s: %w", engine.ErrUnavailable, what, err)
	if s.failed.CompareAndSwap(nil, &err) {
		s.log.Error("diskstore: "+what+" failed; the store answers nothing more until reopened", "err", err)
	}
	return err
}

// failure returns the error that failed the store, or nil. Nothing is
// committed to Pebble once it is set: after a failed fsync Pebble's log
// still takes records until its current 32 KiB block is full, and the
// commit after that panics inside Pebble's commit pipeline (with its lock
// held). A commit made after the failure could never be answered anyway.
func (s *Store) failure() error {
	if e := s.failed.Load(); e != nil {
		return *e
	}
	return nil
}

func unavailable(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w: diskstore: %w", engine.ErrUnavailable, err)
}

// Close stops the background work, waits for the batches in flight,
// writes a last checkpoint (so the next Open has no journal to apply),
// fsyncs the write-ahead log and closes Pebble. It is idempotent; every later
// Apply returns engine.ErrClosed.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		s.gate.Lock()
		close(s.done)
		s.bg.Wait()
		var err error
		if s.failure() == nil {
			// A clean close leaves no journal to apply.
			err = s.checkpoint(engine.UnixMilli(s.clock))
			if err == nil {
				err = s.logSync()
			}
		}
		if s.ckpt.batch != nil {
			_ = s.ckpt.batch.Close()
			s.ckpt.batch = nil
		}
		err = errors.Join(err, s.db.Close())
		s.wal.close()
		s.gate.Unlock()
		if err != nil {
			s.closeErr = unavailable(err)
		}
	})
	return s.closeErr
}
