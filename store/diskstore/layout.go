package diskstore

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/sluicehq/sluice/engine"
)

// On-disk layout, format version 6.
//
// Every Pebble key starts with a one-byte namespace:
//
//	"m" name                               meta: store-wide facts
//	"r" u16be(len(p)) p k                  record k of partition p
//	"e" u64be(b ^ 1<<63) u32be(seq) u16be(len(p)) p k
//	                                       expiry index entry of that record
//	"d" u64be(b ^ 1<<63) u8(slice) u16be(len(p)) p k
//	                                       replay record k of partition p
//	"j" u64be(n)                           journal row n (see journal.go)
//
// Meta keys:
//
//	"mformat" → u32be(formatVersion)       written when the store is created
//
// Partitions are at most engine.MaxKeyBytes long, so their length fits the
// two-byte prefix. Because the length comes first, the prefix
// "r" u16be(len(p)) p of one partition is never a prefix of another
// partition's keys, whatever bytes the names hold (a partition named "a" and
// one named "ab" differ in their length bytes), and a record key needs no
// terminator: it is the rest of the Pebble key. Record keys (window, kv,
// gate and pace keys) are opaque bytes, at least one of them.
//
// A record's value, and a replay record's, is
//
//	kind (1 byte, engine.RecordKind) | expireAt (8 bytes, int64 little-endian, Unix ms) | data
//
// where data is the record's encoding from package algo (or the replay
// record the engine writes).
//
// # Expiry buckets
//
// Time is cut into buckets of bucketMs: bucket b holds the instants
// ((b-1)·bucketMs, b·bucketMs], so every instant of bucket b is at most
// b·bucketMs, the bucket's end. The bucket is stored with its sign bit
// flipped, so that the big-endian encoding of the (possibly negative) int64
// sorts in numeric order.
//
// The expiry index holds, for every record row, an entry with an empty value
// in the bucket of the record's expiry. An entry is written when its record
// is created and when a write moves the record's expiry into another bucket;
// a write that keeps the expiry in its bucket (a window hit, nearly always)
// writes the record's row alone. An entry a write leaves behind (its record
// moved to another bucket, or was deleted) is stale: the sweep drops it when
// its bucket ends. Entries are ordered within a bucket by seq, a counter of
// the store's, so that new entries are appended at a bucket's end rather than
// scattered through it, which keeps their insertion cheap; the record's key
// after it makes each entry unique whatever the counter does across
// restarts.
//
// Once a bucket has ended every record with a current entry in it has
// expired, so the sweep reads the index from its oldest bucket up to the
// last ended one and deletes each entry, and its record if that has expired
// (a record renewed since has its current entry in a later bucket). A
// record is thus deleted from disk within one bucket and one sweep pass of
// its expiry, and never before it.
//
// Replay records live in a namespace of their own, keyed by the bucket of
// their expiry first, then by its slice (the second of the bucket it falls
// in, 0 to replaySlices-1), then by partition, and have no index entries:
// the sweep deletes every bucket that has ended with one range deletion.
// Every replay record expires engine.ReplayTTL after it is written, so the
// store writes them in key order: a flush's replay rows follow every row
// already on disk, and Pebble moves them down its levels instead of merging
// them, again and again, into the rows of their bucket written before (see
// decision 0085). The namespace is the first of the keyspace, so that a
// table spanning the newest replay rows and other namespaces spans no older
// replay rows. A step retried after its record was checkpointed finds it
// with a seek in each slice of the bucket its fingerprint is in; a
// partition's replay records are found, when it is loaded, with a seek in
// each slice of each bucket that has not ended and may hold some (see
// replaymarks.go; there are at most engine.ReplayTTL/bucketMs + 1 such
// buckets). The engine's replay keys start with a NUL byte, which no other
// record key does; a record of kind engine.RecReplay under such a key is a
// replay record.
//
// Version 3 added the journal and changed nothing else: a directory of
// version 2 is one of version 3 with an empty journal, and is opened as
// such (its version is rewritten). Version 2 cannot read a journal, so
// it refuses a directory of version 3.
//
// Version 4 added a journal op, opSetRecord (see journal.go), and changed
// nothing else: a directory of version 3 is opened as one of version 4
// (its version rewritten before its journal is read), and version 3,
// which could not read a journal holding the new op, refuses version 4.
//
// Version 5 moved replay records from namespace "o", keyed
// "o" u64be(b ^ 1<<63) u16be(len(p)) p k, to namespace "d", with the
// slice after the bucket. Opening a directory of versions 2 to 4 applies
// its journal (whose replay ops name "o" rows), moves the replay records of
// the buckets that have not ended to "d", and then records the current
// version (see migrateReplays); version 4 refuses version 5.
//
// Version 6 is version 5 whose new replay records may hold their results in
// the engine's second compact form, which leaves out every window that
// repeats its result and which builds of version 5 cannot read. Opening a
// directory of version 5 records version 6 and changes nothing else: its
// replay records, in the first form, are still read. Version 5 refuses
// version 6.
const formatVersion uint32 = 6

// bucketMs is the width of an expiry bucket, in milliseconds. A record
// whose expiry moves with every write (sliding, log and GCRA windows, pace
// logs) gets a new index entry once a minute at most, and an expired record
// stays on disk at most a minute and one sweep pass past its expiry.
const bucketMs = 60_000

// replaySliceMs is the width of a replay record's slice: the part of its
// bucket its expiry falls in. There are replaySlices slices in a bucket.
const (
	replaySliceMs = 1_000
	replaySlices  = bucketMs / replaySliceMs
)

// ErrFormat reports a data directory written in an on-disk format this
// build does not read, or holding data that is not a Sluice store.
var ErrFormat = errors.New("diskstore: unsupported on-disk format")

const (
	nsMeta    = 'm'
	nsRecord  = 'r'
	nsIndex   = 'e'
	nsReplay  = 'd'
	nsJournal = 'j'
	// nsReplayV4 held replay records up to format version 4.
	nsReplayV4 = 'o'

	recordHeader = 1 + 8 // kind + expireAt
	bucketBytes  = 8
	seqBytes     = 4
	flipSign     = 1 << 63
)

var formatKey = []byte("mformat")

// bucketOf returns the bucket holding instant t: the least b with
// t ≤ b·bucketMs.
func bucketOf(t int64) int64 {
	b := t / bucketMs // rounds towards zero: up for a negative t
	if t%bucketMs > 0 {
		b++
	}
	return b
}

// sliceOf returns the slice of instant t within its bucket, bucketOf(t):
// slice i holds the instants (b-1)·bucketMs + i·replaySliceMs + 1 to
// (b-1)·bucketMs + (i+1)·replaySliceMs.
func sliceOf(t int64) byte {
	return byte((t - (bucketOf(t)-1)*bucketMs - 1) / replaySliceMs)
}

// lastEnded returns the last bucket that has ended at now: the greatest b
// with b·bucketMs ≤ now.
func lastEnded(now int64) int64 {
	b := now / bucketMs
	if now%bucketMs < 0 {
		b--
	}
	return b
}

// isReplay reports whether a record written under key with kind kind is a
// replay record.
func isReplay(key string, kind engine.RecordKind) bool {
	return kind == engine.RecReplay && isReplayKey(key)
}

// isReplayKey reports whether key may name a replay record: the engine's
// replay keys, and no other record key, start with a NUL byte.
func isReplayKey(key string) bool { return len(key) > 0 && key[0] == 0 }

// appendPartitionPrefix appends the prefix shared by every record key of
// partition p.
func appendPartitionPrefix(dst []byte, p string) []byte {
	return appendPartition(append(dst, nsRecord), p)
}

// appendPartition appends u16be(len(p)) p.
func appendPartition(dst []byte, p string) []byte {
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(p)))
	return append(dst, p...)
}

// appendRecordKey appends the Pebble key of record key k of partition p.
func appendRecordKey(dst []byte, p, k string) []byte {
	return append(appendPartitionPrefix(dst, p), k...)
}

func appendBucket(dst []byte, ns byte, b int64) []byte {
	return binary.BigEndian.AppendUint64(append(dst, ns), uint64(b)^flipSign)
}

// appendIndexKey appends the expiry index key of the record whose Pebble
// key is rk, in bucket b, with sequence number seq.
func appendIndexKey(dst []byte, b int64, seq uint32, rk []byte) []byte {
	dst = binary.BigEndian.AppendUint32(appendBucket(dst, nsIndex, b), seq)
	return append(dst, rk[1:]...)
}

// appendJournalKey appends the key of journal row n.
func appendJournalKey(dst []byte, n uint64) []byte {
	return binary.BigEndian.AppendUint64(append(dst, nsJournal), n)
}

// parseJournalKey returns the number of a journal row.
func parseJournalKey(jk []byte) (uint64, error) {
	if len(jk) != 1+8 || jk[0] != nsJournal {
		return 0, fmt.Errorf("%w: journal key %q", engine.ErrCorrupt, jk)
	}
	return binary.BigEndian.Uint64(jk[1:]), nil
}

// indexBound returns the smallest index key of bucket b: every entry below
// it is in an earlier bucket.
func indexBound(b int64) []byte { return appendBucket(nil, nsIndex, b) }

// appendReplayKey appends the Pebble key of replay record k of partition p,
// expiring in slice sl of bucket b.
func appendReplayKey(dst []byte, b int64, sl byte, p, k string) []byte {
	return append(appendReplayPrefix(dst, b, sl, p), k...)
}

// appendReplayPrefix appends the prefix of partition p's replay records in
// slice sl of bucket b.
func appendReplayPrefix(dst []byte, b int64, sl byte, p string) []byte {
	return appendPartition(append(appendBucket(dst, nsReplay, b), sl), p)
}

// replayHead is the length of a replay key's namespace, bucket and slice.
const replayHead = 1 + bucketBytes + 1

// replayBound returns the smallest replay key of bucket b.
func replayBound(b int64) []byte { return appendBucket(nil, nsReplay, b) }

// prefixEnd returns the smallest key greater than every key with the given
// prefix, for use as an exclusive upper bound. prefix must not be all 0xff.
func prefixEnd(prefix []byte) []byte {
	end := append([]byte(nil), prefix...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] != 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	panic("diskstore: prefix of 0xff bytes")
}

// parsePartition splits u16be(len(p)) p k into p and k, which alias pk; k
// is at least one byte.
func parsePartition(pk []byte) (p, k []byte, ok bool) {
	if len(pk) < 2 {
		return nil, nil, false
	}
	n := int(binary.BigEndian.Uint16(pk))
	if len(pk) < 2+n+1 {
		return nil, nil, false
	}
	return pk[2 : 2+n], pk[2+n:], true
}

// parseRecordKey splits a record's Pebble key into its partition and key.
// They alias rk.
func parseRecordKey(rk []byte) (p, k []byte, err error) {
	if len(rk) < 1 || rk[0] != nsRecord {
		return nil, nil, fmt.Errorf("%w: record key %q", engine.ErrCorrupt, rk)
	}
	p, k, ok := parsePartition(rk[1:])
	if !ok {
		return nil, nil, fmt.Errorf("%w: record key %q", engine.ErrCorrupt, rk)
	}
	return p, k, nil
}

// parseIndexKey splits an expiry index key into its bucket and the record's
// Pebble key, which it appends to dst.
func parseIndexKey(dst, xk []byte) (b int64, rk []byte, err error) {
	const head = 1 + bucketBytes + seqBytes
	if len(xk) < head || xk[0] != nsIndex {
		return 0, nil, fmt.Errorf("%w: expiry index key %q", engine.ErrCorrupt, xk)
	}
	b = int64(binary.BigEndian.Uint64(xk[1:]) ^ flipSign)
	rk = append(append(dst, nsRecord), xk[head:]...)
	if _, _, err := parseRecordKey(rk); err != nil {
		return 0, nil, err
	}
	return b, rk, nil
}

// parseReplayKey splits a replay record's Pebble key into its bucket,
// slice, partition and key. p and k alias ok.
func parseReplayKey(ok []byte) (b int64, sl byte, p, k []byte, err error) {
	if len(ok) < replayHead || ok[0] != nsReplay || ok[replayHead-1] >= replaySlices {
		return 0, 0, nil, nil, fmt.Errorf("%w: replay key %q", engine.ErrCorrupt, ok)
	}
	p, k, valid := parsePartition(ok[replayHead:])
	if !valid {
		return 0, 0, nil, nil, fmt.Errorf("%w: replay key %q", engine.ErrCorrupt, ok)
	}
	return int64(binary.BigEndian.Uint64(ok[1:]) ^ flipSign), ok[replayHead-1], p, k, nil
}

// parseReplayKeyV4 splits a replay record's Pebble key of format versions 2
// to 4 ("o" u64be(b ^ 1<<63) u16be(len(p)) p k) into its bucket, partition
// and key. p and k alias ok.
func parseReplayKeyV4(ok []byte) (b int64, p, k []byte, err error) {
	if len(ok) < 1+bucketBytes || ok[0] != nsReplayV4 {
		return 0, nil, nil, fmt.Errorf("%w: format 4 replay key %q", engine.ErrCorrupt, ok)
	}
	p, k, valid := parsePartition(ok[1+bucketBytes:])
	if !valid {
		return 0, nil, nil, fmt.Errorf("%w: format 4 replay key %q", engine.ErrCorrupt, ok)
	}
	return int64(binary.BigEndian.Uint64(ok[1:]) ^ flipSign), p, k, nil
}

// sameReplay reports whether replay keys a and b name the same record in
// the same bucket, whatever their slices: a retried step knows its
// record's bucket (from its fingerprint) but not its slice.
func sameReplay(a, b []byte) bool {
	return len(a) >= replayHead && len(b) >= replayHead &&
		string(a[:replayHead-1]) == string(b[:replayHead-1]) && string(a[replayHead:]) == string(b[replayHead:])
}

// appendValue appends the encoding of rec as a record value.
func appendValue(dst []byte, rec *engine.Record) []byte {
	dst = append(dst, byte(rec.Kind))
	dst = binary.LittleEndian.AppendUint64(dst, uint64(rec.ExpireAt))
	return append(dst, rec.Data...)
}

// decodeValue decodes a record value. Data aliases v.
func decodeValue(v []byte) (engine.Record, error) {
	if len(v) < recordHeader || v[0] == 0 {
		return engine.Record{}, fmt.Errorf("%w: record value of %d bytes", engine.ErrCorrupt, len(v))
	}
	return engine.Record{
		Kind:     engine.RecordKind(v[0]),
		ExpireAt: int64(binary.LittleEndian.Uint64(v[1:])),
		Data:     v[recordHeader:],
	}, nil
}

func encodeFormat(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }

func decodeFormat(v []byte) (uint32, error) {
	if len(v) != 4 {
		return 0, fmt.Errorf("%w: format version of %d bytes", ErrFormat, len(v))
	}
	return binary.BigEndian.Uint32(v), nil
}
