package algo_test

import (
	"strconv"
	"testing"

	"github.com/sluicehq/sluice/algo"
)

// benchEpoch is a realistic Unix millisecond, so that GCRA and the bucket
// arithmetic see the magnitudes they see in production.
const benchEpoch = 1_700_000_000_000

// The hot paths below run at the limit's own rate (100 per second, one hit
// every 10 ms), so nearly every hit is admitted and the state is written
// back, as a store does. Fixed, sliding and gcra states are plain values and
// should not allocate; log, gate and pace states return a fresh slice on
// every admitted transition, so that a state a caller decides not to commit
// never shares memory with the stored one.

func BenchmarkHit(b *testing.B) {
	for _, k := range allKinds {
		l := algo.Limit{Kind: k, Limit: 100, Window: 1000}
		b.Run(k.String(), func(b *testing.B) {
			b.ReportAllocs()
			var s algo.WindowState
			now := int64(benchEpoch)
			for b.Loop() {
				now += 10
				s, _ = algo.Hit(l, s, now, 1)
			}
		})
	}
}

// BenchmarkHitDenied measures the denial path, which also computes the exact
// retry-after (for sliding, the search for the first admitting instant). The
// window is filled at twice its rate until it denies, so a log holds a full
// window of entries.
func BenchmarkHitDenied(b *testing.B) {
	for _, k := range allKinds {
		l := algo.Limit{Kind: k, Limit: 100, Window: 1000}
		b.Run(k.String(), func(b *testing.B) {
			var s algo.WindowState
			now := int64(benchEpoch)
			for {
				next, d := algo.Hit(l, s, now, 1)
				if !d.Allowed {
					break
				}
				s, now = next, now+5
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, d := algo.Hit(l, s, now, 1); d.Allowed {
					b.Fatal("admitted")
				}
			}
		})
	}
}

// BenchmarkHitParallel runs one state per goroutine: algo shares nothing, so
// it should scale with the cores.
func BenchmarkHitParallel(b *testing.B) {
	for _, k := range allKinds {
		l := algo.Limit{Kind: k, Limit: 100, Window: 1000}
		b.Run(k.String(), func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				var s algo.WindowState
				now := int64(benchEpoch)
				for pb.Next() {
					now += 10
					s, _ = algo.Hit(l, s, now, 1)
				}
			})
		})
	}
}

func BenchmarkBudgetReserve(b *testing.B) {
	budget := algo.Budget{Limit: 100, Window: 1000}
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		var st algo.BudgetState
		now := int64(benchEpoch)
		for b.Loop() {
			now += 10
			st, _ = budget.Reserve(st, now, 1)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			var st algo.BudgetState
			now := int64(benchEpoch)
			for pb.Next() {
				now += 10
				st, _ = budget.Reserve(st, now, 1)
			}
		})
	})
}

// benchGate returns a gate holding n live leases.
func benchGate(n int) algo.GateState {
	var g algo.GateState
	for i := range n {
		g, _ = g.Acquire(benchEpoch, "worker-"+strconv.Itoa(i), 64, 60_000)
	}
	return g
}

// BenchmarkGateAcquire takes a new lease on a gate holding 8 of 64.
func BenchmarkGateAcquire(b *testing.B) {
	b.Run("serial", func(b *testing.B) {
		g := benchGate(8)
		b.ReportAllocs()
		for b.Loop() {
			if _, d := g.Acquire(benchEpoch+1, "worker-new", 64, 60_000); !d.Allowed {
				b.Fatal("denied")
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			g := benchGate(8)
			for pb.Next() {
				if _, d := g.Acquire(benchEpoch+1, "worker-new", 64, 60_000); !d.Allowed {
					b.Fatal("denied")
				}
			}
		})
	})
}

func BenchmarkPaceTake(b *testing.B) {
	l := algo.PaceLimit{Limit: 100, Window: 1000, RefillPermille: algo.DefaultRefillPermille}
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		var s algo.PaceState
		now := int64(benchEpoch)
		for b.Loop() {
			now += 10
			s, _ = s.Take(l, now, 1, 1000)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			var s algo.PaceState
			now := int64(benchEpoch)
			for pb.Next() {
				now += 10
				s, _ = s.Take(l, now, 1, 1000)
			}
		})
	})
}
