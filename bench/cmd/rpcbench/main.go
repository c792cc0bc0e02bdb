// Command rpcbench measures Sluice's server over loopback side by side with
// gubernator v2 and the bare HTTP and gRPC transports, in one process and
// one run, and prints the medians over several rounds and the ratios
// against Sluice's performance aims.
//
//	cd bench && go run ./cmd/rpcbench -duration 15s -clients 64 -rounds 5
//
// See bench/README.md.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"time"

	"github.com/sluicehq/sluice/bench/rpcbench"
	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/store/diskstore"
)

func main() {
	var (
		duration = flag.Duration("duration", 15*time.Second, "measured time of each configuration in each round")
		warmup   = flag.Duration("warmup", 3*time.Second, "uncounted warm-up before each measurement")
		clients  = flag.Int("clients", 64, "concurrent callers")
		rounds   = flag.Int("rounds", 5, "rounds; every configuration runs once per round and the report gives medians")
		keys     = flag.Int("keys", rpcbench.DefaultKeys, "distinct limiter keys the calls spread over")
		only     = flag.String("only", "", "comma-separated configurations or groups to run (default all outside a group): "+names())
		dir      = flag.String("dir", "", "parent of the durable store's temporary data directory (default the system temporary directory)")
		fsync    = flag.String("fsync", string(diskstore.SyncAlways), "the durable store's fsync policy: always (the default, and what the aims are judged on), interval or never")
		every    = flag.Duration("fsync-interval", diskstore.DefaultConfig().SyncInterval, "the fsync period under -fsync interval (diskstore.Config.SyncInterval)")
		httpVer  = flag.String("http", "", "the HTTP version of Sluice's client: 2 (h2c) or 1.1 (default: the client's default, HTTP/1.1 over plain http)")
		hexNames = flag.Bool("hex-names", false, "give Sluice's clients a pepper of the hex form, whose names are 64 hex digits, rather than one from client.NewPepper (22 characters), as a new data directory has")
		coalesce = flag.Int("coalesce", 0, "RPCs Sluice's client has in flight before it coalesces calls into envelopes (client.Config.Coalesce; 0: the client's default)")
		memtable = flag.Int("memtable", 0, "the durable store's Pebble memtable size in MiB (diskstore.Config.MemTableBytes; 0: the store's default)")
		procs    = flag.Int("sluice-procs", 0, "GOMAXPROCS while a Sluice configuration runs; the peers and floors keep the process's (0: the process's for all)")
		tracePfx = flag.String("trace", "", "after the rounds, trace one more measurement of each configuration into `prefix`-NAME.trace (go tool trace; not counted in the medians)")
		profile  = flag.String("cpuprofile", "", "after the rounds, profile one more measurement of each configuration into `prefix`-NAME.pprof (not counted in the medians)")
		allocs   = flag.String("allocprofile", "", "after the rounds, write the allocation profile at the start and the end of one more measurement of each configuration into `prefix`-NAME.base.pprof and prefix-NAME.pprof (go tool pprof -base; not counted in the medians)")
	)
	flag.Parse()
	if *rounds < 1 || *duration <= 0 || *clients < 1 {
		fmt.Fprintln(os.Stderr, "rpcbench: -rounds, -duration and -clients must be positive")
		os.Exit(2)
	}
	cfgs, err := rpcbench.Select(*only)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	opts := rpcbench.Options{Clients: *clients, Warmup: *warmup, Duration: *duration, Keys: *keys, Dir: *dir, HTTPVersion: client.HTTPVersion(*httpVer), Coalesce: *coalesce, HexNames: *hexNames, SluiceProcs: *procs}
	if *procs < 0 {
		fmt.Fprintln(os.Stderr, "rpcbench: -sluice-procs must be 0 or more")
		os.Exit(2)
	}
	if err := (client.Config{HTTPVersion: opts.HTTPVersion, Coalesce: opts.Coalesce, Off: true}).Validate(); err != nil {
		fmt.Fprintln(os.Stderr, "rpcbench: -http, -coalesce:", err)
		os.Exit(2)
	}
	policy := diskstore.SyncPolicy(*fsync)
	if policy != diskstore.SyncAlways || *memtable != 0 {
		opts.Store = func(c *diskstore.Config) {
			c.Sync, c.SyncInterval = policy, *every
			if *memtable != 0 {
				c.MemTableBytes = int64(*memtable) << 20
			}
		}
	}
	if err := (func() error {
		c := diskstore.DefaultConfig()
		c.Dir = os.TempDir()
		if opts.Store != nil {
			opts.Store(&c)
		}
		return c.Validate()
	})(); err != nil {
		fmt.Fprintln(os.Stderr, "rpcbench: -fsync, -fsync-interval, -memtable:", err)
		os.Exit(2)
	}
	fmt.Printf("machine: %s, %d cores (GOMAXPROCS %d), %s %s/%s\n", cpuModel(), runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.Version(), runtime.GOOS, runtime.GOARCH)
	fmt.Printf("command: go run ./cmd/rpcbench %s\n", strings.Join(os.Args[1:], " "))
	httpName := "HTTP/1.1"
	if opts.HTTPVersion == client.HTTP2 {
		httpName = "HTTP/2 (h2c)"
	}
	names := "names of 22 characters (client.NewPepper)"
	if opts.HexNames {
		names = "names of 64 hex digits (-hex-names)"
	}
	fmt.Printf("load: %d concurrent callers, %s warm-up + %s measured per configuration, %d rounds, %d keys; Sluice's store: diskstore, fsync %s; Sluice's client: %s, %s\n\n", *clients, *warmup, *duration, *rounds, *keys, policy, httpName, names)
	switch policy {
	case diskstore.SyncOnInterval:
		fmt.Printf("NOTE: under fsync interval (every %s) an answer waits for its write to the log, not for an fsync: a process crash loses nothing acknowledged, a power loss up to %s. The aims are set for fsync always.\n\n", *every, *every)
	case diskstore.SyncNever:
		fmt.Println("NOTE: under fsync never a crash can lose acknowledged batches; the aims are set for fsync always.")
		fmt.Println()
	}
	if *procs > 0 {
		fmt.Printf("NOTE: Sluice's configurations run at GOMAXPROCS %d, the others at %d.\n\n", *procs, runtime.GOMAXPROCS(0))
	}
	for _, c := range cfgs {
		fmt.Printf("- %s: %s\n", c.Name, c.Title)
	}
	fmt.Println()

	sum := &rpcbench.Summary{Configs: cfgs}
	failed := false
	for round := range *rounds {
		for _, c := range cfgs {
			r, err := rpcbench.Measure(ctx, c, opts)
			if ctx.Err() != nil {
				fmt.Fprintln(os.Stderr, "rpcbench: interrupted")
				os.Exit(1)
			}
			if err != nil {
				failed = true
				fmt.Fprintf(os.Stderr, "round %d %-15s FAILED: %v\n", round+1, c.Name, err)
				continue
			}
			sum.Add(round, r)
			line := fmt.Sprintf("round %d %-15s %10.0f calls/s %12.0f decisions/s  p50 %7.2f ms  p99 %7.2f ms  cpu %6.1f µs/decision %.2f cores  errors %d  denied %d  load %s  procs %d  switches %.2f/call",
				round+1, c.Name, r.CallsPerSec(), r.DecisionsPerSec(), ms(r.P50), ms(r.P99),
				float64(r.CPUPerDecision())/float64(time.Microsecond), r.Cores(), r.Errors, r.Denied, loadAvg(), r.Procs, r.SwitchesPerCall())
			if r.WALSyncs > 0 {
				line += fmt.Sprintf("  WAL fsyncs %.0f/s, %.1f calls each, %.0f µs each (busy %.0f %%), %.0f bytes per decision",
					float64(r.WALSyncs)/r.Elapsed.Seconds(), r.CallsPerWALSync(), float64(r.WALSyncMean().Microseconds()), 100*r.WALSyncBusy(), r.WALBytesPerDecision())
			}
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

	for _, extra := range []struct {
		prefix string
		exts   []string
		what   string
		set    func(*rpcbench.Options, []io.Writer)
	}{
		{*profile, []string{"pprof"}, "CPU profile", func(o *rpcbench.Options, w []io.Writer) { o.CPUProfile = w[0] }},
		{*tracePfx, []string{"trace"}, "execution trace", func(o *rpcbench.Options, w []io.Writer) { o.Trace = w[0] }},
		{*allocs, []string{"base.pprof", "pprof"}, "allocation profiles", func(o *rpcbench.Options, w []io.Writer) { o.AllocsBase, o.Allocs = w[0], w[1] }},
	} {
		if extra.prefix == "" {
			continue
		}
		fmt.Println()
		for _, c := range cfgs {
			var paths []string
			for _, ext := range extra.exts {
				paths = append(paths, extra.prefix+"-"+c.Name+"."+ext)
			}
			if err := recordOne(ctx, c, opts, paths, extra.set); err != nil {
				failed = true
				fmt.Fprintf(os.Stderr, "%s of %s FAILED: %v\n", extra.what, c.Name, err)
				continue
			}
			fmt.Printf("%s of %s: %s\n", extra.what, c.Name, strings.Join(paths, ", "))
		}
	}
	if *profile != "" {
		fmt.Printf("\nServer side: go tool pprof -tagfocus=side=server -top %s-NAME.pprof; Pebble's own goroutines carry pebble=… labels instead; go tool pprof -tags shows the split.\n", *profile)
	}
	if failed {
		os.Exit(1)
	}
}

// recordOne runs one more, uncounted, measurement of c with set giving it
// the files at paths to write (a CPU profile, an execution trace, or the
// two allocation profiles).
func recordOne(ctx context.Context, c rpcbench.Config, opts rpcbench.Options, paths []string, set func(*rpcbench.Options, []io.Writer)) (err error) {
	var ws []io.Writer
	for _, path := range paths {
		f, ferr := os.Create(path)
		if ferr != nil {
			return errors.Join(err, ferr)
		}
		defer func() { err = errors.Join(err, f.Close()) }()
		ws = append(ws, f)
	}
	set(&opts, ws)
	r, err := rpcbench.Measure(ctx, c, opts)
	if err == nil {
		fmt.Fprintf(os.Stderr, "recorded %-15s %10.0f calls/s %12.0f decisions/s (not counted)\n", c.Name, r.CallsPerSec(), r.DecisionsPerSec())
	}
	return err
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
	groups := map[string]bool{}
	for _, c := range rpcbench.Configs() {
		n = append(n, c.Name)
		if c.Group != "" && !groups[c.Group] {
			groups[c.Group] = true
			n = append(n, "group "+c.Group)
		}
	}
	return strings.Join(n, ", ")
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// cpuModel returns the processor's model name on Linux, or the architecture.
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return runtime.GOARCH
}
