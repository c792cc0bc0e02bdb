// Command redisbench measures Sluice's Redis store side by side with a raw
// token-bucket script (through go-redis and through redis-benchmark -P 16)
// and with go-redis/redis_rate, all against one redis-server it starts on
// a free loopback port, and prints the medians over several rounds and the
// ratios against Sluice's aims.
//
//	cd bench && go run ./cmd/redisbench -duration 5s -clients 64 -rounds 3
//
// See bench/README.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/sluicehq/sluice/bench/redisbench"
)

func main() {
	var (
		duration = flag.Duration("duration", 5*time.Second, "measured time of each configuration in each round")
		warmup   = flag.Duration("warmup", time.Second, "uncounted warm-up before each measurement")
		clients  = flag.Int("clients", 64, "concurrent callers (redis-benchmark connections)")
		rounds   = flag.Int("rounds", 3, "rounds; every configuration runs once per round and the report gives medians")
		keys     = flag.Int("keys", redisbench.DefaultKeys, "distinct limiter keys the calls spread over")
		pipeline = flag.Int("pipeline", 16, "redis-benchmark's -P")
		coalesce = flag.Int("coalesce", redisbench.DefaultCoalesce, "the store's Config.Pipeline in the -piped configurations: round trips in flight before batches queue into pipelines")
		only     = flag.String("only", "", "comma-separated configurations to run (default all): "+names())
		attach   = flag.String("redis", "", "address of a running redis-server to measure against (its data is flushed), instead of starting one")
		cpuprof  = flag.String("cpuprofile", "", "write a CPU profile of this process over the whole run to the file")
	)
	flag.Parse()
	if *rounds < 1 || *duration <= 0 || *clients < 1 {
		fmt.Fprintln(os.Stderr, "redisbench: -rounds, -duration and -clients must be positive")
		os.Exit(2)
	}
	cfgs, err := redisbench.Select(*only)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	var srv *redisbench.Server
	if *attach != "" {
		srv, err = redisbench.Attach(*attach)
	} else {
		srv, err = redisbench.StartServer(ctx)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer srv.Stop()
	version, _ := exec.Command("redis-server", "--version").Output()
	fmt.Printf("machine: %d cores (GOMAXPROCS %d), %s %s/%s; %s\n", runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.Version(), runtime.GOOS, runtime.GOARCH, strings.TrimSpace(string(version)))
	fmt.Printf("command: go run ./cmd/redisbench %s\n", strings.Join(os.Args[1:], " "))
	fmt.Printf("load: %d concurrent callers, %s warm-up + %s measured per configuration, %d rounds, %d keys; one redis-server (pid %d) on %s for every configuration\n\n",
		*clients, *warmup, *duration, *rounds, *keys, srv.PID(), srv.Addr)

	if *cpuprof != "" {
		f, err := os.Create(*cpuprof)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "redisbench: -cpuprofile:", err)
			srv.Stop()
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}
	opts := redisbench.Options{Clients: *clients, Warmup: *warmup, Duration: *duration, Keys: *keys, Pipeline: *pipeline, Coalesce: *coalesce}
	sum := &redisbench.Summary{Configs: cfgs}
	failed := false
	for round := range *rounds {
		for _, c := range cfgs {
			r, err := redisbench.Measure(ctx, srv, c, opts)
			if ctx.Err() != nil {
				fmt.Fprintln(os.Stderr, "redisbench: interrupted")
				srv.Stop()
				os.Exit(1)
			}
			if err != nil {
				failed = true
				fmt.Fprintf(os.Stderr, "round %d %-20s FAILED: %v\n", round+1, c.Name, err)
				continue
			}
			sum.Add(round, r)
			line := fmt.Sprintf("round %d %-20s %10.0f decisions/s  p50 %6.2f ms  p99 %6.2f ms  script %5.1f µs/decision  server cpu %5.1f µs/decision  client cpu %5.1f µs/decision  errors %d  denied %d  load %s",
				round+1, c.Name, r.DecisionsPerSec(), ms(r.P50), ms(r.P99), r.UsecPerDecision(),
				float64(r.CPUPerDecision())/float64(time.Microsecond), float64(r.ClientCPUPerDecision())/float64(time.Microsecond), r.Errors, r.Denied, loadAvg())
			if r.FirstErr != nil {
				line += fmt.Sprintf("  first error: %v", r.FirstErr)
			}
			fmt.Fprintln(os.Stderr, line)
		}
	}

	fmt.Printf("Medians of %d rounds:\n\n", *rounds)
	sum.WriteTable(os.Stdout)
	fmt.Println()
	sum.WriteAims(os.Stdout)
	if failed {
		srv.Stop()
		os.Exit(1)
	}
}

// loadAvg returns the one-minute load average on Linux, or "?".
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	if f := strings.Fields(string(b)); len(f) > 0 {
		return f[0]
	}
	return "?"
}

func names() string {
	var n []string
	for _, c := range redisbench.Configs() {
		n = append(n, c.Name)
	}
	return strings.Join(n, ", ")
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
