package diskstore

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/testclock"
)

// The crash test re-executes the test binary as a child process that
// serves batches on a store until it is killed. These variables tell the
// child where the store is and what time it is.
const (
	crashDirEnv = "SLUICE_DISKSTORE_CRASH_DIR"
	crashNowEnv = "SLUICE_DISKSTORE_CRASH_NOW"
	crashRunEnv = "SLUICE_DISKSTORE_CRASH_RUN"
	// crashSyncEnv is the store's Config.Sync.
	crashSyncEnv = "SLUICE_DISKSTORE_CRASH_SYNC"
)

const crashDay = 24 * 60 * 60 * 1000

// crashWindows are the windows the child hits; the clock never moves, so
// each stays in its first window for the whole test and the limits hold
// across every run.
var crashWindows = []engine.Window{
	{Key: "w0", Kind: algo.KindFixed, Limit: 250, WindowMs: crashDay},
	{Key: "w1", Kind: algo.KindFixed, Limit: 2500, WindowMs: crashDay},
	{Key: "w2", Kind: algo.KindLog, Limit: 400, WindowMs: crashDay},
}

// opWindow is hit by every replay-safe request; it never fills.
var opWindow = engine.Window{Key: "ow", Kind: algo.KindFixed, Limit: 1 << 30, WindowMs: crashDay}

var crashCounters = []string{"c0", "c1"}

// crashRequest is the replay-safe request of operation id: the same
// commands for every id, so a replay can be rebuilt from the id alone.
func crashRequest(id string) *engine.Request {
	return &engine.Request{OperationID: id, Mode: engine.All, Steps: []engine.Step{
		{Partition: "ops", Commands: []engine.Command{engine.Incr("opn", 1, crashDay), engine.Hit(1, opWindow)}},
		{Partition: "ops2", Commands: []engine.Command{engine.Incr("m", 1, crashDay)}},
	}}
}

// TestCrash kills a process serving batches with SIGKILL at random instants
// and checks, after every restart, that nothing it acknowledged was lost:
// windows still count every admitted hit and never exceed their limits,
// counters hold at least every acknowledged value, and acknowledged
// operation ids replay their recorded results. It runs under each policy
// that promises as much: always, and interval, whose answers wait for
// their writes to the operating system but not for an fsync.
func TestCrash(t *testing.T) {
	if dir := os.Getenv(crashDirEnv); dir != "" {
		crashChild(t, dir, SyncPolicy(os.Getenv(crashSyncEnv)))
		return
	}
	kills := 16
	if testing.Short() {
		kills = 4
	}
	for _, policy := range []SyncPolicy{SyncAlways, SyncOnInterval} {
		t.Run(string(policy), func(t *testing.T) {
			seed := rand.Uint64()
			t.Logf("seed %d", seed)
			rng := rand.New(rand.NewPCG(seed, 0))
			dir := t.TempDir()
			now := t0
			st := newCrashState()
			for run := range kills {
				delay := 20*time.Millisecond + time.Duration(rng.Int64N(int64(280*time.Millisecond)))
				acked := runUntilKilled(t, dir, policy, now, run, delay)
				for _, line := range acked {
					if err := st.ack(line, run); err != nil {
						t.Fatalf("run %d: %v", run, err)
					}
				}
				st.check(t, dir, now, run, rng)
			}
			t.Logf("%d kills; acknowledged: %v admits, counters %v, %d operations", kills, st.admits, st.counters, len(st.ops))
		})
	}
}

// runUntilKilled starts the child, lets it serve for delay after its first
// acknowledgement, kills it with SIGKILL, reaps it, and returns every line
// it acknowledged.
func runUntilKilled(t *testing.T, dir string, policy SyncPolicy, now int64, run int, delay time.Duration) []string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrash$", "-test.count=1")
	cmd.Env = append(os.Environ(),
		crashDirEnv+"="+dir,
		crashSyncEnv+"="+string(policy),
		crashNowEnv+"="+strconv.FormatInt(now, 10),
		crashRunEnv+"="+strconv.Itoa(run),
	)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 1024)
	go readLines(stdout, lines)

	killed := false
	kill := func() {
		if !killed {
			_ = cmd.Process.Signal(syscall.SIGKILL)
			killed = true
		}
	}
	reap := func() error {
		kill()
		for range lines { // let the reader finish before Wait closes the pipe
		}
		return cmd.Wait()
	}

	// The kill comes delay after the first acknowledgement; the deadline
	// only bounds a child that never gets that far.
	deadline := time.NewTimer(time.Minute)
	defer deadline.Stop()
	var timer <-chan time.Time
	var acked []string
	ready, timedOut := false, false
loop:
	for {
		select {
		case line, ok := <-lines:
			switch {
			case !ok:
				break loop
			case strings.HasPrefix(line, "error"):
				_ = reap()
				t.Fatalf("run %d: child: %s", run, line)
			case !ready && line == "ready":
				ready = true
			case !ready:
				_ = reap()
				t.Fatalf("run %d: the child said %q before it was ready", run, line)
			default:
				acked = append(acked, line)
				if len(acked) == 1 {
					timer = time.After(delay)
				}
			}
		case <-timer:
			kill()
			timer = nil
		case <-deadline.C:
			timedOut = true
			kill()
		}
	}
	err = cmd.Wait()
	if timedOut || !ready {
		t.Fatalf("run %d: the child acknowledged %d batches in a minute (ready: %v); it ended with %v: %s", run, len(acked), ready, err, stderr.String())
	}
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("run %d: child ended with %v, want killed by SIGKILL; stderr:\n%s", run, err, stderr.String())
	}
	if status, ok := exit.Sys().(syscall.WaitStatus); !ok || status.Signal() != syscall.SIGKILL {
		t.Fatalf("run %d: child ended with %v, want killed by SIGKILL; stderr:\n%s", run, err, stderr.String())
	}
	return acked
}

// readLines sends every complete line of r; a line cut short by the kill
// was never acknowledged and is dropped.
func readLines(r io.Reader, lines chan<- string) {
	defer close(lines)
	br := bufio.NewReader(r)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return
		}
		lines <- strings.TrimSuffix(line, "\n")
	}
}

// crashState is what the parent knows the children acknowledged.
type crashState struct {
	admits   map[string]int64 // window key → admitted hits, across all runs
	counters map[string]int64 // counter key → highest acknowledged value
	ops      []ackedOp
}

type ackedOp struct {
	id    string
	run   int
	steps string // the acknowledged steps, as JSON
}

func newCrashState() *crashState {
	return &crashState{admits: map[string]int64{}, counters: map[string]int64{}}
}

func (st *crashState) ack(line string, run int) error {
	kind, rest, _ := strings.Cut(line, " ")
	switch kind {
	case "hit":
		key, allowed, _ := strings.Cut(rest, " ")
		if allowed == "1" {
			st.admits[key]++
		}
	case "incr":
		key, v, _ := strings.Cut(rest, " ")
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return fmt.Errorf("line %q: %w", line, err)
		}
		st.counters[key] = max(st.counters[key], n)
	case "op":
		id, steps, _ := strings.Cut(rest, " ")
		var resp []engine.StepResult
		if err := json.Unmarshal([]byte(steps), &resp); err != nil || len(resp) != 2 {
			return fmt.Errorf("line %q: %v", line, err)
		}
		st.admits[opWindow.Key]++
		st.counters["opn"] = max(st.counters["opn"], resp[0].Results[0].Int)
		st.counters["m"] = max(st.counters["m"], resp[1].Results[0].Int)
		st.ops = append(st.ops, ackedOp{id: id, run: run, steps: steps})
	default:
		return fmt.Errorf("unexpected line %q from the child", line)
	}
	return nil
}

// check opens the store the child left behind and verifies everything
// acknowledged so far.
func (st *crashState) check(t *testing.T, dir string, now int64, run int, rng *rand.Rand) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Dir = dir
	cfg.Clock = testclock.At(now)
	s, err := Open(cfg)
	if err != nil {
		t.Fatalf("after kill %d: Open: %v", run, err)
	}
	defer func() {
		if err := s.Close(); err != nil {
			t.Fatalf("after kill %d: Close: %v", run, err)
		}
	}()

	for _, w := range append(crashWindows[:len(crashWindows):len(crashWindows)], opWindow) {
		part := "win"
		if w.Key == opWindow.Key {
			part = "ops"
		}
		spent := windowSpend(t, s, part, w, now)
		if admitted := st.admits[w.Key]; spent < admitted {
			t.Fatalf("after kill %d: window %s counts %d hits, but %d were acknowledged", run, w.Key, spent, admitted)
		}
		if spent > w.Limit || st.admits[w.Key] > w.Limit {
			t.Fatalf("after kill %d: window %s of limit %d holds %d hits, %d acknowledged", run, w.Key, w.Limit, spent, st.admits[w.Key])
		}
	}
	for key, acked := range st.counters {
		part := "ctr"
		switch key {
		case "opn":
			part = "ops"
		case "m":
			part = "ops2"
		}
		got := apply(t, s, part, engine.Get(key)).Results[0]
		n, _ := strconv.ParseInt(got.Value, 10, 64)
		if !got.Found || n < acked {
			t.Fatalf("after kill %d: counter %s = %q, but %d was acknowledged", run, key, got.Value, acked)
		}
	}

	// Replay every operation of the run just killed (the ones most at
	// risk) and a sample of the earlier ones.
	var replay []ackedOp
	for _, op := range st.ops {
		if op.run == run || rng.IntN(20) == 0 {
			replay = append(replay, op)
		}
	}
	eng := engine.New(s)
	for _, op := range replay {
		resp, err := eng.Do(t.Context(), crashRequest(op.id))
		if err != nil {
			t.Fatalf("after kill %d: replaying %s: %v", run, op.id, err)
		}
		for i := range resp.Steps {
			if !resp.Steps[i].Replayed {
				t.Fatalf("after kill %d: operation %s (acknowledged in run %d) ran again instead of replaying", run, op.id, op.run)
			}
			resp.Steps[i].Replayed = false
		}
		got, _ := json.Marshal(resp.Steps)
		if string(got) != op.steps {
			t.Fatalf("after kill %d: operation %s replayed %s, acknowledged %s", run, op.id, got, op.steps)
		}
	}
}

// windowSpend reads how much of window w is spent, from the record on
// disk, without charging it.
func windowSpend(t *testing.T, s *Store, part string, w engine.Window, now int64) int64 {
	t.Helper()
	v, closer, err := s.db.Get(appendRecordKey(nil, part, w.Key))
	if errors.Is(err, pebble.ErrNotFound) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	rec, err := decodeValue(v)
	if err != nil {
		t.Fatal(err)
	}
	state, err := algo.DecodeWindow(w.Kind, rec.Data)
	if err != nil {
		t.Fatal(err)
	}
	switch w.Kind {
	case algo.KindFixed:
		return state.Count
	case algo.KindLog:
		var n int64
		for _, e := range state.Log {
			if e.At > now-w.WindowMs {
				n += e.N
			}
		}
		return n
	}
	t.Fatalf("window kind %s not supported", w.Kind)
	return 0
}

// crashChild is the child process: it serves batches from several
// goroutines and prints one line per result, only once Apply or Do has
// returned it, until it is killed.
func crashChild(t *testing.T, dir string, policy SyncPolicy) {
	now, err := strconv.ParseInt(os.Getenv(crashNowEnv), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	run := os.Getenv(crashRunEnv)
	cfg := DefaultConfig()
	cfg.Dir = dir
	cfg.Clock = testclock.At(now)
	cfg.Sync = policy
	// No periodic fsync under interval: what the answers waited for alone
	// must keep every acknowledged batch through the kill.
	cfg.SyncInterval = time.Hour
	s, err := Open(cfg)
	if err != nil {
		fmt.Printf("error %v\n", err)
		os.Exit(2)
	}
	eng := engine.New(s)
	var mu sync.Mutex
	emit := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		// One write per line: a line is either wholly in the pipe or not.
		if _, err := fmt.Fprintf(os.Stdout, format+"\n", args...); err != nil {
			os.Exit(3)
		}
	}
	fail := func(err error) {
		emit("error %v", err)
		os.Exit(2)
	}
	emit("ready")
	ctx := t.Context()
	for g := range 3 { // window hits
		go func() {
			rng := rand.New(rand.NewPCG(uint64(g), uint64(now)))
			var out engine.StepResult
			for {
				w := crashWindows[rng.IntN(len(crashWindows))]
				if err := eng.Apply(ctx, "win", &out, engine.Hit(1, w)); err != nil {
					fail(err)
				}
				allowed := 0
				if out.Results[0].Allowed {
					allowed = 1
				}
				emit("hit %s %d", w.Key, allowed)
			}
		}()
	}
	for _, key := range crashCounters { // counters
		go func() {
			var out engine.StepResult
			for {
				if err := eng.Apply(ctx, "ctr", &out, engine.Incr(key, 1, crashDay)); err != nil {
					fail(err)
				}
				emit("incr %s %d", key, out.Results[0].Int)
			}
		}()
	}
	for g := range 2 { // replay-safe requests
		go func() {
			for n := 0; ; n++ {
				id := fmt.Sprintf("r%s-g%d-%d", run, g, n)
				resp, err := eng.Do(ctx, crashRequest(id))
				if err != nil {
					fail(err)
				}
				steps, _ := json.Marshal(resp.Steps)
				emit("op %s %s", id, steps)
			}
		}()
	}
	// The parent kills this process; if it never does (the parent died),
	// stop on our own.
	time.Sleep(2 * time.Minute)
	os.Exit(4)
}

// TestPowerLoss takes copies of the store's file system as a power loss
// would leave it (only what was fsynced) while callers apply increments
// with Apply, with ApplyDeferred and Sync, and with joint steps and Sync,
// on few enough resident partitions that they are evicted and reloaded.
// Under always each copy, opened as a store, holds every increment
// acknowledged before it was taken; under interval, every increment
// acknowledged before the last periodic fsync began. A last copy, taken
// after Close, holds every increment acknowledged. TestCrash kills a
// process, which loses nothing the operating system has been handed,
// fsynced or not; this test loses what was not fsynced.
func TestPowerLoss(t *testing.T) {
	for _, policy := range []SyncPolicy{SyncAlways, SyncOnInterval} {
		t.Run(string(policy), func(t *testing.T) { testPowerLoss(t, policy) })
	}
}

func testPowerLoss(t *testing.T, policy SyncPolicy) {
	fs := vfs.NewCrashableMem()
	cfg := DefaultConfig()
	cfg.Dir = "db"
	cfg.FS = fs
	cfg.Clock = testclock.At(t0)
	cfg.MaxResident = 64 // one partition per shard
	cfg.Sync = policy
	cfg.SyncInterval = time.Hour // the test runs the periodic fsync itself
	s := openTest(t, cfg)

	const workers = 6
	var acked [workers]atomic.Int64 // the last value acknowledged on each partition
	// ahead bounds each partition's increments: a copy is taken while
	// writes are in flight, but the callers, which fsyncs do not slow
	// under interval, stay within a few rounds' work of the copies.
	var ahead atomic.Int64
	ahead.Store(64)
	var stop atomic.Bool
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stop.Store(true)
	for w := range workers {
		wg.Go(func() {
			p := fmt.Sprintf("p%d", w)
			incr := []engine.Command{engine.Incr("n", 1, crashDay)}
			for k := 0; !stop.Load(); k++ {
				if acked[w].Load() >= ahead.Load() {
					runtime.Gosched()
					continue
				}
				outs := make([]engine.StepResult, 2)
				var err error
				b := &engine.Batch{Partition: p, Commands: incr}
				switch k % 3 {
				case 0:
					err = s.Apply(t.Context(), b, &outs[0])
				case 1:
					if err = s.ApplyDeferred(t.Context(), b, &outs[0]); err == nil {
						err = s.Sync(t.Context())
					}
				default:
					twin := &engine.Batch{Partition: p + "-twin", Commands: incr}
					if err = s.ApplyJoint(t.Context(), []*engine.Batch{b, twin}, outs); err == nil {
						err = s.Sync(t.Context())
					}
				}
				if err != nil {
					if !stop.Load() || !errors.Is(err, engine.ErrClosed) {
						t.Error(err)
					}
					return
				}
				acked[w].Store(outs[0].Results[0].Int)
			}
		})
	}

	acknowledged := func() (want [workers]int64) {
		for w := range workers {
			want[w] = acked[w].Load()
		}
		return want
	}
	// check opens a copy of the file system as a power loss would leave
	// it and checks that it holds want.
	check := func(copy string, want [workers]int64) {
		t.Helper()
		c := cfg
		c.FS = fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
		copied, err := Open(c)
		if err != nil {
			t.Fatalf("copy %s: %v", copy, err)
		}
		defer copied.Close()
		for w := range workers {
			var out engine.StepResult
			if err := engine.New(copied).Apply(t.Context(), fmt.Sprintf("p%d", w), &out, engine.Get("n")); err != nil {
				t.Fatal(err)
			}
			if got, _ := strconv.ParseInt(out.Results[0].Value, 10, 64); got < want[w] {
				t.Errorf("copy %s: p%d holds %d after a power loss, %d were acknowledged", copy, w, got, want[w])
			}
		}
		if err := copied.Close(); err != nil {
			t.Fatal(err)
		}
	}

	for round := range 12 {
		for acked[round%workers].Load() < int64(round+1)*8 && !t.Failed() {
			runtime.Gosched() // let the callers get ahead of the last copy
		}
		want := acknowledged()
		if policy == SyncOnInterval {
			if err := s.fsyncLogs(); err != nil {
				t.Fatal(err)
			}
		}
		if round%2 == 1 {
			// Half the copies are taken with the journal's first commits
			// written as rows (see journal.go), half with none.
			if err := s.checkpoint(engine.UnixMilli(cfg.Clock)); err != nil {
				t.Fatal(err)
			}
		}
		check(strconv.Itoa(round), want)
		ahead.Store(int64(round+3) * 32)
	}

	stop.Store(true)
	wg.Wait()
	want := acknowledged()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	check("after Close", want)
}
