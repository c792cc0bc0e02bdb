package diskstore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"log/slog"
	"reflect"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/testclock"
)

// downgradeToV1 rewrites the closed store in dir into format version 1:
// every record row gets an index entry at its exact expiry, the version 2
// index is dropped, and, unless partial is set, replay records become
// record rows. With partial set, it leaves the replay records where a
// migration cut short after moving them would have, and one index entry of
// the new layout.
func downgradeToV1(t *testing.T, dir string, partial bool) {
	t.Helper()
	db, err := pebble.Open(dir, &pebble.Options{Logger: pebbleLogger{slog.New(slog.DiscardHandler)}})
	if err != nil {
		t.Fatal(err)
	}
	pb := db.NewBatch()
	v1Index := func(rk []byte, expireAt int64) {
		xk := binary.BigEndian.AppendUint64([]byte{nsIndexV1}, uint64(expireAt)^flipSign)
		_ = pb.Set(append(xk, rk[1:]...), nil, nil)
	}
	iter, err := db.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	for ok := iter.First(); ok; ok = iter.Next() {
		key, v := iter.Key(), iter.Value()
		switch key[0] {
		case nsRecord:
			rec, err := decodeValue(v)
			if err != nil {
				t.Fatal(err)
			}
			v1Index(key, rec.ExpireAt)
		case nsReplay:
			if partial {
				continue
			}
			_, _, p, k, err := parseReplayKey(key)
			if err != nil {
				t.Fatal(err)
			}
			rec, err := decodeValue(v)
			if err != nil {
				t.Fatal(err)
			}
			rk := appendRecordKey(nil, string(p), string(k))
			_ = pb.Set(rk, v, nil)
			v1Index(rk, rec.ExpireAt)
		}
	}
	if err := iter.Close(); err != nil {
		t.Fatal(err)
	}
	_ = pb.DeleteRange([]byte{nsIndex}, []byte{nsIndex + 1}, nil)
	if partial {
		key := appendIndexKey(nil, bucketOf(t0+3_600_000), 7, appendRecordKey(nil, "tenant", "n"))
		_ = pb.Set(key, nil, nil)
	} else {
		_ = pb.DeleteRange([]byte{nsReplay}, []byte{nsReplay + 1}, nil)
	}
	commitAsVersion(t, db, pb, 1)
}

// commitAsVersion commits pb to db, a store's Pebble database opened
// directly, with the format version set to version, and closes db.
func commitAsVersion(t *testing.T, db *pebble.DB, pb *pebble.Batch, version uint32) {
	t.Helper()
	_ = pb.Set(formatKey, encodeFormat(version), nil)
	if err := pb.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestMigrateFromV1 opens a store of format version 1 and checks that the
// migration keeps everything live (a window's spend, a counter, a replay
// record that still deduplicates and detects a conflict), drops what had
// expired, leaves no row of the old index, and can run again if it was cut
// short before recording the new version.
func TestMigrateFromV1(t *testing.T) {
	clock := testclock.At(t0)
	cfg := DefaultConfig()
	cfg.Dir = t.TempDir()
	cfg.Clock = clock
	cfg.SweepInterval = time.Hour // passes are run by hand
	window := engine.Window{Key: "w", Kind: algo.KindSliding, Limit: 5, WindowMs: 60_000}
	req := &engine.Request{OperationID: "op-1", Steps: []engine.Step{
		{Partition: "tenant", Commands: []engine.Command{engine.Incr("n", 7, 3_600_000)}},
		{Partition: "other", Commands: []engine.Command{engine.Hit(1, window)}},
	}}

	s, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	apply(t, s, "tenant", engine.Hit(3, window), engine.Set("short", "v", 1000))
	first, err := engine.New(s).Do(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	clock.Advance(2 * time.Second) // "short" has expired by the migration

	for attempt := range 2 {
		// The second time, the migration was cut short before it
		// recorded the new version.
		downgradeToV1(t, cfg.Dir, attempt == 1)
		s := openTest(t, cfg)
		checkMigrated(t, s)
		if out := apply(t, s, "tenant", engine.Get("short")); out.Results[0].Found {
			t.Error("a record expired before the migration is still there")
		}
		// Replaying, a conflict and a read charge nothing: check them after
		// both migrations.
		again, err := engine.New(s).Do(t.Context(), req)
		if err != nil {
			t.Fatal(err)
		}
		for i := range again.Steps {
			if !again.Steps[i].Replayed || !reflect.DeepEqual(again.Steps[i].Results, first.Steps[i].Results) {
				t.Errorf("step %d after migrating = %+v, want the recorded %+v, replayed", i, again.Steps[i], first.Steps[i])
			}
		}
		if out := apply(t, s, "tenant", engine.Get("n")); out.Results[0].Value != "7" {
			t.Errorf("counter after migrating = %q, want 7", out.Results[0].Value)
		}
		conflict := &engine.Request{OperationID: "op-1", Steps: []engine.Step{
			{Partition: "tenant", Commands: []engine.Command{engine.Incr("n", 8, 3_600_000)}},
		}}
		if _, err := engine.New(s).Do(t.Context(), conflict); !errors.Is(err, engine.ErrOperationConflict) {
			t.Errorf("operation id reused with other commands after migrating: %v, want ErrOperationConflict", err)
		}
		if attempt == 1 {
			if out := apply(t, s, "tenant", engine.Hit(2, window)); !out.Results[0].Allowed || out.Results[0].Remaining != 0 {
				t.Errorf("after migrating, a hit of 2 on a window of 5 that spent 3: %+v, want allowed with 0 remaining", out.Results[0])
			}
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}

	// Every record of the migrated store is indexed: once all have expired
	// the sweep leaves nothing.
	clock.Advance(2 * time.Hour)
	s = openTest(t, cfg)
	for {
		n, err := s.sweep(engine.UnixMilli(clock))
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
	}
	for _, ns := range []byte{nsRecord, nsIndex, nsReplay, nsIndexV1} {
		if n := countKeys(t, s, []byte{ns}); n != 0 {
			t.Errorf("%d rows left in namespace %q after every record expired", n, ns)
		}
	}
}

// checkMigrated checks the layout of a store just migrated: version 2, no
// row of the old index, one entry per record, and the replay records in
// their own namespace.
func checkMigrated(t *testing.T, s *Store) {
	t.Helper()
	v, closer, err := s.db.Get(formatKey)
	if err != nil {
		t.Fatal(err)
	}
	version, err := decodeFormat(v)
	_ = closer.Close()
	if err != nil || version != formatVersion {
		t.Fatalf("format version %d (%v) after migrating, want %d", version, err, formatVersion)
	}
	if n := countKeys(t, s, []byte{nsIndexV1}); n != 0 {
		t.Errorf("%d rows of the version 1 index left", n)
	}
	records, entries := countKeys(t, s, []byte{nsRecord}), countKeys(t, s, []byte{nsIndex})
	if records != 3 || entries != records {
		t.Errorf("%d records and %d index entries, want 3 of each (two windows and a counter)", records, entries)
	}
	if n := countKeys(t, s, []byte{nsReplay}); n != 2 {
		t.Errorf("%d replay records, want 2", n)
	}
}

// TestFormat4ReplayRecordsMove opens a directory of format version 4 whose
// replay records are where that version kept them, in namespace "o": one
// in a row, one in a journal row an unclean stop left, and one in a bucket
// that has ended. It checks that both live steps replay after opening
// (their results as recorded, nothing charged), that the ended record is
// gone with the rest of "o", and that the version is now the current one.
func TestFormat4ReplayRecordsMove(t *testing.T) {
	clock := testclock.At(t0)
	cfg := DefaultConfig()
	cfg.Dir = t.TempDir()
	cfg.Clock = clock
	req := func(id string) *engine.Request {
		return &engine.Request{OperationID: id, Steps: []engine.Step{
			{Partition: "tenant", Commands: []engine.Command{engine.Incr("n", 1, 3_600_000)}},
		}}
	}
	s, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	recorded := map[string]int64{}
	for _, id := range []string{"ended", "in-a-row", "in-the-journal"} {
		resp, err := engine.New(s).Do(t.Context(), req(id))
		if err != nil {
			t.Fatal(err)
		}
		recorded[id] = resp.Steps[0].Results[0].Int
		if id == "ended" {
			clock.Advance(150 * time.Second) // its replay record's bucket ends before the others'
		}
	}
	if err := s.Close(); err != nil { // a clean stop: every row written, the journal empty
		t.Fatal(err)
	}

	// Rewrite the directory as version 4 left it.
	db, err := pebble.Open(cfg.Dir, &pebble.Options{Logger: pebbleLogger{slog.New(slog.DiscardHandler)}})
	if err != nil {
		t.Fatal(err)
	}
	pb := db.NewBatch()
	iter, err := db.NewIter(&pebble.IterOptions{LowerBound: []byte{nsReplay}, UpperBound: []byte{nsReplay + 1}})
	if err != nil {
		t.Fatal(err)
	}
	rows := 0
	for ok := iter.First(); ok; ok = iter.Next() {
		b, _, p, k, err := parseReplayKey(iter.Key())
		if err != nil {
			t.Fatal(err)
		}
		v4 := append(appendPartition(appendBucket(nil, nsReplayV4, b), string(p)), k...)
		if bytes.Contains(k, []byte("in-the-journal")) {
			_ = pb.Set(appendJournalKey(nil, 1), appendSetOp(nil, v4, iter.Value()), nil)
		} else {
			_ = pb.Set(v4, iter.Value(), nil)
		}
		rows++
	}
	if err := iter.Close(); err != nil {
		t.Fatal(err)
	}
	if rows != 3 {
		t.Fatalf("%d replay rows after the three requests, want 3", rows)
	}
	_ = pb.DeleteRange([]byte{nsReplay}, []byte{nsReplay + 1}, nil)
	commitAsVersion(t, db, pb, 4)

	clock.Advance(90 * time.Second) // "ended"'s bucket has ended, the others' not
	s = openTest(t, cfg)
	if n := countRows(t, s, []byte{nsReplayV4}); n != 0 {
		t.Errorf("%d rows left in the format 4 replay namespace, want 0", n)
	}
	if n := countRows(t, s, []byte{nsReplay}); n != 2 {
		t.Errorf("%d replay rows after opening, want 2 (the ended one dropped)", n)
	}
	v, closer, err := s.db.Get(formatKey)
	if err != nil {
		t.Fatal(err)
	}
	if version, err := decodeFormat(v); err != nil || version != formatVersion {
		t.Errorf("format version %d (%v) after opening, want %d", version, err, formatVersion)
	}
	_ = closer.Close()
	for _, id := range []string{"in-a-row", "in-the-journal"} {
		resp, err := engine.New(s).Do(t.Context(), req(id))
		if err != nil {
			t.Fatal(err)
		}
		if st := resp.Steps[0]; !st.Replayed || st.Results[0].Int != recorded[id] {
			t.Errorf("%s retried after opening: %+v, want the recorded %d, replayed", id, st, recorded[id])
		}
	}
	if got := apply(t, s, "tenant", engine.Incr("n", 1, 3_600_000)).Results[0].Int; got != 4 {
		t.Errorf("the counter reads %d after the retries and one more, want 4: a retry was charged", got)
	}
}
