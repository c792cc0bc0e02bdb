package keyhash

// MemoEntries is the most hashes a Hasher's memo holds.
const MemoEntries = memoSets * memoWays

// MemoMaxIn is the longest input (purpose, zero byte and value) memoised.
const MemoMaxIn = memoMaxIn

// NewNarrow returns a Hasher whose memo puts every input in one set under
// one tag, so that its entries are told apart by their inputs alone.
func NewNarrow(pepper []byte) *Hasher {
	h := New(pepper)
	h.narrow = 0
	return h
}

// MemoLen counts the entries the memo holds.
func (h *Hasher) MemoLen() int {
	n := 0
	for i := range h.memo {
		for j := range h.memo[i].ents {
			if h.memo[i].ents[j].Load() != nil {
				n++
			}
		}
	}
	return n
}
