package stats

import (
	"testing"
	"time"
)

// TestHistogram checks the quantiles of known durations within the
// histogram's 1 % precision.
func TestHistogram(t *testing.T) {
	var h Histogram
	for i := 1; i <= 1000; i++ {
		h.Record(time.Duration(i) * time.Microsecond)
	}
	for _, tc := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 500 * time.Microsecond}, {0.99, 990 * time.Microsecond}, {1, time.Millisecond}} {
		got := h.Quantile(tc.q)
		if d := got - tc.want; d < -tc.want/100 || d > tc.want/100 {
			t.Errorf("quantile(%v) = %v, want %v ± 1 %%", tc.q, got, tc.want)
		}
	}
	for _, ns := range []uint64{0, 1, 255, 256, 257, 1 << 20, 1<<40 + 12345, 1<<63 - 1} {
		b := bucketOf(ns)
		if b < 0 || b >= histBuckets {
			t.Fatalf("bucketOf(%d) = %d out of range", ns, b)
		}
		if v := bucketValue(b); float64(v) < float64(ns)*0.99 || float64(v) > float64(ns)*1.01+1 {
			t.Errorf("bucketValue(bucketOf(%d)) = %d, over 1 %% away", ns, v)
		}
	}
}

func TestThousandsAndMedian(t *testing.T) {
	for x, want := range map[float64]string{0: "0", 999.4: "999", 999.5: "1,000", 1234567: "1,234,567"} {
		if got := Thousands(x); got != want {
			t.Errorf("Thousands(%v) = %q, want %q", x, got, want)
		}
	}
	xs := []float64{3, 1, 2, 10}
	if got := Median(xs); got != 2.5 {
		t.Errorf("Median(%v) = %v, want 2.5", xs, got)
	}
	if xs[0] != 3 {
		t.Errorf("Median reordered its argument: %v", xs)
	}
	if got := Median(nil); got != 0 {
		t.Errorf("Median(nil) = %v, want 0", got)
	}
}

func TestRounds(t *testing.T) {
	var rs Rounds[float64]
	rs.Add(0, "a", 1)
	rs.Add(2, "a", 5) // round 1 did not measure a
	rs.Add(1, "b", 7)
	if got := rs.Of("a"); len(got) != 2 || got[0] != 1 || got[1] != 5 {
		t.Errorf("Of(a) = %v, want [1 5] in round order", got)
	}
	if got := rs.Of("c"); len(got) != 0 {
		t.Errorf("Of(c) = %v, want nothing", got)
	}
	if got := MedianOf(rs.Of("a"), func(x float64) float64 { return 2 * x }); got != 6 {
		t.Errorf("MedianOf(2x over a) = %v, want 6", got)
	}
}

// TestQuantileRank checks that a quantile is the recorded value of nearest
// rank, ⌈q·n⌉, the one a reader computes by hand: of 1, 2 and 3 ns the
// median is 2 ns, and of 1 to 150 ns the 99th percentile is 149 ns.
func TestQuantileRank(t *testing.T) {
	for _, tc := range []struct {
		n    int
		q    float64
		want time.Duration
	}{
		{1, 0.5, 1}, {2, 0.5, 1}, {3, 0.5, 2}, {4, 0.5, 2}, {5, 0.5, 3},
		{100, 0.99, 99}, {150, 0.99, 149}, {101, 0.5, 51}, {3, 1, 3},
	} {
		var h Histogram
		for i := 1; i <= tc.n; i++ {
			h.Record(time.Duration(i)) // below 256 ns every bucket is exact
		}
		if got := h.Quantile(tc.q); got != tc.want {
			t.Errorf("quantile(%v) of 1..%d ns = %v, want %v", tc.q, tc.n, got, tc.want)
		}
	}
}
