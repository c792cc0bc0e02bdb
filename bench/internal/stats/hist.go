// Package stats holds what the bench harnesses share: a latency histogram
// and the formatting of their reports.
package stats

import (
	"math"
	"math/bits"
	"time"
)

// subBits is the number of mantissa bits a histogram bucket keeps: 128
// buckets per power of two, so a reported quantile is within 1 % of the
// recorded value.
const subBits = 7

// histBuckets covers every duration up to 2^63 ns.
const histBuckets = (64 - subBits + 1) << subBits

// Histogram counts latencies in log-linear buckets. Recording allocates
// nothing and costs a few instructions, so it does not disturb the load it
// measures; each worker keeps its own and they are merged at the end.
type Histogram struct {
	counts [histBuckets]uint64
	n      uint64
}

func bucketOf(ns uint64) int {
	if ns < 1<<(subBits+1) {
		return int(ns)
	}
	shift := bits.Len64(ns) - (subBits + 1)
	return (shift+1)<<subBits + int(ns>>shift) - 1<<subBits
}

// bucketValue returns the middle of bucket i, in nanoseconds.
func bucketValue(i int) uint64 {
	if i < 1<<(subBits+1) {
		return uint64(i)
	}
	shift := i>>subBits - 1
	lo := uint64(i&(1<<subBits-1)+1<<subBits) << shift
	return lo + (uint64(1)<<shift)/2
}

// Record counts d (a negative d as 0).
func (h *Histogram) Record(d time.Duration) {
	if d < 0 {
		d = 0
	}
	h.counts[bucketOf(uint64(d))]++
	h.n++
}

// Merge adds the counts of o to h.
func (h *Histogram) Merge(o *Histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
}

// Quantile returns the q-quantile (0 < q ≤ 1) of the recorded durations:
// the value of nearest rank, the ⌈q·n⌉-th smallest of n. It returns 0 when
// nothing was recorded.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	rank = min(max(rank, 1), h.n)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return time.Duration(bucketValue(i))
		}
	}
	return 0
}
