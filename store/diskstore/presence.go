package diskstore

import "sync/atomic"

// presenceBits is the size of the presence filter: 4 MiB. It is cut into
// blocks of one 64-byte cache line, and a partition's four bits all lie in
// one block, so a lookup or an addition touches one cache line instead of
// four; false positives stay near 1 in 4,600 for a million partitions
// (against 1 in 6,300 with the bits spread over the whole filter).
const (
	presenceBits = 1 << 25
	blockWords   = 8 // 512 bits: one cache line
)

// presence is a Bloom filter of the partitions that may have rows on disk.
// A partition it has never seen has none, so its first batch skips the
// prefix scan: a new partition costs no read. It is filled from disk at
// Open and by every commit, before the commit, so it has no false
// negatives; it never forgets, so deleted partitions are cleared only when
// the store is next opened. A false positive costs one prefix scan.
type presence struct {
	words []atomic.Uint64 // page-aligned, as every large allocation is
}

func newPresence() *presence { return newFilter(presenceBits) }

// newFilter returns an empty filter of bits bits, a multiple of a block.
func newFilter(bits int) *presence {
	return &presence{words: make([]atomic.Uint64, bits/64)}
}

// positions returns the filter's four bit positions for hash h: the block
// from h modulo the number of blocks (its low 16 bits in the presence
// filter), the bits within it from h's bits 16 to 51.
func (f *presence) positions(h uint64) [4]uint64 {
	block := h % uint64(len(f.words)/blockWords) * (blockWords * 64)
	var p [4]uint64
	for i := range p {
		p[i] = block + h>>(16+9*i)&511
	}
	return p
}

func (f *presence) add(h uint64) {
	for _, b := range f.positions(h) {
		w := &f.words[b/64]
		if bit := uint64(1) << (b % 64); w.Load()&bit == 0 {
			w.Or(bit)
		}
	}
}

func (f *presence) mayContain(h uint64) bool {
	for _, b := range f.positions(h) {
		if f.words[b/64].Load()&(1<<(b%64)) == 0 {
			return false
		}
	}
	return true
}

// clear empties the filter. Additions and lookups meanwhile see some of
// its bits cleared and others not.
func (f *presence) clear() {
	for i := range f.words {
		f.words[i].Store(0)
	}
}

// mark adds p, whose lock the caller holds, to the presence filter unless
// it is there already.
func (s *Store) mark(p *partition) {
	if !p.filtered {
		s.present.add(p.hash)
		p.filtered = true
	}
}
