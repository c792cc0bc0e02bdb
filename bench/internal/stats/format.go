package stats

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Median returns the median of xs, or 0 when xs is empty. It does not
// reorder xs.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	xs = slices.Clone(xs)
	slices.Sort(xs)
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}

// Thousands formats x rounded to a whole number with comma separators.
func Thousands(x float64) string {
	s := strconv.FormatInt(int64(x+0.5), 10)
	var b strings.Builder
	for i, ch := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(ch)
	}
	return b.String()
}

// Micros formats d in microseconds with one decimal.
func Micros(d time.Duration) string {
	return fmt.Sprintf("%.1f µs", float64(d)/float64(time.Microsecond))
}

// Latency formats d in milliseconds with two decimals.
func Latency(d time.Duration) string {
	return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond))
}

// Rounds holds, per round of a run, the result of each configuration by
// name.
type Rounds[R any] []map[string]R

// Add records r as the result of configuration name in round i.
func (rs *Rounds[R]) Add(round int, name string, r R) {
	for len(*rs) <= round {
		*rs = append(*rs, map[string]R{})
	}
	(*rs)[round][name] = r
}

// Of returns the results of configuration name, in round order, skipping
// rounds that did not measure it.
func (rs Rounds[R]) Of(name string) []R {
	var out []R
	for _, rd := range rs {
		if r, ok := rd[name]; ok {
			out = append(out, r)
		}
	}
	return out
}

// MedianOf returns the median of f over rs.
func MedianOf[R any](rs []R, f func(R) float64) float64 {
	xs := make([]float64, len(rs))
	for i, r := range rs {
		xs[i] = f(r)
	}
	return Median(xs)
}
