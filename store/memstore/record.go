package memstore

import "github.com/sluicehq/sluice/engine"

// record is one stored record, held by pointer so that a write updates it
// in place rather than storing it into the map again. It carries its own
// partition and key, so that creating a record is one allocation, and
// finding one reads the record and not a separate key: the record is 144
// bytes (a size class of Go's allocator, TestRecordSize), and its
// partition and key are inside it when together they take at most 52
// bytes, as a route quota's do (a 32-hex-digit partition name under a
// short prefix, and the quota's window key).
type record struct {
	engine.Record
	// inline holds Data when it fits, as every fixed, sliding and gcra
	// window state does, so a hit reads and writes a single allocation.
	inline [24]byte
	// next is another record of the shard whose partition and key hash to
	// the same map key, or nil.
	next *record
	// long holds the partition and the key, one after the other, when
	// they do not fit in short.
	long string
	// plen and klen are the lengths of the partition and the key, at most
	// engine.MaxKeyBytes each.
	plen, klen uint16
	short      [52]byte
}

// newRecord returns an empty record for key in partition.
func newRecord(partition, key string) *record {
	r := &record{plen: uint16(len(partition)), klen: uint16(len(key))}
	if len(partition)+len(key) > len(r.short) {
		r.long = partition + key
	} else {
		copy(r.short[copy(r.short[:], partition):], key)
	}
	return r
}

// is reports whether r is the record of key in partition.
func (r *record) is(partition, key string) bool {
	if int(r.plen) != len(partition) || int(r.klen) != len(key) {
		return false
	}
	n := len(partition) + len(key)
	if n > len(r.short) {
		return r.long[:len(partition)] == partition && r.long[len(partition):] == key
	}
	// Comparing with a conversion of a byte slice does not allocate.
	return string(r.short[:len(partition)]) == partition && string(r.short[len(partition):n]) == key
}

// set stores rec, copying its data into the record's own buffer when that
// is large enough: a steady state allocates nothing.
func (r *record) set(rec engine.Record) {
	buf := r.Data[:0]
	switch {
	case cap(buf) >= len(rec.Data):
	case len(rec.Data) <= len(r.inline):
		buf = r.inline[:0]
	default:
		buf = make([]byte, 0, len(rec.Data))
	}
	r.Kind, r.ExpireAt = rec.Kind, rec.ExpireAt
	r.Data = append(buf, rec.Data...) // rec.Data may be r.Data itself
}
