package diskstore

import (
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/testclock"
)

// TestReplayRecordsExpireByBucket checks a replay record's life on disk:
// written in its expiry's bucket without an index entry, found again after
// the partition is reloaded until it expires, and deleted with its bucket.
func TestReplayRecordsExpireByBucket(t *testing.T) {
	clock := testclock.At(t0 + 30_000)
	cfg := DefaultConfig()
	cfg.Clock = clock
	cfg.SweepInterval = time.Hour
	s := openTest(t, cfg)
	req := &engine.Request{OperationID: "op-1", Steps: []engine.Step{
		{Partition: "p", Commands: []engine.Command{engine.Incr("n", 1, 3_600_000)}},
		{Partition: "q", Commands: []engine.Command{engine.Incr("n", 1, 3_600_000)}},
	}}
	do := func() *engine.Response {
		t.Helper()
		resp, err := engine.New(s).Do(t.Context(), req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	do()
	if n := countKeys(t, s, []byte{nsReplay}); n != 2 {
		t.Fatalf("%d replay rows, want 2", n)
	}
	if n := countKeys(t, s, []byte{nsIndex}); n != 2 {
		t.Fatalf("%d expiry index entries, want 2 (the counters' only)", n)
	}

	// Recorded at t0+30s, the records expire at t0+3m30s, in the bucket
	// ending at t0+4m.
	clock.Advance(engine.ReplayTTL - time.Millisecond)
	s.evictIdle(math.MaxInt64, math.MaxInt)
	if n, err := s.sweep(engine.UnixMilli(clock)); err != nil || n != 0 {
		t.Fatalf("sweep: %d, %v", n, err)
	}
	if resp := do(); !resp.Steps[0].Replayed || !resp.Steps[1].Replayed {
		t.Fatalf("after reloading, the request ran again: %+v", resp)
	}
	clock.Advance(time.Millisecond)
	if resp := do(); resp.Steps[0].Replayed || resp.Steps[0].Results[0].Int != 2 {
		t.Fatalf("after its records expired, the request replayed: %+v", resp)
	}
	if n := countKeys(t, s, []byte{nsReplay}); n != 4 {
		t.Fatalf("%d replay rows, want 4 (the expired two and the new two)", n)
	}

	clock.Advance(30 * time.Second) // the first records' bucket ends
	if _, err := s.sweep(engine.UnixMilli(clock)); err != nil {
		t.Fatal(err)
	}
	if n := countKeys(t, s, []byte{nsReplay}); n != 2 {
		t.Fatalf("%d replay rows after their bucket ended, want 2", n)
	}
	s.evictIdle(math.MaxInt64, math.MaxInt)
	if resp := do(); !resp.Steps[0].Replayed || resp.Steps[0].Results[0].Int != 2 {
		t.Fatalf("the second recording did not replay: %+v", resp)
	}
}

// TestReplayLookupReadsEveryCandidate checks the lookup of a replay record
// by fingerprint: a fingerprint in a newer bucket whose row holds another
// key (two keys sharing a fingerprint) must not hide the record in an
// older bucket, and a key whose fingerprint is nowhere is absent.
func TestReplayLookupReadsEveryCandidate(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Clock = testclock.At(t0)
	s := openTest(t, cfg)
	const key = "\x00op\x00id\x000"
	rec := engine.Record{Kind: engine.RecReplay, ExpireAt: t0 + 90_000, Data: []byte("recorded")}
	older := bucketOf(rec.ExpireAt)
	if err := s.db.Set(appendReplayKey(nil, older, sliceOf(rec.ExpireAt), "p", key), appendValue(nil, &rec), nil); err != nil {
		t.Fatal(err)
	}
	p := &partition{name: "p"}
	fp := maphash.String(s.seed, key)
	p.addReplay(fp, older)
	p.addReplay(fp, older+2) // as if another key with this fingerprint were recorded there

	got, ok, err := s.replay(p, key)
	if err != nil || !ok || got.ExpireAt != rec.ExpireAt || string(got.Data) != "recorded" {
		t.Fatalf("replay(%q) = %+v, %v, %v; want the record of bucket %d", key, got, ok, err, older)
	}
	if got, ok, err := s.replay(p, "\x00op\x00other\x000"); ok || err != nil {
		t.Fatalf("replay of an unrecorded key = %+v, %v, %v; want absent", got, ok, err)
	}
}

// TestReplayReadFailureChangesNothing makes the read of a replay record
// fail and checks that the step fails as unavailable without running, and
// replays once the disk reads again.
func TestReplayReadFailureChangesNothing(t *testing.T) {
	var broken atomic.Bool
	tablesFail := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if broken.Load() && strings.HasSuffix(op.Path, ".sst") && op.Kind.ReadOrWrite() == errorfs.OpIsRead {
			return errorfs.ErrInjected
		}
		return nil
	})
	cfg := DefaultConfig()
	cfg.Dir = "db"
	cfg.FS = errorfs.Wrap(vfs.NewMem(), tablesFail)
	cfg.Clock = testclock.At(t0)
	cfg.CacheBytes = 0 // every read reaches the file system
	s := openTest(t, cfg)
	req := &engine.Request{OperationID: "op-1", Steps: []engine.Step{
		{Partition: "p", Commands: []engine.Command{engine.Incr("n", 1, 3_600_000)}},
	}}
	eng := engine.New(s)
	if _, err := eng.Do(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	checkpoint(t, s)
	if err := s.db.Flush(); err != nil { // the replay record is now read from a table
		t.Fatal(err)
	}

	broken.Store(true)
	if resp, err := eng.Do(t.Context(), req); !errors.Is(err, engine.ErrUnavailable) {
		t.Fatalf("retry while the replay record cannot be read: %+v, %v; want ErrUnavailable", resp, err)
	}
	broken.Store(false)
	resp, err := eng.Do(t.Context(), req)
	if err != nil || !resp.Steps[0].Replayed {
		t.Fatalf("retry once the disk reads again: %+v, %v; want replayed", resp, err)
	}
	if out := apply(t, s, "p", engine.Get("n")); out.Results[0].Value != "1" {
		t.Errorf("n = %q, want 1: the failed retry ran", out.Results[0].Value)
	}
}

// TestRetriesReadEverySlice records steps on three partitions every 7
// seconds for two minutes and a half, so that their replay records fall in
// many slices of three buckets, interleaved with each other's and some
// slices holding one partition's alone; then it evicts the partitions and
// retries every step, with the replay marks trusted and spoilt. Every
// retry must answer as recorded and charge nothing.
func TestRetriesReadEverySlice(t *testing.T) {
	clock := testclock.At(t0)
	cfg := DefaultConfig()
	cfg.Clock = clock
	cfg.SweepInterval = 1 << 62
	s := openTest(t, cfg)
	eng := engine.New(s)
	type call struct {
		req  *engine.Request
		want int64
	}
	var calls []call
	charges := map[string]int64{}
	for i := range 22 {
		for j, p := range []string{"a", "b", "c"} {
			if p == "b" && i%3 != 0 {
				continue // b leaves slices to the others
			}
			req := &engine.Request{OperationID: fmt.Sprintf("op-%d-%d", i, j), Steps: []engine.Step{{
				Partition: p, Commands: []engine.Command{engine.Incr("n", 1, 3_600_000)},
			}}}
			resp, err := eng.Do(t.Context(), req)
			if err != nil {
				t.Fatal(err)
			}
			calls = append(calls, call{req, resp.Steps[0].Results[0].Int})
			charges[p]++
		}
		clock.Advance(7 * time.Second)
	}
	if n := countKeys(t, s, []byte{nsReplay}); n != len(calls) {
		t.Fatalf("%d replay rows, want %d", n, len(calls))
	}
	slices := map[[2]int64]bool{}
	if err := s.scanKeys([]byte{nsReplay}, []byte{nsReplay + 1}, func(key []byte) error {
		b, sl, _, _, err := parseReplayKey(key)
		slices[[2]int64{b, int64(sl)}] = true
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if len(slices) != 22 {
		t.Fatalf("the replay rows are in %d slices, want 22: the test would not read across slices", len(slices))
	}

	for _, spoilt := range []bool{false, true} {
		s.replayMarks.spoilt.Store(spoilt)
		checkpoint(t, s)
		s.evictIdle(math.MaxInt64, 1<<20)
		for _, p := range []string{"a", "b", "c"} {
			if resident(s, p) != nil {
				t.Fatalf("partition %s was not evicted: the test would prove nothing", p)
			}
		}
		for _, c := range calls {
			resp, err := eng.Do(t.Context(), c.req)
			if err != nil {
				t.Fatal(err)
			}
			if got := resp.Steps[0]; !got.Replayed || got.Results[0].Int != c.want {
				t.Fatalf("spoilt %v: %s retried after a reload = %+v, want the recorded %d, replayed", spoilt, c.req.OperationID, got, c.want)
			}
		}
	}
	for p, n := range charges {
		if got := apply(t, s, p, engine.Incr("n", 1, 3_600_000)).Results[0].Int; got != n+1 {
			t.Errorf("partition %s's counter reads %d after %d charges, their retries and one more charge; want %d", p, got, n, n+1)
		}
	}
}
