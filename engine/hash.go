package engine

import (
	"crypto/sha256"
	"encoding/binary"
	"sync"
)

// hashTag starts every encoding Hash digests. It names the encoding, so a
// digest of another encoding of a step can never equal one of this.
const hashTag = "sluice/step/2\x00"

// Hash identifies a step's partition and commands for replay records: an
// operation id replayed with a different hash is rejected. It is the
// SHA-256 of a canonical binary encoding of the step, in which every field
// of every command, window and budget has its place and every string and
// list its length: equal steps have equal hashes, and steps that differ in
// any field have different ones (strings are compared as bytes).
//
// Hash never fails; the error is there for the callers written when it
// could.
func (s *Step) Hash() ([32]byte, error) {
	bp := hashBufs.Get().(*[]byte)
	b := s.appendCanonical((*bp)[:0])
	sum := sha256.Sum256(b)
	if cap(b) <= maxPooledHashBuf {
		*bp = b
		hashBufs.Put(bp)
	}
	return sum, nil
}

// maxPooledHashBuf bounds the buffers Hash keeps: a step is usually a few
// hundred bytes, at most some 60 KiB.
const maxPooledHashBuf = 16 << 10

var hashBufs = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// appendCanonical appends the encoding Hash digests: the tag, then every
// field in declaration order; strings and lists prefixed by their length as
// a uvarint, integers as 8 bytes big-endian, booleans and window kinds as
// one byte, and RefillPermille as a presence byte followed by its value.
func (s *Step) appendCanonical(b []byte) []byte {
	b = append(b, hashTag...)
	b = appendHashString(b, s.Partition)
	b = binary.AppendUvarint(b, uint64(len(s.Commands)))
	for i := range s.Commands {
		c := &s.Commands[i]
		b = appendHashString(b, string(c.Op))
		b = appendHashString(b, c.Key)
		b = binary.AppendUvarint(b, uint64(len(c.Windows)))
		for _, w := range c.Windows {
			b = appendHashString(b, w.Key)
			b = append(b, byte(w.Kind))
			b = binary.BigEndian.AppendUint64(b, uint64(w.Limit))
			b = binary.BigEndian.AppendUint64(b, uint64(w.WindowMs))
		}
		b = binary.AppendUvarint(b, uint64(len(c.Budgets)))
		for _, bu := range c.Budgets {
			b = appendHashString(b, bu.Key)
			b = binary.BigEndian.AppendUint64(b, uint64(bu.Limit))
			b = binary.BigEndian.AppendUint64(b, uint64(bu.WindowMs))
			b = appendHashBool(b, bu.Refundable)
		}
		b = appendHashString(b, c.Receipt)
		b = binary.BigEndian.AppendUint64(b, uint64(c.Cost))
		b = appendHashString(b, c.Value)
		b = appendHashString(b, string(c.Mode))
		b = appendHashBool(b, c.KeepTTL)
		b = binary.BigEndian.AppendUint64(b, uint64(c.TTLMs))
		b = binary.BigEndian.AppendUint64(b, uint64(c.Delta))
		b = binary.BigEndian.AppendUint64(b, uint64(c.Limit))
		b = appendHashString(b, c.Lease)
		b = binary.BigEndian.AppendUint64(b, uint64(c.WindowMs))
		b = appendHashBool(b, c.RefillPermille != nil)
		if c.RefillPermille != nil {
			b = binary.BigEndian.AppendUint64(b, uint64(*c.RefillPermille))
		}
		b = binary.BigEndian.AppendUint64(b, uint64(c.MaxWaitMs))
		b = binary.BigEndian.AppendUint64(b, uint64(c.At))
		b = binary.BigEndian.AppendUint64(b, uint64(c.DelayMs))
	}
	return b
}

func appendHashString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

func appendHashBool(b []byte, v bool) []byte {
	if v {
		return append(b, 1)
	}
	return append(b, 0)
}
