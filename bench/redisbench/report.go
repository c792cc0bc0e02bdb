package redisbench

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/sluicehq/sluice/bench/internal/stats"
)

// Summary gathers the results of every round of one run.
type Summary struct {
	Configs []Config
	// Rounds holds, per round, the result of each configuration by name.
	Rounds stats.Rounds[Result]
}

// Add records r in round i.
func (s *Summary) Add(round int, r Result) { s.Rounds.Add(round, r.Config, r) }

// Median returns the median over the rounds of f of configuration name, and
// whether it was measured.
func (s *Summary) Median(name string, f func(Result) float64) (float64, bool) {
	rs := s.Rounds.Of(name)
	return stats.MedianOf(rs, f), len(rs) > 0
}

// Decisions is Result.DecisionsPerSec as a function value.
func Decisions(r Result) float64 { return r.DecisionsPerSec() }

// ScriptUsec is Result.UsecPerDecision as a function value.
func ScriptUsec(r Result) float64 { return r.UsecPerDecision() }

// ClientCPU is Result.ClientCPUPerDecision in microseconds.
func ClientCPU(r Result) float64 {
	return float64(r.ClientCPUPerDecision()) / float64(time.Microsecond)
}

// ServerCPU is Result.CPUPerDecision in microseconds.
func ServerCPU(r Result) float64 { return float64(r.CPUPerDecision()) / float64(time.Microsecond) }

// WriteTable writes a Markdown table of the medians over the rounds.
func (s *Summary) WriteTable(w io.Writer) {
	fmt.Fprintf(w, "| configuration | decisions per call | decisions/s | p50 | p99 | script µs per decision | server CPU µs per decision | errors | decisions/s per round |\n")
	fmt.Fprintf(w, "|---|--:|--:|--:|--:|--:|--:|--:|---|\n")
	for _, c := range s.Configs {
		rs := s.Rounds.Of(c.Name)
		if len(rs) == 0 {
			continue
		}
		var errs uint64
		per := make([]string, len(rs))
		for i, r := range rs {
			errs += r.Errors
			per[i] = stats.Thousands(r.DecisionsPerSec())
		}
		p50, p99 := "–", "–"
		if !c.External {
			p50 = stats.Latency(time.Duration(stats.MedianOf(rs, func(r Result) float64 { return float64(r.P50) })))
			p99 = stats.Latency(time.Duration(stats.MedianOf(rs, func(r Result) float64 { return float64(r.P99) })))
		}
		fmt.Fprintf(w, "| %s | %d | %s | %s | %s | %.1f | %.1f | %d | %s |\n",
			c.Name, c.PerCall, stats.Thousands(stats.MedianOf(rs, Decisions)), p50, p99,
			stats.MedianOf(rs, ScriptUsec), stats.MedianOf(rs, ServerCPU), errs, strings.Join(per, ", "))
	}
}

// Aim is one target ratio between two configurations, or an absolute
// bound on one (Den empty).
type Aim struct {
	Text     string
	Num, Den string
	Measure  func(Result) float64
	Want     float64
	// AtMost makes Want an upper bound.
	AtMost bool
}

// Aims are Sluice's performance aims on Redis. The single-hit aims judge
// the store as it is configured by default, concurrent batches sharing a
// pipeline (sluice-1-piped; decision 0035), as redis-benchmark -P 16
// pipelines its calls; the rows without a bound put the store with
// pipelines off (sluice-1) beside the same references.
var Aims = []Aim{
	{Text: "sluice-1-piped (the default) ≥ 0.9× raw script, redis-benchmark -P 16 (decisions/s)", Num: Sluice1Piped, Den: RedisBenchmark, Measure: Decisions, Want: 0.9},
	{Text: "sluice-1-piped (the default) ≥ 0.9× raw script, go-redis (decisions/s)", Num: Sluice1Piped, Den: RawScript, Measure: Decisions, Want: 0.9},
	{Text: "sluice-1-piped (the default) ≥ 1.0× redis_rate (decisions/s)", Num: Sluice1Piped, Den: RedisRate, Measure: Decisions, Want: 1},
	{Text: "sluice-8 ≥ 3× sluice-1 (decisions/s)", Num: Sluice8, Den: Sluice1, Measure: Decisions, Want: 3},
	{Text: "sluice-8 script time ≤ 10 µs per decision", Num: Sluice8, Measure: ScriptUsec, Want: 10, AtMost: true},
	{Text: "sluice-1-piped server CPU, µs per decision, vs redis-benchmark -P 16", Num: Sluice1Piped, Den: RedisBenchmark, Measure: ServerCPU},
	{Text: "sluice-1 (pipelines off) vs raw script, go-redis (decisions/s)", Num: Sluice1, Den: RawScript, Measure: Decisions},
	{Text: "sluice-1 (pipelines off) vs raw script, redis-benchmark -P 16 (decisions/s)", Num: Sluice1, Den: RedisBenchmark, Measure: Decisions},
	{Text: "sluice-1 (pipelines off) vs redis_rate (decisions/s)", Num: Sluice1, Den: RedisRate, Measure: Decisions},
	{Text: "sluice-1 script time, µs per decision, vs the raw script", Num: Sluice1, Den: RawScript, Measure: ScriptUsec},
	{Text: "sluice-1-piped vs sluice-1 (decisions/s)", Num: Sluice1Piped, Den: Sluice1, Measure: Decisions},
	{Text: "sluice-8-piped vs sluice-8 (decisions/s)", Num: Sluice8Piped, Den: Sluice8, Measure: Decisions},
	{Text: "sluice-1-piped vs sluice-1, client CPU per decision", Num: Sluice1Piped, Den: Sluice1, Measure: ClientCPU},
}

// WriteAims writes each aim's ratio of medians (or median), the per-round
// values, and whether the aim is met.
func (s *Summary) WriteAims(w io.Writer) {
	fmt.Fprintf(w, "| aim | median | per round | met |\n")
	fmt.Fprintf(w, "|---|--:|---|---|\n")
	for _, a := range Aims {
		num, ok := s.Median(a.Num, a.Measure)
		if !ok {
			continue
		}
		value := func(rd map[string]Result) (float64, bool) {
			n, ok := rd[a.Num]
			if !ok {
				return 0, false
			}
			if a.Den == "" {
				return a.Measure(n), true
			}
			d, ok := rd[a.Den]
			if !ok || a.Measure(d) == 0 {
				return 0, false
			}
			return a.Measure(n) / a.Measure(d), true
		}
		if a.Den != "" {
			den, ok := s.Median(a.Den, a.Measure)
			if !ok || den == 0 {
				continue
			}
			num /= den
		}
		var per []string
		for _, rd := range s.Rounds {
			if v, ok := value(rd); ok {
				per = append(per, fmt.Sprintf("%.2f", v))
			}
		}
		met := "–"
		if a.Want > 0 {
			met = "no"
			if (num >= a.Want) != a.AtMost || num == a.Want {
				met = "yes"
			}
		}
		fmt.Fprintf(w, "| %s | %.2f | %s | %s |\n", a.Text, num, strings.Join(per, ", "), met)
	}
}
