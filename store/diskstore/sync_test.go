package diskstore

import (
	"errors"
	"fmt"
	"hash/maphash"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/testclock"
)

// logStall holds the write-ahead log's fsyncs of a store openStalled
// opened, from hold until unhold, and makes them fail from breakSync on
// (a held fsync fails when it is released). It holds the log's writes
// from holdWrites until unholdWrites.
type logStall struct {
	stalled atomic.Bool
	broken  atomic.Bool
	release chan struct{}
	once    sync.Once

	writesStalled atomic.Bool
	writeRelease  chan struct{}
	writeOnce     sync.Once
}

func (l *logStall) holdWrites() { l.writesStalled.Store(true) }

func (l *logStall) unholdWrites() {
	l.writeOnce.Do(func() {
		l.writesStalled.Store(false)
		close(l.writeRelease)
	})
}

func (l *logStall) breakSync() { l.broken.Store(true) }

func (l *logStall) hold() { l.stalled.Store(true) }

func (l *logStall) unhold() {
	l.once.Do(func() {
		l.stalled.Store(false)
		close(l.release)
	})
}

// openStalled opens a store in memory, configured by modify, whose
// write-ahead log fsyncs the returned logStall can hold. At the end of the
// test it releases them, then closes the store, which waits for a held
// batch.
func openStalled(t *testing.T, modify func(*Config)) (*Store, *logStall) {
	t.Helper()
	l := &logStall{release: make(chan struct{}), writeRelease: make(chan struct{})}
	cfg := DefaultConfig()
	cfg.Dir = "db"
	cfg.FS = errorfs.Wrap(vfs.NewMem(), errorfs.InjectorFunc(func(op errorfs.Op) error {
		switch op.Kind {
		case errorfs.OpFileWrite:
			if strings.HasSuffix(op.Path, ".log") && l.writesStalled.Load() {
				<-l.writeRelease
			}
		case errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo:
			if !strings.HasSuffix(op.Path, ".log") {
				break
			}
			if l.stalled.Load() {
				<-l.release
			}
			if l.broken.Load() {
				return errorfs.ErrInjected
			}
		}
		return nil
	}))
	cfg.Clock = testclock.At(t0)
	modify(&cfg)
	s, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	t.Cleanup(l.unhold) // first
	t.Cleanup(l.unholdWrites)
	return s, l
}

// TestAnswersWaitForTheirFsync holds the write-ahead log's fsync and checks
// that neither the batch that wrote nor a later read of what it wrote is
// answered before the fsync completes.
// applyAsync applies cmds to partition on a goroutine of its own and sends
// the answer on the channel it returns.
func applyAsync(t *testing.T, eng *engine.Engine, partition string, cmds ...engine.Command) <-chan engine.StepResult {
	answer := make(chan engine.StepResult, 1)
	go func() {
		var out engine.StepResult
		if err := eng.Apply(t.Context(), partition, &out, cmds...); err != nil {
			t.Error(err)
		}
		answer <- out
	}()
	return answer
}

func TestAnswersWaitForTheirFsync(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, log := openStalled(t, func(*Config) {})
		eng := engine.New(s)
		apply(t, s, "p", engine.Incr("n", 1, 60_000))

		log.hold()
		wrote := applyAsync(t, eng, "p", engine.Incr("n", 1, 60_000))
		synctest.Wait()
		read := applyAsync(t, eng, "p", engine.Get("n"))
		synctest.Wait()
		select {
		case out := <-wrote:
			t.Fatalf("the incr was answered (%+v) before its fsync", out)
		case out := <-read:
			t.Fatalf("a read of unsynced state was answered (%+v) before the fsync", out)
		default:
		}
		// A partition with nothing pending answers at once.
		if got := apply(t, s, "q", engine.Get("n")); got.Results[0].Found {
			t.Fatalf("q: %+v", got)
		}

		log.unhold()
		if out := <-wrote; out.Results[0].Int != 2 {
			t.Errorf("incr = %d, want 2", out.Results[0].Int)
		}
		if out := <-read; out.Results[0].Value != "2" {
			t.Errorf("get = %q, want 2", out.Results[0].Value)
		}
	})
}

// TestRoundWhoseWritesCancelOut holds the write-ahead log's fsync and runs
// batches that create a record and delete it again, so that their rounds
// have writes but no row to commit. Such a round asks Pebble for no fsync:
// it must neither count the deferred rounds before it durable, nor answer
// a read of unsynced state before the fsync, as a round that wrote nothing
// does not.
func TestRoundWhoseWritesCancelOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, log := openStalled(t, func(*Config) {})
		eng := engine.New(s)
		cancel := []engine.Command{engine.Set("tmp", "v", 60_000), engine.Del("tmp")}

		log.hold()
		for _, part := range []string{"p", "q"} {
			var out engine.StepResult
			b := &engine.Batch{Partition: part, Commands: []engine.Command{engine.Incr("n", 1, 60_000)}}
			if err := s.ApplyDeferred(t.Context(), b, &out); err != nil {
				t.Fatal(err)
			}
		}
		// Nothing on r awaits an fsync: it is answered at once.
		apply(t, s, "r", cancel...)
		synctest.Wait()
		read := applyAsync(t, eng, "q", engine.Get("n"))
		readAndCancel := applyAsync(t, eng, "p", append([]engine.Command{engine.Get("n")}, cancel...)...)
		synctest.Wait()
		select {
		case out := <-read:
			t.Fatalf("a read of a deferred round was answered (%+v) before its fsync", out)
		case out := <-readAndCancel:
			t.Fatalf("a read of a deferred round, in a batch that wrote and deleted a record, was answered (%+v) before its fsync", out)
		default:
		}

		log.unhold()
		if out := <-read; out.Results[0].Value != "1" {
			t.Errorf("get on q = %q, want 1", out.Results[0].Value)
		}
		if out := <-readAndCancel; out.Results[0].Value != "1" || !out.Results[2].Found {
			t.Errorf("get on p = %+v, want 1 and the record deleted", out.Results)
		}
	})
}

// TestDeferredStepsWaitForOneFsync holds the write-ahead log's fsync and
// checks that a request of several steps runs them all (each with
// ApplyDeferred, which returns before its fsync) but is answered only after
// the fsync, that a read of what it wrote waits too, and that a partition
// holding unsynced deferred state is not evicted meanwhile.
func TestDeferredStepsWaitForOneFsync(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, log := openStalled(t, func(cfg *Config) { cfg.MaxResident = 64 }) // one partition per shard
		eng := engine.New(s)
		apply(t, s, "a", engine.Incr("n", 1, 60_000))

		log.hold()
		// ApplyDeferred returns with its fsync pending.
		var out engine.StepResult
		b := &engine.Batch{Partition: "c", Commands: []engine.Command{engine.Incr("n", 1, 60_000)}}
		if err := s.ApplyDeferred(t.Context(), b, &out); err != nil || out.Results[0].Int != 1 {
			t.Fatalf("ApplyDeferred = %+v, %v", out, err)
		}
		done := make(chan *engine.Response, 1)
		go func() {
			resp, err := eng.Do(t.Context(), &engine.Request{OperationID: engine.NewOperationID(), Mode: engine.All, Steps: []engine.Step{
				{Partition: "a", Commands: []engine.Command{engine.Incr("n", 1, 60_000)}},
				{Partition: "b", Commands: []engine.Command{engine.Incr("n", 1, 60_000)}},
			}})
			if err != nil {
				t.Error(err)
			}
			done <- resp
		}()
		synctest.Wait()
		read := applyAsync(t, eng, "a", engine.Get("n"))
		synctest.Wait()
		select {
		case resp := <-done:
			t.Fatalf("the request was answered (%+v) before its fsync", resp)
		case out := <-read:
			t.Fatalf("a read of unsynced state was answered (%+v) before the fsync", out)
		default:
		}
		// Both steps ran, and the partitions holding their unsynced state
		// stayed in memory although new partitions pushed them out of their
		// shards' share.
		for i := range 256 {
			apply(t, s, fmt.Sprintf("x%d", i), engine.Get("n"))
		}
		for _, name := range []string{"a", "b", "c"} {
			h := maphash.String(s.seed, name)
			sh := s.shard(h)
			sh.mu.Lock()
			p := sh.find(h, name)
			sh.mu.Unlock()
			if p == nil || p.unsynced.Load() == 0 {
				t.Fatalf("partition %q: resident %v with unsynced state", name, p != nil)
			}
		}

		log.unhold()
		resp := <-done
		if resp.Steps[0].Results[0].Int != 2 || resp.Steps[1].Results[0].Int != 1 {
			t.Errorf("steps = %+v", resp.Steps)
		}
		if out := <-read; out.Results[0].Value != "2" {
			t.Errorf("get = %q, want 2", out.Results[0].Value)
		}
		if err := s.Sync(t.Context()); err != nil {
			t.Fatal(err)
		}
	})
}

// countedLog returns a file system that counts the write-ahead log's
// fsyncs.
func countedLog(fsyncs *atomic.Int64) vfs.FS {
	return errorfs.Wrap(vfs.NewMem(), errorfs.InjectorFunc(func(op errorfs.Op) error {
		switch op.Kind {
		case errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo:
			if strings.HasSuffix(op.Path, ".log") {
				fsyncs.Add(1)
			}
		}
		return nil
	}))
}

// countedConfig is a store in "db" on a file system that counts the
// log's fsyncs (countedLog), under policy with a period of a second, on a
// controlled clock, with no sweep to run in the test's time.
func countedConfig(fsyncs *atomic.Int64, policy SyncPolicy) Config {
	cfg := DefaultConfig()
	cfg.Dir = "db"
	cfg.FS = countedLog(fsyncs)
	cfg.Clock = testclock.At(t0)
	cfg.Sync = policy
	cfg.SyncInterval = time.Second
	cfg.SweepInterval = time.Hour
	return cfg
}

// TestDeferredRoundsAskForNoFsync checks that rounds run with
// ApplyDeferred start no fsync of their own: the one fsync that Sync asks
// for covers them all, and each partition holds no unsynced state after
// it; a deferred round whose caller never calls Sync is fsynced by the
// store within lazyWait.
func TestDeferredRoundsAskForNoFsync(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var fsyncs atomic.Int64
		cfg := DefaultConfig()
		cfg.Dir = "db"
		cfg.FS = countedLog(&fsyncs)
		cfg.Clock = testclock.At(t0)
		s, err := Open(cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		unsynced := func(name string) int32 {
			h := maphash.String(s.seed, name)
			sh := s.shard(h)
			sh.mu.Lock()
			defer sh.mu.Unlock()
			if p := sh.find(h, name); p != nil {
				return p.unsynced.Load()
			}
			return 0
		}
		parts := []string{"a", "b", "c", "d", "e"}
		for _, p := range parts {
			apply(t, s, p, engine.Incr("n", 1, 60_000)) // synced: one fsync each at most
		}
		synctest.Wait()

		before := fsyncs.Load()
		for _, p := range parts {
			var out engine.StepResult
			b := &engine.Batch{Partition: p, Commands: []engine.Command{engine.Incr("n", 1, 60_000)}}
			if err := s.ApplyDeferred(t.Context(), b, &out); err != nil || out.Results[0].Int != 2 {
				t.Fatalf("ApplyDeferred on %q = %+v, %v", p, out, err)
			}
		}
		synctest.Wait()
		if n := fsyncs.Load() - before; n != 0 {
			t.Fatalf("%d fsyncs after 5 deferred rounds, want none before Sync", n)
		}
		for _, p := range parts {
			if unsynced(p) == 0 {
				t.Fatalf("partition %q holds no unsynced state before Sync", p)
			}
		}
		if err := s.Sync(t.Context()); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if n := fsyncs.Load() - before; n != 1 {
			t.Fatalf("%d fsyncs for 5 deferred rounds and one Sync, want 1", n)
		}
		for _, p := range parts {
			if n := unsynced(p); n != 0 {
				t.Fatalf("partition %q holds %d unsynced rounds after Sync", p, n)
			}
		}

		// Without a Sync, the store fsyncs a deferred round itself.
		before = fsyncs.Load()
		var out engine.StepResult
		b := &engine.Batch{Partition: "a", Commands: []engine.Command{engine.Incr("n", 1, 60_000)}}
		if err := s.ApplyDeferred(t.Context(), b, &out); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if n := fsyncs.Load() - before; n != 0 || unsynced("a") == 0 {
			t.Fatalf("%d fsyncs, %d unsynced rounds at once, want none and one", n, unsynced("a"))
		}
		time.Sleep(lazyWait)
		synctest.Wait()
		if n := fsyncs.Load() - before; n != 1 || unsynced("a") != 0 {
			t.Fatalf("%d fsyncs, %d unsynced rounds after lazyWait, want one and none", n, unsynced("a"))
		}
	})
}

// TestIntervalAnswersWaitForTheirWrite checks that under SyncOnInterval a
// batch is answered once its write-ahead log record is written to the
// operating system, which a process crash does not lose (see TestCrash),
// and not before; and that no answer waits for an fsync.
func TestIntervalAnswersWaitForTheirWrite(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, log := openStalled(t, func(cfg *Config) {
			cfg.Sync = SyncOnInterval
			cfg.SyncInterval = time.Hour
		})
		eng := engine.New(s)
		log.hold() // every fsync, until the end of the test
		if got := apply(t, s, "p", engine.Incr("n", 1, 60_000)); got.Results[0].Int != 1 {
			t.Fatalf("incr = %+v, want 1", got.Results[0])
		}
		deferred := &engine.Batch{Partition: "q", Commands: []engine.Command{engine.Incr("n", 1, 60_000)}}
		var out engine.StepResult
		if err := s.ApplyDeferred(t.Context(), deferred, &out); err != nil {
			t.Fatal(err)
		}
		if err := s.Sync(t.Context()); err != nil {
			t.Fatalf("Sync with the log's fsyncs held: %v", err)
		}

		log.holdWrites()
		wrote := applyAsync(t, eng, "p", engine.Incr("n", 1, 60_000))
		synctest.Wait()
		select {
		case out := <-wrote:
			t.Fatalf("the incr was answered (%+v) before its record was written to the log", out)
		default:
		}
		log.unholdWrites()
		if out := <-wrote; out.Results[0].Int != 2 {
			t.Errorf("incr = %d, want 2", out.Results[0].Int)
		}
	})
}

// TestIntervalFsyncsEachPeriod checks that under SyncOnInterval answers
// ask for no fsync, that each period that wrote to the log ends with one
// fsync of it, and that a period that wrote nothing ends with none.
func TestIntervalFsyncsEachPeriod(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var fsyncs atomic.Int64
		cfg := countedConfig(&fsyncs, SyncOnInterval)
		s, err := Open(cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		synctest.Wait()
		before := fsyncs.Load()
		for i := range 20 {
			p := fmt.Sprintf("p%d", i%4)
			if i%2 == 0 {
				apply(t, s, p, engine.Incr("n", 1, 60_000))
				continue
			}
			var out engine.StepResult
			b := &engine.Batch{Partition: p, Commands: []engine.Command{engine.Incr("n", 1, 60_000)}}
			if err := s.ApplyDeferred(t.Context(), b, &out); err != nil {
				t.Fatal(err)
			}
			if err := s.Sync(t.Context()); err != nil {
				t.Fatal(err)
			}
		}
		synctest.Wait()
		if n := fsyncs.Load() - before; n != 0 {
			t.Fatalf("%d fsyncs for 20 answered batches, want none before the period ends", n)
		}
		time.Sleep(cfg.SyncInterval)
		synctest.Wait()
		if n := fsyncs.Load() - before; n != 1 {
			t.Fatalf("%d fsyncs at the end of a period that wrote, want 1", n)
		}
		time.Sleep(cfg.SyncInterval)
		synctest.Wait()
		if n := fsyncs.Load() - before; n != 1 {
			t.Fatalf("%d fsyncs after a period that wrote nothing, want still 1", n)
		}
	})
}

// TestFailedFsyncFailsTheStore makes the write-ahead log's fsync fail on
// each path on which the store asks for one, after a deferred batch, and
// checks that the store fails stop: the failure is returned wrapping
// engine.ErrUnavailable, never raised as a panic (which Pebble makes of a
// failed fsync of a commit it waited for), and every later call is refused.
func TestFailedFsyncFailsTheStore(t *testing.T) {
	for _, tc := range []struct {
		name   string
		policy SyncPolicy
		// fsync makes the store ask for an fsync; returns reports that it
		// returns the failure.
		fsync   func(t *testing.T, s *Store) error
		returns bool
	}{
		{"Sync", SyncAlways, func(t *testing.T, s *Store) error { return s.Sync(t.Context()) }, true},
		{"a read of unsynced state", SyncAlways, func(t *testing.T, s *Store) error {
			var out engine.StepResult
			return engine.New(s).Apply(t.Context(), "p", &out, engine.Get("n"))
		}, true},
		{"the store's own fsync of a deferred round", SyncAlways, func(t *testing.T, s *Store) error {
			time.Sleep(lazyWait)
			synctest.Wait()
			return nil
		}, false},
		{"the interval's fsync", SyncOnInterval, func(t *testing.T, s *Store) error {
			time.Sleep(s.cfg.SyncInterval)
			synctest.Wait()
			return nil
		}, false},
		{"Close", SyncAlways, func(t *testing.T, s *Store) error { return s.Close() }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s, log := openStalled(t, func(cfg *Config) { cfg.Sync = tc.policy })
				var out engine.StepResult
				b := &engine.Batch{Partition: "p", Commands: []engine.Command{engine.Incr("n", 1, 60_000)}}
				if err := s.ApplyDeferred(t.Context(), b, &out); err != nil {
					t.Fatal(err)
				}
				log.breakSync()
				err := tc.fsync(t, s)
				if tc.returns && !errors.Is(err, engine.ErrUnavailable) || err != nil && !errors.Is(err, engine.ErrUnavailable) {
					t.Fatalf("with the fsync failing: %v, want an error wrapping ErrUnavailable", err)
				}
				if !s.Stats().Failed {
					t.Errorf("Stats().Failed is false after the fsync failed")
				}
				if tc.name == "Close" {
					return
				}
				for _, part := range []string{"p", "q"} {
					if err := engine.New(s).Apply(t.Context(), part, &out, engine.Get("n")); !errors.Is(err, engine.ErrUnavailable) {
						t.Errorf("get on %s after the fsync failed: %v (%+v), want ErrUnavailable", part, err, out)
					}
				}
				if err := s.Sync(t.Context()); !errors.Is(err, engine.ErrUnavailable) {
					t.Errorf("Sync after the fsync failed: %v, want ErrUnavailable", err)
				}
			})
		})
	}
}

// TestNoAnswerRestsOnAFailedFsync makes the fsync of an increment fail
// while a read of the same partition has entered the store but not yet
// run (it waits here for the partition's lock, as it would behind a sweep
// pass or a joint step). The increment is in memory, and the failed fsync
// counts it synced, so the read finds nothing unsynced to wait for: it
// must be refused all the same, not answered with the lost increment.
func TestNoAnswerRestsOnAFailedFsync(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, log := openStalled(t, func(*Config) {})
		eng := engine.New(s)
		apply(t, s, "p", engine.Incr("n", 1, 60_000))

		log.hold()
		wrote := make(chan error, 1)
		go func() {
			var out engine.StepResult
			wrote <- eng.Apply(t.Context(), "p", &out, engine.Incr("n", 1, 60_000))
		}()
		synctest.Wait() // the increment is in memory, its fsync held
		p := resident(s, "p")
		p.mu.Lock()
		type answer struct {
			out engine.StepResult
			err error
		}
		read := make(chan answer, 1)
		go func() {
			var a answer
			a.err = eng.Apply(t.Context(), "p", &a.out, engine.Get("n"))
			read <- a
		}()
		for p.pins.Load() < 2 { // the read has entered the store
			runtime.Gosched()
		}
		log.breakSync()
		log.unhold()
		if err := <-wrote; !errors.Is(err, engine.ErrUnavailable) {
			t.Fatalf("incr whose fsync failed: %v, want ErrUnavailable", err)
		}
		p.mu.Unlock()
		if a := <-read; !errors.Is(a.err, engine.ErrUnavailable) {
			t.Fatalf("read after the fsync failed: %+v, %v; want ErrUnavailable", a.out, a.err)
		}
	})
}

// TestOpenReportsAFailedFsync makes the write-ahead log's fsync fail while
// a new store records its format version: Open returns the failure as an
// error, not as a panic.
func TestOpenReportsAFailedFsync(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Dir = "db"
	cfg.FS = errorfs.Wrap(vfs.NewMem(), errorfs.InjectorFunc(func(op errorfs.Op) error {
		switch op.Kind {
		case errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo:
			if strings.HasSuffix(op.Path, ".log") {
				return errorfs.ErrInjected
			}
		}
		return nil
	}))
	if s, err := Open(cfg); !errors.Is(err, engine.ErrUnavailable) {
		if err == nil {
			s.Close()
		}
		t.Fatalf("Open with a failing fsync: %v, want an error wrapping ErrUnavailable", err)
	}
}

// TestSyncsShareARecord holds the write-ahead log's fsyncs one at a time
// and checks that the Syncs that arrive while one is in flight write no
// record of their own meanwhile, then share one, written once the fsync in
// flight returns; and that none of them returns before the fsync of that
// record, which follows their writes (the one in flight began before them).
func TestSyncsShareARecord(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var gated atomic.Bool
		tokens := make(chan struct{}, 8)
		cfg := DefaultConfig()
		cfg.Dir = "db"
		cfg.FS = errorfs.Wrap(vfs.NewMem(), errorfs.InjectorFunc(func(op errorfs.Op) error {
			switch op.Kind {
			case errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo:
				if strings.HasSuffix(op.Path, ".log") && gated.Load() {
					<-tokens
				}
			}
			return nil
		}))
		cfg.Clock = testclock.At(t0)
		s, err := Open(cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		defer close(tokens) // release every fsync still held before Close
		logged := func() uint64 { return s.db.Metrics().WAL.BytesIn }
		deferred := func(p string) {
			var out engine.StepResult
			b := &engine.Batch{Partition: p, Commands: []engine.Command{engine.Incr("n", 1, 60_000)}}
			if err := s.ApplyDeferred(t.Context(), b, &out); err != nil {
				t.Fatal(err)
			}
		}
		syncAsync := func() <-chan error {
			done := make(chan error, 1)
			go func() { done <- s.Sync(t.Context()) }()
			return done
		}

		gated.Store(true)
		deferred("a")
		before := logged()
		first := syncAsync()
		synctest.Wait() // its record written, its fsync held
		record := logged() - before
		if record == 0 {
			t.Fatal("the first Sync wrote no record")
		}

		followers := []string{"b", "c", "d", "e", "f"}
		for _, p := range followers {
			deferred(p)
		}
		before = logged()
		var dones []<-chan error
		for range followers {
			dones = append(dones, syncAsync())
		}
		synctest.Wait()
		if n := logged() - before; n != 0 {
			t.Fatalf("Syncs arriving during an fsync wrote %d bytes to the log at once, want none (a record is %d)", n, record)
		}

		tokens <- struct{}{} // the first fsync returns
		synctest.Wait()
		if err := <-first; err != nil {
			t.Fatal(err)
		}
		if n := logged() - before; n != record {
			t.Fatalf("the waiting Syncs wrote %d bytes to the log, want one record of %d", n, record)
		}
		for i, done := range dones {
			select {
			case err := <-done:
				t.Fatalf("Sync %d returned (%v) before the fsync of a record written after its writes", i, err)
			default:
			}
		}

		tokens <- struct{}{} // the shared record's fsync returns
		for i, done := range dones {
			if err := <-done; err != nil {
				t.Fatalf("Sync %d: %v", i, err)
			}
		}
		gated.Store(false)
	})
}

// TestNothingIsLoggedAfterAFailedFsync makes an fsync fail while callers of
// every kind that commit to the log are already inside the store: a round's
// writer and a Sync whose fsync is held, Syncs queued behind them as one
// group, and a batch and a joint step that have entered but wait for their
// partition's lock. Every one is answered with the failure, and none puts a
// record into the failed log: Pebble takes records after a failed fsync
// until its next block is full, then treats the next commit as fatal (its
// logger's Fatalf panics).
func TestNothingIsLoggedAfterAFailedFsync(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, log := openStalled(t, func(*Config) {})
		eng := engine.New(s)
		apply(t, s, "p", engine.Incr("n", 1, 60_000))
		apply(t, s, "r", engine.Incr("n", 1, 60_000))
		async := func(f func() error) <-chan error {
			done := make(chan error, 1)
			go func() { done <- f() }()
			return done
		}
		sync := func() error { return s.Sync(t.Context()) }

		log.hold()
		wrote := async(func() error {
			var out engine.StepResult
			return eng.Apply(t.Context(), "q", &out, engine.Incr("n", 1, 60_000))
		})
		synctest.Wait()
		lead := async(sync)
		synctest.Wait() // its record written, its fsync held
		group := []<-chan error{async(sync), async(sync), async(sync)}
		synctest.Wait()

		p := resident(s, "p")
		p.mu.Lock()
		round := async(func() error {
			var out engine.StepResult
			return eng.Apply(t.Context(), "p", &out, engine.Incr("n", 1, 60_000))
		})
		joint := async(func() error {
			bs := []*engine.Batch{
				{Partition: "p", Commands: []engine.Command{engine.Incr("j", 1, 60_000)}},
				{Partition: "r", Commands: []engine.Command{engine.Incr("j", 1, 60_000)}},
			}
			return s.ApplyJoint(t.Context(), bs, make([]engine.StepResult, 2))
		})
		for p.pins.Load() < 2 { // both have entered the store
			runtime.Gosched()
		}
		before := s.db.Metrics().WAL.BytesIn
		log.breakSync()
		log.unhold()
		for name, done := range map[string]<-chan error{"the round": wrote, "the Sync": lead} {
			if err := <-done; !errors.Is(err, engine.ErrUnavailable) {
				t.Errorf("%s whose fsync failed: %v, want ErrUnavailable", name, err)
			}
		}
		for i, done := range group {
			if err := <-done; !errors.Is(err, engine.ErrUnavailable) {
				t.Errorf("Sync %d of the group behind the failed fsync: %v, want ErrUnavailable", i, err)
			}
		}
		p.mu.Unlock()
		if err := <-round; !errors.Is(err, engine.ErrUnavailable) {
			t.Errorf("a batch that entered before the failure: %v, want ErrUnavailable", err)
		}
		if err := <-joint; !errors.Is(err, engine.ErrUnavailable) {
			t.Errorf("a joint step that entered before the failure: %v, want ErrUnavailable", err)
		}
		synctest.Wait()
		if n := s.db.Metrics().WAL.BytesIn - before; n != 0 {
			t.Errorf("%d bytes went into the log after its fsync failed, want none", n)
		}
	})
}
