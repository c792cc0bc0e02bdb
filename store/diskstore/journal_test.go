package diskstore

import (
	"encoding/hex"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/testclock"
)

// TestCheckpointWritesEachRowOnce commits a hundred increments of one
// record, each a journal row of its own, and checks that a checkpoint
// writes the record's row once, as the partition holds it, and deletes
// the journal.
func TestCheckpointWritesEachRowOnce(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Clock = testclock.At(t0)
	cfg.SweepInterval = 1 << 62 // no background sweep: the test checkpoints
	s := openTest(t, cfg)
	for range 100 {
		apply(t, s, "p", engine.Incr("n", 1, 60_000))
	}
	if n := countRows(t, s, []byte{nsJournal}); n != 100 {
		t.Errorf("%d journal rows before the checkpoint, want 100 (one per commit)", n)
	}
	if n := countRows(t, s, []byte{nsRecord}); n != 0 {
		t.Errorf("%d record rows before the checkpoint, want 0 (the journal holds them)", n)
	}
	before := s.db.Metrics().WAL.BytesIn
	checkpoint(t, s)
	if n := countRows(t, s, []byte{nsJournal}); n != 0 {
		t.Errorf("%d journal rows after the checkpoint, want 0", n)
	}
	if n := countRows(t, s, []byte{nsRecord}); n != 1 {
		t.Errorf("%d record rows after the checkpoint, want 1", n)
	}
	if s.db.Metrics().WAL.BytesIn == before {
		t.Error("the checkpoint wrote nothing to the log")
	}
	rk := appendRecordKey(nil, "p", "n")
	v, closer, err := s.db.Get(rk)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := decodeValue(v)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(rec.Data); got != "100" {
		t.Errorf("the record's row holds %q, want the count the partition holds, 100", got)
	}
	_ = closer.Close()

	// A checkpoint with nothing dirty writes nothing.
	before = s.db.Metrics().WAL.BytesIn
	checkpoint(t, s)
	if s.db.Metrics().WAL.BytesIn != before {
		t.Error("a checkpoint with nothing to write wrote to the log")
	}
}

// TestJournalAppliedOnOpen takes a copy of the store's file system as a
// power loss would leave it, with commits in the journal that no
// checkpoint has written, and checks that the copy opens with every
// acknowledged change in its rows and an empty journal, replay records
// included: with the journal rows in the log and the memtable only, and
// flushed to tables.
func TestJournalAppliedOnOpen(t *testing.T) {
	for _, flushed := range []bool{false, true} {
		t.Run(fmt.Sprintf("flushed=%v", flushed), func(t *testing.T) {
			testJournalAppliedOnOpen(t, flushed)
		})
	}
}

func testJournalAppliedOnOpen(t *testing.T, flushed bool) {
	s, cfg, fs := openCrashable(t)
	for i := range 20 {
		apply(t, s, fmt.Sprintf("p%d", i%4), engine.Incr("n", 1, 3_600_000))
	}
	checkpoint(t, s) // the first rows, then more in the journal only
	req := &engine.Request{OperationID: "op-1", Steps: []engine.Step{
		{Partition: "p0", Commands: []engine.Command{engine.Incr("n", 10, 3_600_000)}},
	}}
	first, err := engine.New(s).Do(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 8 {
		apply(t, s, fmt.Sprintf("p%d", i%4), engine.Incr("n", 1, 3_600_000))
	}
	if n := countRows(t, s, []byte{nsJournal}); n == 0 {
		t.Fatal("nothing in the journal before the copy: the test would prove nothing")
	}
	if flushed {
		if err := s.db.Flush(); err != nil {
			t.Fatal(err)
		}
	}

	c := cfg
	c.FS = fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	copied := openTest(t, c)
	if n := countRows(t, copied, []byte{nsJournal}); n != 0 {
		t.Errorf("%d journal rows after opening, want 0", n)
	}
	for i, want := range []int64{5 + 10 + 2, 5 + 2, 5 + 2, 5 + 2} {
		rk := appendRecordKey(nil, fmt.Sprintf("p%d", i), "n")
		v, closer, err := copied.db.Get(rk)
		if err != nil {
			t.Fatalf("p%d: %v", i, err)
		}
		rec, err := decodeValue(v)
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := strconv.ParseInt(string(rec.Data), 10, 64); got != want {
			t.Errorf("p%d's row holds %d after opening, want %d", i, got, want)
		}
		_ = closer.Close()
	}
	again, err := engine.New(copied).Do(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	if !again.Steps[0].Replayed || again.Steps[0].Results[0].Int != first.Steps[0].Results[0].Int {
		t.Errorf("the retried step after opening = %+v, want the recorded result %d, replayed", again.Steps[0], first.Steps[0].Results[0].Int)
	}
}

// TestEarlierFormatsOpenAsTheCurrent opens directories of format versions
// 2 (which has no journal) and 3 (a journal without opSetRecord, here
// left by an unclean stop) and checks that their records and journal are
// read and their version is now the current one.
func TestEarlierFormatsOpenAsTheCurrent(t *testing.T) {
	for _, version := range []uint32{2, 3} {
		t.Run(fmt.Sprint(version), func(t *testing.T) {
			rec := engine.Record{Kind: engine.RecValue, ExpireAt: t0 + 3_600_000, Data: []byte("41")}
			rows := map[string][]byte{
				string(formatKey):                      encodeFormat(version),
				string(appendRecordKey(nil, "p", "n")): appendValue(nil, &rec),
				string(appendIndexKey(nil, bucketOf(rec.ExpireAt), 1, appendRecordKey(nil, "p", "n"))): nil,
			}
			want := int64(42)
			if version == 3 {
				// A journal row as version 3 wrote it, setting the counter
				// to 50; opening applies it.
				later := rec
				later.Data = []byte("50")
				rows[string(appendJournalKey(nil, 1))] = appendSetOp(nil, appendRecordKey(nil, "p", "n"), appendValue(nil, &later))
				want = 51
			}
			dir := plant(t, rows)
			cfg := DefaultConfig()
			cfg.Dir = dir
			cfg.Clock = testclock.At(t0)
			s := openTest(t, cfg)
			if got := apply(t, s, "p", engine.Incr("n", 1, 3_600_000)).Results[0].Int; got != want {
				t.Errorf("incremented a format-%d counter to %d, want %d", version, got, want)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if got := storedFormat(t, dir); got != formatVersion {
				t.Errorf("format version %d after opening a version %d directory, want %d", got, version, formatVersion)
			}
		})
	}
}

// storedRow returns the value of row key in the closed store in dir.
func storedRow(t *testing.T, dir string, key []byte) []byte {
	t.Helper()
	db, err := pebble.Open(dir, &pebble.Options{Logger: pebbleLogger{slog.New(slog.DiscardHandler)}})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	v, closer, err := db.Get(key)
	if err != nil {
		t.Fatalf("row %q: %v", key, err)
	}
	defer closer.Close()
	return slices.Clone(v)
}

// storedFormat returns the format version recorded in the closed store in
// dir.
func storedFormat(t *testing.T, dir string) uint32 {
	t.Helper()
	version, err := decodeFormat(storedRow(t, dir, formatKey))
	if err != nil {
		t.Fatal(err)
	}
	return version
}

// TestFormatFiveOpensAsTheCurrent opens a directory of format version 5,
// whose replay record holds its results in the engine's first compact
// form, and checks that a retry of the recorded step replays them and that
// the directory is now of the current version, whose new records take the
// shorter form.
func TestFormatFiveOpensAsTheCurrent(t *testing.T) {
	window := engine.Window{Key: "w", Kind: algo.KindFixed, Limit: 5, WindowMs: 60_000}
	step := engine.Step{Partition: "p", Commands: []engine.Command{engine.Hit(1, window)}}
	hash, err := step.Hash()
	if err != nil {
		t.Fatal(err)
	}
	// The first compact form of one admitted hit of one window, as version
	// 5 wrote it: 4 remaining, reset at 1,796,000,060,000.
	form1, err := hex.DecodeString("01000121" + "08c0c9909fc568" + "0101" + "08c0c9909fc568")
	if err != nil {
		t.Fatal(err)
	}
	rec := engine.Record{Kind: engine.RecReplay, ExpireAt: t0 + 90_000, Data: append(hash[:], form1...)}
	const key = "\x00op\x00op-1\x000" // the engine's replay key of op-1's step 0
	dir := plant(t, map[string][]byte{
		string(formatKey): encodeFormat(5),
		string(appendReplayKey(nil, bucketOf(rec.ExpireAt), sliceOf(rec.ExpireAt), "p", key)): appendValue(nil, &rec),
	})
	cfg := DefaultConfig()
	cfg.Dir = dir
	cfg.Clock = testclock.At(t0)
	s := openTest(t, cfg)
	eng := engine.New(s)
	resp, err := eng.Do(t.Context(), &engine.Request{OperationID: "op-1", Steps: []engine.Step{step}})
	if err != nil {
		t.Fatal(err)
	}
	want := engine.Result{Allowed: true, Remaining: 4, ResetAt: 1_796_000_060_000,
		Windows: []engine.WindowResult{{Allowed: true, Remaining: 4, ResetAt: 1_796_000_060_000}}}
	if st := resp.Steps[0]; !st.Replayed || len(st.Results) != 1 || !reflect.DeepEqual(st.Results[0], want) {
		t.Fatalf("the retried step = %+v, want the recorded %+v, replayed", st, want)
	}

	// A new operation is recorded in the shorter form, and replays.
	fresh := &engine.Request{OperationID: "op-2", Steps: []engine.Step{step}}
	first, err := eng.Do(t.Context(), fresh)
	if err != nil {
		t.Fatal(err)
	}
	again, err := eng.Do(t.Context(), fresh)
	if err != nil {
		t.Fatal(err)
	}
	if !again.Steps[0].Replayed || !reflect.DeepEqual(again.Steps[0].Results, first.Steps[0].Results) {
		t.Errorf("op-2 retried = %+v, want the recorded %+v, replayed", again.Steps[0], first.Steps[0])
	}
	if err := s.Close(); err != nil { // its last checkpoint writes the rows
		t.Fatal(err)
	}
	if got := storedFormat(t, dir); got != formatVersion {
		t.Errorf("format version %d after opening a version 5 directory, want %d", got, formatVersion)
	}
	exp := t0 + engine.ReplayTTL.Milliseconds()
	v := storedRow(t, dir, appendReplayKey(nil, bucketOf(exp), sliceOf(exp), "p", "\x00op\x00op-2\x000"))
	if rec, err := decodeValue(v); err != nil || len(rec.Data) <= len(hash) || rec.Data[len(hash)] != 2 {
		t.Errorf("op-2's replay record %+v (%v): want its results in the second compact form", rec, err)
	}
}

// checkpointDuring runs a checkpoint while the test holds hold's lock,
// calls during once the checkpoint has taken the dirty partitions (it is
// then waiting for hold), and returns once the checkpoint has.
func checkpointDuring(t *testing.T, s *Store, hold *partition, during func()) {
	t.Helper()
	hold.mu.Lock()
	done := make(chan error, 1)
	go func() { done <- s.checkpoint(engine.UnixMilli(s.clock)) }()
	for {
		s.dmu.Lock()
		taken := len(s.dirty) == 0
		s.dmu.Unlock()
		if taken {
			break
		}
		runtime.Gosched()
	}
	during()
	hold.mu.Unlock()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestCheckpointKeepsPartitionsDirtiedMeanwhile runs checkpoints, one
// with nothing to write among them, while other partitions commit, and
// checks that every commit is in the rows once a checkpoint has deleted
// its journal row, and survives a power loss after that checkpoint: the
// list of dirty partitions must not share its buffer with its spare, or a
// partition committed during a checkpoint overwrites one the checkpoint
// is writing, which is then never written again.
func TestCheckpointKeepsPartitionsDirtiedMeanwhile(t *testing.T) {
	s, cfg, fs := openCrashable(t)
	incr := func(p string) { apply(t, s, p, engine.Incr("n", 1, 3_600_000)) }

	incr("a")
	checkpointDuring(t, s, resident(s, "a"), func() { incr("b") })
	checkpoint(t, s) // writes b's rows
	checkpoint(t, s) // nothing to write
	incr("c")
	checkpointDuring(t, s, resident(s, "c"), func() { incr("d") })
	incr("c")
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("the checkpoint after c's and d's commits panicked: %v", r)
			}
		}()
		checkpoint(t, s)
	}()
	if n := countRows(t, s, []byte{nsJournal}); n != 0 {
		t.Errorf("%d journal rows after the checkpoint, want 0", n)
	}
	if err := s.Sync(t.Context()); err != nil { // the checkpoint survives the copy
		t.Fatal(err)
	}

	c := cfg
	c.FS = fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	copied := openTest(t, c)
	for p, want := range map[string]string{"a": "1", "b": "1", "c": "2", "d": "1"} {
		if got := apply(t, copied, p, engine.Get("n")).Results[0].Value; got != want {
			t.Errorf("%s holds %q after a power loss, want %q", p, got, want)
		}
	}
}

// openCheckpointed opens a store on a fixed clock, asking for no fsync,
// with no background sweep: checkpoints happen when the test calls them.
func openCheckpointed(t *testing.T) *Store {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Clock = testclock.At(t0)
	cfg.Sync = SyncNever
	cfg.SweepInterval = 1 << 62
	return openTest(t, cfg)
}

// TestCheckpointReleasesBuffersOfCleanPartitions commits a burst on a
// partition and checks that once a checkpoint has written its rows and it
// has committed nothing since, it holds no buffer of journal ops: only a
// partition written since the last checkpoint holds them (see Memory in
// doc.go), or every partition that was once busy would keep up to twice
// maxKeptPend for as long as it stays resident.
func TestCheckpointReleasesBuffersOfCleanPartitions(t *testing.T) {
	s := openCheckpointed(t)
	for range 2 {
		for i := range 500 {
			apply(t, s, "p", engine.Incr(fmt.Sprintf("n%d", i%50), 1, 3_600_000))
		}
		checkpoint(t, s)
	}
	p := resident(s, "p")
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dirty.Load() {
		t.Fatal("p is dirty after a checkpoint with nothing committed since")
	}
	if n := cap(p.pend.ops) + cap(p.flushing.ops); n != 0 {
		t.Errorf("p, clean, holds %d bytes of journal buffers, want 0", n)
	}
}

// TestCleanPartitionsBuffersServeTheNextDirty checks that the journal
// buffers a checkpoint takes back from a partition it leaves clean serve
// the next partition to turn dirty, so that a partition's ops do not grow
// a fresh buffer every time it is written after a checkpoint.
func TestCleanPartitionsBuffersServeTheNextDirty(t *testing.T) {
	s := openCheckpointed(t)
	for i := range 100 {
		apply(t, s, "p", engine.Incr(fmt.Sprintf("n%d", i%10), 1, 3_600_000))
	}
	checkpoint(t, s)
	s.dmu.Lock()
	spare := s.spareOps.bytes
	s.dmu.Unlock()
	if spare == 0 {
		t.Fatal("a checkpoint that left p clean kept none of its buffers")
	}
	apply(t, s, "q", engine.Incr("n", 1, 3_600_000))
	q := resident(s, "q")
	q.mu.Lock()
	got := cap(q.pend.ops)
	q.mu.Unlock()
	s.dmu.Lock()
	left := s.spareOps.bytes
	s.dmu.Unlock()
	if left >= spare || got != spare-left {
		t.Errorf("q turned dirty with a buffer of %d bytes; spare bytes %d → %d, want one of p's taken", got, spare, left)
	}
}

// TestSpareBuffersFollowTheLoad checkpoints a load of more than
// minSpareOps across many partitions, which the checkpoint leaves clean:
// their buffers are kept as spares, beyond minSpareOps, for them to turn
// dirty again without growing new ones; a checkpoint with nothing to write
// lets the surplus go.
func TestSpareBuffersFollowTheLoad(t *testing.T) {
	s := openCheckpointed(t)
	value := strings.Repeat("v", engine.MaxValueBytes)
	const partitions, writes = 200, 12 // some 24 KiB of ops each, 5 MiB in all
	for i := range partitions {
		for j := range writes {
			apply(t, s, fmt.Sprintf("p%d", i), engine.Set(fmt.Sprintf("k%d", j), value, 3_600_000))
		}
	}
	taken := s.pendBytes.Load()
	if taken <= minSpareOps {
		t.Fatalf("only %d bytes of ops pending, want more than %d", taken, minSpareOps)
	}
	checkpoint(t, s)
	s.dmu.Lock()
	spare := s.spareOps.bytes
	s.dmu.Unlock()
	if spare <= minSpareOps || spare > spareOpsPerByte*int(taken) {
		t.Errorf("after a checkpoint of %d bytes of ops, %d bytes of spare buffers; want more than %d, at most %d", taken, spare, minSpareOps, spareOpsPerByte*taken)
	}
	checkpoint(t, s) // nothing written since
	s.dmu.Lock()
	spare = s.spareOps.bytes
	s.dmu.Unlock()
	if spare > minSpareOps {
		t.Errorf("after a checkpoint with nothing to write, %d bytes of spare buffers; want at most %d", spare, minSpareOps)
	}
}

// TestSpareBuffersAreBounded fills the spare buffers past their bound:
// they hold at most its bytes, never a buffer over maxKeptPend or under
// minSpareOp, give back empty buffers until none is left, and let buffers
// go when the bound is lowered.
func TestSpareBuffersAreBounded(t *testing.T) {
	var sb spareBufs
	sb.give(make([]byte, 10, minSpareOp))
	if len(sb.bufs) != 0 {
		t.Fatal("kept a buffer before any bound was set")
	}
	const maxSpareOps = 4 << 20
	sb.limit(maxSpareOps)
	sb.give(make([]byte, 10, maxKeptPend+1))
	sb.give(make([]byte, 10, minSpareOp-1))
	sb.give(nil)
	if len(sb.bufs) != 0 || sb.bytes != 0 {
		t.Fatalf("kept %d buffers, %d bytes, of one over maxKeptPend, one under minSpareOp and a nil one", len(sb.bufs), sb.bytes)
	}
	for range 2 * maxSpareOps / maxKeptPend {
		sb.give(make([]byte, 7, maxKeptPend))
	}
	if sb.bytes > maxSpareOps || sb.bytes != len(sb.bufs)*maxKeptPend {
		t.Fatalf("spare buffers hold %d bytes in %d buffers, want at most %d", sb.bytes, len(sb.bufs), maxSpareOps)
	}
	sb.limit(maxSpareOps / 2)
	if sb.bytes > maxSpareOps/2 || sb.bytes != len(sb.bufs)*maxKeptPend || len(sb.bufs) == 0 {
		t.Fatalf("lowered to %d, spare buffers hold %d bytes in %d buffers", maxSpareOps/2, sb.bytes, len(sb.bufs))
	}
	for n := len(sb.bufs); n > 0; n-- {
		if b := sb.take(); len(b) != 0 || cap(b) != maxKeptPend {
			t.Fatalf("took a buffer of len %d, cap %d; want an empty one of %d", len(b), cap(b), maxKeptPend)
		}
	}
	if b := sb.take(); b != nil || sb.bytes != 0 {
		t.Errorf("took %v with none left (%d bytes counted), want nil", b, sb.bytes)
	}
}

// TestCheckpointBufferKeptUnderSteadyLoad checks when a checkpoint keeps
// its buffer for the next: a small one always, a large one while the
// load that grew it lasts, and not after a burst.
func TestCheckpointBufferKeptUnderSteadyLoad(t *testing.T) {
	for _, c := range []struct {
		name     string
		cap, len int
		keep     bool
	}{
		{"small, idle", maxKeptCkpt, 0, true},
		{"large, steady load", 4 * maxKeptCkpt, 3 * maxKeptCkpt, true},
		{"large, half used", 4 * maxKeptCkpt, 2 * maxKeptCkpt, true},
		{"large, after a burst", 4 * maxKeptCkpt, 2*maxKeptCkpt - 1, false},
		{"just past the bound, idle", maxKeptCkpt + 1, 0, false},
	} {
		if got := keepCkptBuf(c.cap, c.len); got != c.keep {
			t.Errorf("%s: keepCkptBuf(%d, %d) = %v, want %v", c.name, c.cap, c.len, got, c.keep)
		}
	}
}

// TestCheckpointThatCannotWriteFailsTheStore gives a partition a pending
// op that cannot be decoded: the checkpoint cannot write its rows, so the
// store fails stop, naming the checkpoint, and answers nothing more.
func TestCheckpointThatCannotWriteFailsTheStore(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Clock = testclock.At(t0)
	cfg.SweepInterval = 1 << 62
	s := openTest(t, cfg)
	apply(t, s, "p", engine.Incr("n", 1, 60_000))
	p := resident(s, "p")
	p.mu.Lock()
	p.pend.ops = append(p.pend.ops, 'x') // no op starts so
	p.mu.Unlock()
	err := s.checkpoint(engine.UnixMilli(s.clock))
	if !errors.Is(err, engine.ErrUnavailable) || !strings.Contains(err.Error(), "checkpoint") {
		t.Fatalf("checkpoint of a corrupt op: %v, want ErrUnavailable naming the checkpoint", err)
	}
	var out engine.StepResult
	b := &engine.Batch{Partition: "q", Commands: []engine.Command{engine.Incr("n", 1, 60_000)}}
	if err := s.Apply(t.Context(), b, &out); !errors.Is(err, engine.ErrUnavailable) {
		t.Errorf("Apply after a failed checkpoint: %v, want ErrUnavailable", err)
	}
}

// openCrashable opens a store with no background sweep (the test
// checkpoints) on a file system of which the test takes copies as a power
// loss would leave them (fs.CrashClone).
func openCrashable(t *testing.T) (*Store, Config, *vfs.MemFS) {
	t.Helper()
	fs := vfs.NewCrashableMem()
	cfg := DefaultConfig()
	cfg.Dir, cfg.FS, cfg.Clock = "db", fs, testclock.At(t0)
	cfg.SweepInterval = 1 << 62
	return openTest(t, cfg), cfg, fs
}

// TestRetryReadsEachPendingOpOnce retries a recorded request on a
// partition with many requests pending since its last checkpoint: the
// retry replays, and the lookups between them read each pending op once
// (the index covers every op, and the next lookup reads only the ops
// committed since), rather than every op at each retry.
func TestRetryReadsEachPendingOpOnce(t *testing.T) {
	s := openCheckpointed(t)
	eng := engine.New(s)
	request := func(id string) *engine.Request {
		return &engine.Request{OperationID: id, Steps: []engine.Step{{
			Partition: "p", Commands: []engine.Command{engine.Incr("n", 1, 3_600_000)},
		}}}
	}
	do := func(r *engine.Request) *engine.Response {
		t.Helper()
		resp, err := eng.Do(t.Context(), r)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	retried := request("op-retried")
	do(retried)
	commit := func(n int) {
		for i := range n {
			do(request(fmt.Sprintf("op-%d-%d", n, i)))
		}
	}
	commit(1_000)
	retry := func(wantIndexed int) {
		t.Helper()
		if resp := do(retried); !resp.Steps[0].Replayed || resp.Steps[0].Results[0].Int != 1 {
			t.Fatalf("retry: %+v, want the recorded result, replayed", resp.Steps[0])
		}
		p := resident(s, "p")
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.pend.indexed != len(p.pend.ops) || len(p.pend.replays) != wantIndexed {
			t.Fatalf("after the retry the index covers %d of %d bytes, %d replay rows; want all, %d rows",
				p.pend.indexed, len(p.pend.ops), len(p.pend.replays), wantIndexed)
		}
	}
	retry(1 + 1_000)
	commit(10)
	retry(1 + 1_000 + 10)

	// As during a checkpoint: the ops move to flushing with their index.
	p := resident(s, "p")
	p.mu.Lock()
	p.flushing, p.pend = p.pend, pendingOps{}
	p.mu.Unlock()
	commit(5)
	if resp := do(retried); !resp.Steps[0].Replayed {
		t.Fatalf("retry while its op is being checkpointed: %+v, want replayed", resp.Steps[0])
	}
	p.mu.Lock() // as it was, for the store's closing checkpoint
	p.pend = pendingOps{ops: append(p.flushing.ops, p.pend.ops...)}
	p.flushing = pendingOps{}
	p.mu.Unlock()
}

// TestPendingReplayIndex checks the index of replay rows among pending
// ops: a row set twice gives its last value, a row sharing another's
// fingerprint is still found, and emptied ops leave no stale entries.
func TestPendingReplayIndex(t *testing.T) {
	seed := maphash.MakeSeed()
	// Rows are written in the slice of their expiry; a lookup names slice 0.
	slice := map[string]byte{"\x00a": 3, "\x00b": 59}
	rk := func(key string) []byte { return appendReplayKey(nil, 7, slice[key], "p", key) }
	var o pendingOps
	o.ops = appendSetOp(o.ops, rk("\x00a"), []byte("a1"))
	o.ops = appendSetOp(o.ops, appendRecordKey(nil, "p", "n"), []byte("record"))
	o.ops = appendSetOp(o.ops, rk("\x00b"), []byte("b1"))
	o.ops = appendSetOp(o.ops, rk("\x00a"), []byte("a2"))
	find := func(key, want string) {
		t.Helper()
		v, ok, err := o.findReplay(appendReplayKey(nil, 7, 0, "p", key), seed)
		if err != nil || ok != (want != "") || string(v) != want {
			t.Fatalf("findReplay(%q) = %q, %v, %v; want %q", key, v, ok, err, want)
		}
	}
	find("\x00a", "a2")
	find("\x00b", "b1")
	find("\x00c", "")

	// "\x00b" shares "\x00a"'s fingerprint and was set after it: the
	// index points at "\x00b"'s op, and the lookup of "\x00a" reads them all.
	o.replays[replayPrint(seed, rk("\x00a"))] = o.replays[replayPrint(seed, rk("\x00b"))]
	find("\x00a", "a2")

	// Emptied and refilled, the buffer's old offsets mean nothing.
	o.reset(o.ops[:0])
	o.ops = appendSetOp(o.ops, appendRecordKey(nil, "p", "long record key"), []byte("x"))
	o.ops = appendSetOp(o.ops, rk("\x00b"), []byte("b2"))
	find("\x00a", "")
	find("\x00b", "b2")
}

// TestJournalNamesAPartitionOnce checks that a commit's journal row names
// each of its partitions in its first record op only (the others are
// opSetRecord), in a round of one partition and in a joint step of two;
// and that opening a copy of the store as a power loss leaves it, with
// every change still in the journal, applies them all.
func TestJournalNamesAPartitionOnce(t *testing.T) {
	s, cfg, fs := openCrashable(t)
	eng := engine.New(s)
	sets := func(prefix string, n int) []engine.Command {
		cmds := make([]engine.Command, n)
		for i := range cmds {
			cmds[i] = engine.Set(fmt.Sprintf("%s%d", prefix, i), fmt.Sprintf("v%d", i), 3_600_000)
		}
		return cmds
	}
	apply(t, s, "p", sets("k", 8)...)
	joint := []engine.Step{
		{Partition: engine.ReservedPartition("a"), Commands: sets("a", 3)},
		{Partition: engine.ReservedPartition("b"), Commands: sets("b", 3)},
	}
	outs := make([]engine.StepResult, 2)
	if err := eng.ApplyReservedJointDeferred(t.Context(), joint, outs); err != nil {
		t.Fatal(err)
	}
	if err := eng.Sync(t.Context()); err != nil {
		t.Fatal(err)
	}

	type counts struct{ full, short int }
	var rows []counts
	iter, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{nsJournal}, UpperBound: []byte{nsJournal + 1}})
	if err != nil {
		t.Fatal(err)
	}
	for ok := iter.First(); ok; ok = iter.Next() {
		var c counts
		for ops := iter.Value(); len(ops) > 0; {
			op, k, _, rest, err := nextOp(ops)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case op == opSetRecord:
				c.short++
			case k[0] == nsRecord:
				c.full++
			}
			ops = rest
		}
		rows = append(rows, c)
	}
	if err := iter.Close(); err != nil {
		t.Fatal(err)
	}
	if want := []counts{{1, 7}, {2, 4}}; !slices.Equal(rows, want) {
		t.Errorf("journal rows hold (full, opSetRecord) record ops %v, want %v", rows, want)
	}

	c := cfg
	c.FS = fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	copied := openTest(t, c)
	read := engine.New(copied)
	for _, tc := range []struct {
		partition string
		reserved  bool
		prefix    string
		n         int
	}{{"p", false, "k", 8}, {"a", true, "a", 3}, {"b", true, "b", 3}} {
		for i := range tc.n {
			var out engine.StepResult
			get := engine.Get(fmt.Sprintf("%s%d", tc.prefix, i))
			var err error
			if tc.reserved {
				err = read.ApplyReserved(t.Context(), tc.partition, &out, get)
			} else {
				err = read.Apply(t.Context(), tc.partition, &out, get)
			}
			if err != nil {
				t.Fatal(err)
			}
			if want := fmt.Sprintf("v%d", i); out.Results[0].Value != want {
				t.Errorf("%q %s%d = %q after opening the copy, want %q", tc.partition, tc.prefix, i, out.Results[0].Value, want)
			}
		}
	}
}

// TestCheckpointReusesItsBatch checks that a checkpoint keeps its Pebble
// batch, emptied, for the next, whose rows it then writes correctly.
func TestCheckpointReusesItsBatch(t *testing.T) {
	s := openCheckpointed(t)
	apply(t, s, "p", engine.Incr("n", 5, 3_600_000))
	checkpoint(t, s)
	kept := s.ckpt.batch
	if kept == nil || !kept.Empty() {
		t.Fatalf("after a checkpoint the store holds batch %v, want an empty one", kept)
	}
	apply(t, s, "p", engine.Incr("n", 2, 3_600_000))
	apply(t, s, "q", engine.Incr("n", 1, 3_600_000))
	checkpoint(t, s)
	if s.ckpt.batch != kept {
		t.Error("the second checkpoint did not reuse the first's batch")
	}
	for partition, want := range map[string]string{"p": "7", "q": "1"} {
		v, closer, err := s.db.Get(appendRecordKey(nil, partition, "n"))
		if err != nil {
			t.Fatalf("%s: %v", partition, err)
		}
		rec, err := decodeValue(v)
		if err != nil || string(rec.Data) != want {
			t.Errorf("%s's row after the second checkpoint: %q (%v), want %q", partition, rec.Data, err, want)
		}
		_ = closer.Close()
	}
}
