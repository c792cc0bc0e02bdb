package redisstore_test

import (
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/store/redisstore"
)

// BenchmarkApply measures batches per second from 64 goroutines against
// one local redis-server, and reports the server's time per script call
// (INFO commandstats) and its whole CPU time per decision (INFO cpu, I/O
// and parsing included), the figures that bound a Redis store's
// throughput. Sub-benchmarks: one hit on a fixed, a sliding and a GCRA
// window (a lone hit), and a batch of eight hits on eight keys.
func BenchmarkApply(b *testing.B) {
	srv := redistest.Start(b)
	raw := srv.Client(b)
	win := func(k string, kind algo.Kind) engine.Window {
		return engine.Window{Key: k, Kind: kind, Limit: 1 << 40, WindowMs: 60_000}
	}
	var eight []engine.Command
	for i := range 8 {
		eight = append(eight, engine.Hit(1, win("k"+strconv.Itoa(i), algo.KindFixed)))
	}
	cases := []struct {
		name string
		cmds []engine.Command
	}{
		{"fixed", []engine.Command{engine.Hit(1, win("k", algo.KindFixed))}},
		{"sliding", []engine.Command{engine.Hit(1, win("k", algo.KindSliding))}},
		{"gcra", []engine.Command{engine.Hit(1, win("k", algo.KindGCRA))}},
		{"batch8", eight},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			opts := srv.Options()
			opts.PoolSize = 64
			s, err := redisstore.New(redis.NewClient(opts), freshConfig(nil))
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			eng := engine.New(s)
			if err := raw.ConfigResetStat(b.Context()).Err(); err != nil {
				b.Fatal(err)
			}
			var partitions [64]string
			for i := range partitions {
				partitions[i] = "p" + strconv.Itoa(i)
			}
			var next atomic.Int64
			cpu0 := serverCPU(b, raw)
			b.SetParallelism(max(1, 64/runtime.GOMAXPROCS(0)))
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				var out engine.StepResult
				p := partitions[int(next.Add(1))%len(partitions)]
				for pb.Next() {
					if err := eng.Apply(b.Context(), p, &out, c.cmds...); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			cpu := serverCPU(b, raw) - cpu0
			if usec := scriptUsec(b, raw); usec > 0 {
				b.ReportMetric(usec, "server-µs/batch")
				b.ReportMetric(usec/float64(len(c.cmds)), "server-µs/decision")
				b.ReportMetric(cpu/float64(b.N*len(c.cmds)), "server-cpu-µs/decision")
			}
		})
	}
}

// serverCPU reads the server's CPU time so far, user and system, in µs
// (INFO cpu; CONFIG RESETSTAT leaves it).
func serverCPU(b *testing.B, c *redis.Client) float64 {
	info, err := c.Info(b.Context(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var sec float64
	for line := range strings.SplitSeq(info, "\n") {
		for _, k := range []string{"used_cpu_user:", "used_cpu_sys:"} {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), k); ok {
				f, _ := strconv.ParseFloat(v, 64)
				sec += f
			}
		}
	}
	return sec * 1e6
}

// scriptUsec reads the run time per call of the batch code — FCALL, or
// EVALSHA and EVAL for a store running scripts — from INFO commandstats.
func scriptUsec(b *testing.B, c *redis.Client) float64 {
	info, err := c.Info(b.Context(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	var calls, usec float64
	for line := range strings.SplitSeq(info, "\n") {
		line = strings.TrimSpace(line)
		for _, cmd := range []string{"fcall", "evalsha", "eval"} {
			rest, ok := strings.CutPrefix(line, "cmdstat_"+cmd+":")
			if !ok {
				continue
			}
			for field := range strings.SplitSeq(rest, ",") {
				k, v, _ := strings.Cut(field, "=")
				f, _ := strconv.ParseFloat(v, 64)
				switch k {
				case "calls":
					calls += f
				case "usec":
					usec += f
				}
			}
		}
	}
	if calls == 0 {
		return 0
	}
	return usec / calls
}
