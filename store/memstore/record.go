package memstore

import (
	"unsafe"

	"github.com/sluicehq/sluice/engine"
)

// record is one stored record, held by pointer so that a write updates it
// in place rather than storing it into the map again. Its partition and
// key follow it in the same allocation (see keyed), so that creating a
// record is one allocation and finding one reads the record and not a
// separate key.
type record struct {
	engine.Record
	// inline holds Data when it fits, as every fixed, sliding and gcra
	// window state does, so a hit reads and writes a single allocation.
	inline [24]byte
	// next is another record of the shard whose partition and key hash to
	// the same map key, or nil.
	next *record
	// plen and klen are the lengths of the partition and the key that
	// follow the record, at most engine.MaxKeyBytes each.
	plen, klen uint16
}

// keyed is a record followed by room for its partition and key: the first
// field of a keyed[[n]byte] is the record, and record.key reads the bytes
// after it. Each size newRecord allocates fills a size class of Go's
// allocator exactly (TestRecordSizes), so the room costs no more than the bytes
// of the partition and key rounded up to the next class: a record of a
// route quota (a 32-hex-digit partition name under a short prefix, and
// the quota's window key, about 50 bytes) takes 144 bytes, one of a short
// partition and key 96.
type keyed[K any] struct {
	record
	key K //lint:ignore U1000 room read through the record (record.key), never by name
}

// newRecord returns an empty record for key in partition.
func newRecord(partition, key string) *record {
	var r *record
	switch n := len(partition) + len(key); {
	case n <= 16:
		r = &new(keyed[[16]byte]).record // 96 bytes
	case n <= 32:
		r = &new(keyed[[32]byte]).record // 112
	case n <= 48:
		r = &new(keyed[[48]byte]).record // 128
	case n <= 64:
		r = &new(keyed[[64]byte]).record // 144
	case n <= 80:
		r = &new(keyed[[80]byte]).record // 160
	case n <= 112:
		r = &new(keyed[[112]byte]).record // 192
	case n <= 176:
		r = &new(keyed[[176]byte]).record // 256
	case n <= 272:
		r = &new(keyed[[272]byte]).record // 352
	case n <= 432:
		r = &new(keyed[[432]byte]).record // 512
	default:
		// 1,152 with the 8-byte header the allocator puts before an
		// object of more than 512 bytes that holds pointers; the longest
		// partition and key, 2 × engine.MaxKeyBytes, fit.
		r = &new(keyed[[1064]byte]).record
	}
	r.plen, r.klen = uint16(len(partition)), uint16(len(key))
	k := r.key()
	copy(k[copy(k, partition):], key)
	return r
}

// key returns the record's partition and key, one after the other. It is
// valid only for a record newRecord allocated, which the bytes follow.
func (r *record) key() []byte {
	return unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(r), unsafe.Sizeof(*r))), int(r.plen)+int(r.klen))
}

// is reports whether r is the record of key in partition.
func (r *record) is(partition, key string) bool {
	if int(r.plen) != len(partition) || int(r.klen) != len(key) {
		return false
	}
	k := r.key()
	// Comparing with a conversion of a byte slice does not allocate.
	return string(k[:len(partition)]) == partition && string(k[len(partition):]) == key
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
