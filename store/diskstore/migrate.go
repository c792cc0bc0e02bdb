package diskstore

import (
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// Format version 1 differs from version 2 in two ways: its expiry index
// ("x" u64be(expireAt ^ 1<<63) u16be(len(p)) p k) held an entry at each
// record's exact expiry, moved by every write that changed it, and replay
// records were record rows ("r" keys) with entries of their own. Its record
// rows and values are those of version 2.
const nsIndexV1 = 'x'

// migrateBatchRows is the most rows one batch of the migration writes.
const migrateBatchRows = 1024

// applyFull applies the migration's batch pb, unsynced, and empties it,
// once it holds migrateBatchRows rows.
func (s *Store) applyFull(pb *pebble.Batch) error {
	if pb.Count() < migrateBatchRows {
		return nil
	}
	if err := s.db.Apply(pb, pebble.NoSync); err != nil {
		return unavailable(err)
	}
	pb.Reset()
	return nil
}

// migrateV1 turns a store of format version 1 into one of version 2, at
// the store's instant now. It drops the old index, deletes the records that
// have expired, moves the live replay records to their buckets, indexes
// every other record, and then records version 2. Until that last write the
// store still reads as version 1, and running the migration again (after a
// crash part way) starts it over: the index it had begun is dropped with
// the old one, and the replay records it had moved are no longer record
// rows.
func (s *Store) migrateV1(now int64) error {
	s.log.Info("diskstore: migrating the on-disk format from version 1 to 2", "dir", s.cfg.Dir)
	pb := s.db.NewBatch()
	_ = pb.DeleteRange([]byte{nsIndexV1}, []byte{nsIndexV1 + 1}, nil)
	_ = pb.DeleteRange([]byte{nsIndex}, []byte{nsIndex + 1}, nil)
	if err := s.db.Apply(pb, pebble.NoSync); err != nil {
		_ = pb.Close()
		return unavailable(err)
	}
	pb.Reset()

	var moved, indexed, dropped int
	var key []byte
	err := s.scan([]byte{nsRecord}, []byte{nsRecord + 1}, func(rk, v []byte) error {
		p, k, err := parseRecordKey(rk)
		if err != nil {
			return err
		}
		rec, err := decodeValue(v)
		if err != nil {
			return err
		}
		b := bucketOf(rec.ExpireAt)
		switch {
		case !rec.Live(now):
			_ = pb.Delete(rk, nil)
			dropped++
		case isReplay(string(k), rec.Kind):
			key = appendReplayKey(key[:0], b, sliceOf(rec.ExpireAt), string(p), string(k))
			_ = pb.Set(key, v, nil)
			_ = pb.Delete(rk, nil)
			moved++
		default:
			key = appendIndexKey(key[:0], b, s.seq.Add(1), rk)
			_ = pb.Set(key, nil, nil)
			indexed++
		}
		return s.applyFull(pb)
	})
	if err == nil {
		err = unavailable(s.db.Apply(pb, pebble.NoSync))
	}
	_ = pb.Close()
	if err != nil {
		return fmt.Errorf("migrating %s from format version 1: %w", s.cfg.Dir, err)
	}
	// The log is written in order: fsyncing the version fsyncs the rows.
	if err := s.writeFormat(); err != nil {
		return err
	}
	s.log.Info("diskstore: migrated the on-disk format to version 2", "dir", s.cfg.Dir,
		"records", indexed, "replay_records", moved, "expired_dropped", dropped)
	return nil
}

// migrateReplays turns a store of format versions 2 to 4, its journal
// applied, into one of the current version, at the store's instant now: it
// moves the replay records of the buckets that have not ended from
// namespace "o" to "d", each into the slice of its expiry (see layout.go),
// deletes the rest of "o", and then records the current version. Until
// that last write the store still reads as the older version, and running
// the migration again (after a crash part way) moves whatever "o" still
// holds: a row moved twice is written the same both times.
func (s *Store) migrateReplays(now int64) error {
	pb := s.db.NewBatch()
	moved := 0
	var key []byte
	err := s.scan(appendBucket(nil, nsReplayV4, lastEnded(now)+1), []byte{nsReplayV4 + 1}, func(ok, v []byte) error {
		b, p, k, err := parseReplayKeyV4(ok)
		if err != nil {
			return err
		}
		rec, err := decodeValue(v)
		if err != nil {
			return err
		}
		key = appendReplayKey(key[:0], b, sliceOf(rec.ExpireAt), string(p), string(k))
		_ = pb.Set(key, v, nil)
		moved++
		return s.applyFull(pb)
	})
	if err == nil {
		_ = pb.DeleteRange([]byte{nsReplayV4}, []byte{nsReplayV4 + 1}, nil)
		err = unavailable(s.db.Apply(pb, pebble.NoSync))
	}
	_ = pb.Close()
	if err != nil {
		return fmt.Errorf("moving the replay records of %s to format version %d: %w", s.cfg.Dir, formatVersion, err)
	}
	// The log is written in order: fsyncing the version fsyncs the rows.
	if err := s.writeFormat(); err != nil {
		return err
	}
	s.log.Info("diskstore: moved the replay records to the current format", "dir", s.cfg.Dir, "format_version", formatVersion, "replay_records", moved)
	return nil
}
