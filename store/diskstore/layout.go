package diskstore

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/sluicehq/sluice/engine"
)

// On-disk layout, format version 1.
//
// Every Pebble key starts with a one-byte namespace:
//
//	"m" name                               meta: store-wide facts
//	"r" u16be(len(p)) p k                  record k of partition p
//	"x" u64be(expireAt ^ 1<<63) u16be(len(p)) p k
//	                                       expiry index entry of that record
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
// gate and pace keys, and the engine's replay keys, which start with a NUL
// byte) are opaque bytes, at least one of them.
//
// A record's value is
//
//	kind (1 byte, engine.RecordKind) | expireAt (8 bytes, int64 little-endian, Unix ms) | data
//
// where data is the record's encoding from package algo (or the replay
// record the engine writes).
//
// The expiry index holds exactly one entry, with an empty value, for every
// record row, at the record's expiry: flipping the sign bit makes the
// big-endian encoding of the (possibly negative) int64 sort in numeric
// order, so the sweep reads the expired records first with one bounded
// scan. A batch that changes a record's expiry deletes the old entry and
// writes the new one in the same Pebble batch as the record.
const formatVersion uint32 = 1

// ErrFormat reports a data directory written in an on-disk format this
// build does not read, or holding data that is not a Sluice store.
var ErrFormat = errors.New("diskstore: unsupported on-disk format")

const (
	nsMeta   = 'm'
	nsRecord = 'r'
	nsExpiry = 'x'

	recordHeader = 1 + 8 // kind + expireAt
	flipSign     = 1 << 63
)

var formatKey = []byte("mformat")

// appendPartitionPrefix appends the prefix shared by every record key of
// partition p.
func appendPartitionPrefix(dst []byte, p string) []byte {
	dst = append(dst, nsRecord)
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(p)))
	return append(dst, p...)
}

// appendRecordKey appends the Pebble key of record key k of partition p.
func appendRecordKey(dst []byte, p, k string) []byte {
	return append(appendPartitionPrefix(dst, p), k...)
}

// appendExpiryKey appends the expiry index key of the record whose Pebble
// key is rk, expiring at expireAt.
func appendExpiryKey(dst []byte, expireAt int64, rk []byte) []byte {
	dst = append(dst, nsExpiry)
	dst = binary.BigEndian.AppendUint64(dst, uint64(expireAt)^flipSign)
	return append(dst, rk[1:]...)
}

// expiryBound returns the smallest expiry index key of a record expiring at
// expireAt: every entry below it expires earlier.
func expiryBound(expireAt int64) []byte {
	return binary.BigEndian.AppendUint64([]byte{nsExpiry}, uint64(expireAt)^flipSign)
}

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

// parseRecordKey splits a record's Pebble key into its partition and key.
// They alias rk.
func parseRecordKey(rk []byte) (p, k []byte, err error) {
	if len(rk) < 3 || rk[0] != nsRecord {
		return nil, nil, fmt.Errorf("%w: record key %q", engine.ErrCorrupt, rk)
	}
	n := int(binary.BigEndian.Uint16(rk[1:]))
	if len(rk) < 3+n+1 {
		return nil, nil, fmt.Errorf("%w: record key %q", engine.ErrCorrupt, rk)
	}
	return rk[3 : 3+n], rk[3+n:], nil
}

// parseExpiryKey splits an expiry index key into the record's expiry and
// the record's Pebble key, which it writes into dst.
func parseExpiryKey(dst, xk []byte) (expireAt int64, rk []byte, err error) {
	if len(xk) < 1+8+3 || xk[0] != nsExpiry {
		return 0, nil, fmt.Errorf("%w: expiry key %q", engine.ErrCorrupt, xk)
	}
	expireAt = int64(binary.BigEndian.Uint64(xk[1:]) ^ flipSign)
	rk = append(append(dst, nsRecord), xk[9:]...)
	if _, _, err := parseRecordKey(rk); err != nil {
		return 0, nil, err
	}
	return expireAt, rk, nil
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
