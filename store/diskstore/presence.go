package diskstore

import "sync/atomic"

// presenceBits is the size of the presence filter: 4 MiB, enough to keep
// false positives near 1 in 6,000 for a million partitions.
const presenceBits = 1 << 25

// presence is a Bloom filter of the partitions that may have rows on disk.
// A partition it has never seen has none, so its first batch skips the
// prefix scan: a new partition costs no read. It is filled from disk at
// Open and by every commit, before the commit, so it has no false
// negatives; it never forgets, so deleted partitions are cleared only when
// the store is next opened. A false positive costs one prefix scan.
type presence struct {
	words []atomic.Uint64
}

func newPresence() *presence {
	return &presence{words: make([]atomic.Uint64, presenceBits/64)}
}

// positions returns the filter's four bit positions for hash h, by double
// hashing.
func positions(h uint64) [4]uint64 {
	h1, h2 := h&0xffffffff, h>>32|1
	var p [4]uint64
	for i := range p {
		p[i] = (h1 + uint64(i)*h2) % presenceBits
	}
	return p
}

func (f *presence) add(h uint64) {
	for _, b := range positions(h) {
		w := &f.words[b/64]
		if bit := uint64(1) << (b % 64); w.Load()&bit == 0 {
			w.Or(bit)
		}
	}
}

func (f *presence) mayContain(h uint64) bool {
	for _, b := range positions(h) {
		if f.words[b/64].Load()&(1<<(b%64)) == 0 {
			return false
		}
	}
	return true
}
