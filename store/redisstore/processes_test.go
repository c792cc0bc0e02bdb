package redisstore_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/testclock"
	"github.com/sluicehq/sluice/store/redisstore"
	"github.com/sluicehq/sluice/store/storetest"
)

// The hot-key check across processes: each of hotProcesses processes runs
// hotGoroutines goroutines, all hitting one key with a limit of hotLimit,
// in hotRounds windows of every kind.
const (
	hotProcesses  = 4
	hotGoroutines = 256
	hotLimit      = 100
	hotRounds     = 50
	hotWindowMs   = 60_000
	hotResult     = "hotkey-result: "
	hotEnv        = "SLUICE_REDISSTORE_HOTKEY" // addr,prefix in a child
)

var hotKinds = []algo.Kind{algo.KindFixed, algo.KindSliding, algo.KindLog, algo.KindGCRA}

// TestHotKeyAcrossProcesses starts four processes (this test binary again,
// running TestHotKeyChild), each with its own store and connection pool
// and 256 goroutines, all on one key of one Redis with a limit of 100: in
// 50 windows of each kind, no window may admit more than 100 across the
// processes, and at least 99% must admit exactly 100. The processes meet
// at a barrier in Redis before each window, and each sets its clock to the
// window's instant, so every hit of a window is evaluated at one instant
// whichever process sends it.
func TestHotKeyAcrossProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("four processes of 256 goroutines: skipped in -short mode")
	}
	srv := redistest.Start(t)
	prefix := freshConfig(nil).Prefix
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	results := make([]map[string][]int64, hotProcesses)
	var wg sync.WaitGroup
	errs := make([]error, hotProcesses)
	for i := range hotProcesses {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestHotKeyChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), hotEnv+"="+srv.Addr+","+prefix)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			sc := bufio.NewScanner(out)
			sc.Buffer(nil, 1<<20)
			var lines []string
			for sc.Scan() {
				line := sc.Text()
				if rest, ok := strings.CutPrefix(line, hotResult); ok {
					errs[i] = json.Unmarshal([]byte(rest), &results[i])
				} else {
					lines = append(lines, line)
				}
			}
			if err := cmd.Wait(); err != nil || results[i] == nil {
				errs[i] = fmt.Errorf("child %d (pid %d): %v, %v\nstdout:\n%s\nstderr:\n%s", i, cmd.Process.Pid, err, errs[i], strings.Join(lines, "\n"), stderr.String())
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, kind := range hotKinds {
		full := 0
		for round := range hotRounds {
			var n int64
			for _, r := range results {
				n += r[kind.String()][round]
			}
			if n > hotLimit {
				t.Errorf("%s window %d admitted %d across %d processes, limit %d", kind, round, n, hotProcesses, hotLimit)
			}
			if n == hotLimit {
				full++
			}
		}
		if full*100 < 99*hotRounds {
			t.Errorf("%s: only %d of %d windows admitted exactly %d", kind, full, hotRounds, hotLimit)
		}
		t.Logf("%s: %d processes × %d goroutines, %d windows: none over %d, %d exactly full", kind, hotProcesses, hotGoroutines, hotRounds, hotLimit, full)
	}
}

// TestHotKeyChild is one process of TestHotKeyAcrossProcesses. It prints
// the hits it had admitted in each window, by kind, as one JSON line.
func TestHotKeyChild(t *testing.T) {
	env := os.Getenv(hotEnv)
	if env == "" {
		t.Skip("runs as a child process of TestHotKeyAcrossProcesses")
	}
	addr, prefix, _ := strings.Cut(env, ",")
	opts := &redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1, PoolSize: 64}
	raw := redis.NewClient(opts)
	defer raw.Close()
	clock := testclock.At(storetest.DefaultEpoch)
	cfg := redisstore.DefaultConfig()
	cfg.Prefix, cfg.Clock, cfg.Timeout = prefix, clock, 10*time.Second
	s, err := redisstore.New(redis.NewClient(opts), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	eng := engine.New(s)
	ctx := t.Context()

	admitted := map[string][]int64{}
	for _, kind := range hotKinds {
		hit := engine.Hit(1, engine.Window{Key: "hot-" + kind.String(), Kind: kind, Limit: hotLimit, WindowMs: hotWindowMs})
		step := int64(hotWindowMs)
		if kind == algo.KindSliding {
			step = 2 * hotWindowMs // start each window clear of the previous bucket
		}
		for round := range hotRounds {
			if err := barrier(ctx, raw, prefix+":barrier:"+kind.String()+":"+strconv.Itoa(round), hotProcesses); err != nil {
				t.Fatal(err)
			}
			clock.SetMilli(storetest.DefaultEpoch + int64(round)*step + hotWindowMs/2)
			var n atomic.Int64
			var wg sync.WaitGroup
			errs := make(chan error, hotGoroutines)
			for range hotGoroutines {
				wg.Go(func() {
					var out engine.StepResult
					if err := eng.Apply(ctx, "hot", &out, hit); err != nil {
						errs <- err
						return
					}
					if out.Results[0].Allowed {
						n.Add(1)
					}
				})
			}
			wg.Wait()
			close(errs)
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
			admitted[kind.String()] = append(admitted[kind.String()], n.Load())
		}
	}
	b, err := json.Marshal(admitted)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println(hotResult + string(b))
}

// barrier returns once n callers have reached the barrier named key: each
// counts itself in, the last one releases n tokens, and each takes one.
func barrier(ctx context.Context, c *redis.Client, key string, n int64) error {
	arrived, err := c.Incr(ctx, key).Result()
	if err != nil {
		return err
	}
	if arrived == n {
		tokens := make([]any, n)
		for i := range tokens {
			tokens[i] = "go"
		}
		if err := c.RPush(ctx, key+":go", tokens...).Err(); err != nil {
			return err
		}
	}
	if err := c.BLPop(ctx, time.Minute, key+":go").Err(); err != nil {
		return fmt.Errorf("barrier %s: %w", key, err)
	}
	return nil
}
