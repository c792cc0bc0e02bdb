package rpcbench

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

// Calls is Result.CallsPerSec as a function value.
func Calls(r Result) float64 { return r.CallsPerSec() }

// CallsPerCPU is the calls made per second of the process's CPU time: the
// throughput a machine given only to this would bound, and on a shared
// machine steadier than Calls.
func CallsPerCPU(r Result) float64 {
	if r.CPU <= 0 {
		return 0
	}
	return float64(r.Calls) / r.CPU.Seconds()
}

// DecisionsPerCPU is the decisions made per second of the process's CPU
// time: what a machine given only to this would bound. Sluice, durable and
// waiting on its fsyncs, leaves part of the cores idle where a peer in
// memory keeps them busy, so this reads an aim as CPU efficiency.
func DecisionsPerCPU(r Result) float64 { return CallsPerCPU(r) * float64(r.PerCall) }

// WriteTable writes a Markdown table of the medians over the rounds.
func (s *Summary) WriteTable(w io.Writer) {
	fmt.Fprintf(w, "| configuration | decisions per call | calls/s | decisions/s | p50 | p99 | CPU per decision | cores busy | errors | decisions/s per round |\n")
	fmt.Fprintf(w, "|---|--:|--:|--:|--:|--:|--:|--:|--:|---|\n")
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
		p50 := time.Duration(stats.MedianOf(rs, func(r Result) float64 { return float64(r.P50) }))
		p99 := time.Duration(stats.MedianOf(rs, func(r Result) float64 { return float64(r.P99) }))
		cpu := time.Duration(stats.MedianOf(rs, func(r Result) float64 { return float64(r.CPUPerDecision()) }))
		fmt.Fprintf(w, "| %s | %d | %s | %s | %s | %s | %s | %.2f | %d | %s |\n",
			c.Name, c.PerCall, stats.Thousands(stats.MedianOf(rs, Calls)), stats.Thousands(stats.MedianOf(rs, Decisions)),
			stats.Latency(p50), stats.Latency(p99), stats.Micros(cpu), stats.MedianOf(rs, Result.Cores), errs, strings.Join(per, ", "))
	}
}

// Aim is one target ratio between two configurations.
type Aim struct {
	Text      string
	Num, Den  string
	Measure   func(Result) float64
	Want      float64
	Reference float64 // an absolute figure for Num to compare with, if any
}

// Aims are the performance aims Sluice holds itself to.
var Aims = []Aim{
	{Text: "Sluice 1/call ≥ 2× gubernator 1/call (decisions/s)", Num: Sluice1, Den: Guber1, Measure: Decisions, Want: 2},
	{Text: "Sluice 32/call ≥ 3× gubernator 100/call (decisions/s)", Num: Sluice32, Den: Guber100, Measure: Decisions, Want: 3, Reference: 240_000},
	{Text: "Sluice 1/call ≥ 2× gubernator 1/call (decisions per CPU-second)", Num: Sluice1, Den: Guber1, Measure: DecisionsPerCPU, Want: 2},
	{Text: "Sluice 32/call ≥ 3× gubernator 100/call (decisions per CPU-second)", Num: Sluice32, Den: Guber100, Measure: DecisionsPerCPU, Want: 3},
	{Text: "Sluice 1/call ≥ 0.7× bare HTTP floor (calls/s)", Num: Sluice1, Den: HTTPFloor, Measure: Calls, Want: 0.7},
	{Text: "Sluice 1/call ≥ 0.7× bare HTTP/2 floor (calls/s)", Num: Sluice1, Den: HTTP2Floor, Measure: Calls, Want: 0.7},
	{Text: "(without coalescing) Sluice 1/RPC ≥ 2× gubernator 1/call", Num: Sluice1Single, Den: Guber1, Measure: Decisions, Want: 2},
	{Text: "(without coalescing) Sluice 1/RPC ≥ 0.7× bare HTTP floor", Num: Sluice1Single, Den: HTTPFloor, Measure: Calls, Want: 0.7},
	// Admission on costs at most 10 % of throughput against admission off
	// with the same body: wall-clock throughput, and calls per CPU-second.
	{Text: "durable, admission on ≥ 0.9× off (calls/s)", Num: AdmOn, Den: AdmOff, Measure: Calls, Want: 0.9},
	{Text: "durable, admission on ≥ 0.9× off (calls per CPU-second)", Num: AdmOn, Den: AdmOff, Measure: CallsPerCPU, Want: 0.9},
	{Text: "durable, fair admission ≥ 0.9× off with identities (calls/s)", Num: AdmFair, Den: AdmOffIDs, Measure: Calls, Want: 0.9},
	{Text: "durable, fair admission ≥ 0.9× off with identities (calls per CPU-second)", Num: AdmFair, Den: AdmOffIDs, Measure: CallsPerCPU, Want: 0.9},
	{Text: "memstore, admission on ≥ 0.9× off (calls/s)", Num: AdmMemOn, Den: AdmMemOff, Measure: Calls, Want: 0.9},
	{Text: "memstore, admission on ≥ 0.9× off (calls per CPU-second)", Num: AdmMemOn, Den: AdmMemOff, Measure: CallsPerCPU, Want: 0.9},
	{Text: "memstore, fair admission ≥ 0.9× off with identities (calls/s)", Num: AdmMemFair, Den: AdmMemOffIDs, Measure: Calls, Want: 0.9},
	{Text: "memstore, fair admission ≥ 0.9× off with identities (calls per CPU-second)", Num: AdmMemFair, Den: AdmMemOffIDs, Measure: CallsPerCPU, Want: 0.9},
}

// WriteAims writes each aim's ratio of medians, the spread of the ratio
// within single rounds, and whether the aim is met.
func (s *Summary) WriteAims(w io.Writer) {
	fmt.Fprintf(w, "| aim | ratio of medians | median per-round ratio | per-round ratios | met |\n")
	fmt.Fprintf(w, "|---|--:|--:|---|---|\n")
	for _, a := range Aims {
		num, ok1 := s.Median(a.Num, a.Measure)
		den, ok2 := s.Median(a.Den, a.Measure)
		if !ok1 || !ok2 || den == 0 {
			continue
		}
		var per []string
		var ratios []float64
		for _, rd := range s.Rounds {
			n, ok1 := rd[a.Num]
			d, ok2 := rd[a.Den]
			if ok1 && ok2 && a.Measure(d) > 0 {
				ratios = append(ratios, a.Measure(n)/a.Measure(d))
				per = append(per, fmt.Sprintf("%.2f", ratios[len(ratios)-1]))
			}
		}
		ratio := num / den
		met := "no"
		if ratio >= a.Want {
			met = "yes"
		}
		if a.Reference > 0 {
			ref := "below"
			if num >= a.Reference {
				ref = "at or above"
			}
			met += fmt.Sprintf(" (%s/s: %s the %s/s reference)", stats.Thousands(num), ref, stats.Thousands(a.Reference))
		}
		fmt.Fprintf(w, "| %s | %.2f | %.2f | %s | %s |\n", a.Text, ratio, stats.Median(ratios), strings.Join(per, ", "), met)
	}
}
