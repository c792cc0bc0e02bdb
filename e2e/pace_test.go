package e2e

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/pace"
)

// The run of TestPacedCallsEndToEnd, after the seed's own verification: ten
// workers stampede one limiter with ten calls each.
const (
	paceWorkers     = 10
	paceCallsEach   = 10
	paceLimit       = 20
	paceWindow      = 2 * time.Second
	paceConcurrency = 5
	// paceWork is the upstream's latency: the work whose overlap the
	// concurrency cap bounds. Five calls of it at a time could start 16
	// a second, more than the limit's 10: both bind.
	paceWork = 300 * time.Millisecond
	// The upstream answers its paceRateLimitAt-th request 429 with
	// Retry-After: pacePenalty seconds, and the server is killed and
	// started again when the upstream receives its paceRestartAt-th.
	paceRateLimitAt = 10
	pacePenalty     = 2
	paceRestartAt   = 50
)

// paceWorkerEnv makes the test binary a worker of TestPacedCallsEndToEnd
// instead of running tests (see TestMain): it holds the worker's paceJob,
// as JSON. The worker reaches the server with the client package's
// SLUICE_* variables.
const paceWorkerEnv = "SLUICE_E2E_PACE_WORKER"

// paceJob is one worker's work.
type paceJob struct {
	Worker   int    `json:"worker"`
	Calls    int    `json:"calls"`
	Limiter  string `json:"limiter"`
	Upstream string `json:"upstream"`
	Out      string `json:"out"` // the file the worker writes its []paceCall to
}

// paceCall is what a worker records of one call. Instants are Unix
// nanoseconds by the wall clock the workers and the server share.
type paceCall struct {
	Worker    int           `json:"worker"`
	Call      int           `json:"call"`
	Requested int64         `json:"requested"` // pace.Call was called
	Done      int64         `json:"done"`      // it returned
	Attempts  []paceAttempt `json:"attempts"`
	Drops     int           `json:"drops"`
	Err       string        `json:"err,omitempty"`
}

// paceAttempt is one run of a call's fn.
type paceAttempt struct {
	Slot   int64 `json:"slot"`  // the slot it was admitted at, by the store's clock
	Start  int64 `json:"start"` // fn started
	End    int64 `json:"end"`   // fn returned
	Status int   `json:"status"`
}

// paceWorker runs the job in spec: it says "ready" on stdout, waits for a
// line on stdin, makes its calls at once and writes what it saw to the
// job's file. It returns the process's exit status.
func paceWorker(spec string) int {
	var job paceJob
	if err := json.Unmarshal([]byte(spec), &job); err != nil {
		fmt.Fprintln(os.Stderr, "pace worker:", err)
		return 2
	}
	cfg, err := client.ConfigFromEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, "pace worker:", err)
		return 2
	}
	c := client.New(cfg)
	defer c.Close()
	api := pace.Define(job.Limiter).Bind(pace.NewRegistry(c))
	upstream := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: job.Calls}}

	fmt.Println("ready")
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		fmt.Fprintln(os.Stderr, "pace worker: waiting for the start:", err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	calls := make([]paceCall, job.Calls)
	var wg sync.WaitGroup
	for i := range calls {
		wg.Go(func() {
			rec := &calls[i]
			rec.Worker, rec.Call = job.Worker, i
			var slot time.Time
			rec.Requested = time.Now().UnixNano()
			_, err := pace.Call(ctx, api, func(ctx context.Context) (*http.Response, error) {
				at := paceAttempt{Slot: slot.UnixMilli(), Start: time.Now().UnixNano()}
				url := fmt.Sprintf("%s/?worker=%d&call=%d&attempt=%d", job.Upstream, job.Worker, i, len(rec.Attempts)+1)
				req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
				if err != nil {
					return nil, err
				}
				resp, err := upstream.Do(req)
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
					at.Status = resp.StatusCode
				}
				at.End = time.Now().UnixNano()
				rec.Attempts = append(rec.Attempts, at)
				return resp, err
			},
				pace.WithOnStart(func(s pace.Start) { slot = s.Slot }),
				pace.WithOnDrop(func(pace.Drop) { rec.Drops++ }))
			rec.Done = time.Now().UnixNano()
			if err != nil {
				rec.Err = err.Error()
			}
		})
	}
	wg.Wait()
	out, err := json.Marshal(calls)
	if err == nil {
		err = os.WriteFile(job.Out, out, 0o600)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "pace worker:", err)
		return 1
	}
	return 0
}

// paceWorkerProc is a running worker.
type paceWorkerProc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr *logSink
	out    string
	exited chan struct{} // closed when the process has ended
	err    error         // how it ended, once exited is closed
}

// startPaceWorker starts worker i of a run against s and waits until it
// is ready.
func startPaceWorker(t *testing.T, s *server, pepper, limiter, upstream string, i int) *paceWorkerProc {
	t.Helper()
	out := filepath.Join(t.TempDir(), fmt.Sprintf("worker-%d.json", i))
	spec, err := json.Marshal(paceJob{Worker: i, Calls: paceCallsEach, Limiter: limiter, Upstream: upstream, Out: out})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(cleanEnv(),
		paceWorkerEnv+"="+string(spec),
		client.EnvURL+"="+s.URL,
		client.EnvSecret+"="+s.secret(),
		client.EnvPepper+"="+pepper,
		client.EnvTimeoutMs+"=2000",
	)
	w := &paceWorkerProc{cmd: cmd, stderr: &logSink{}, out: out, exited: make(chan struct{})}
	cmd.Stderr = w.stderr
	if w.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting pace worker %d: %v", i, err)
	}
	t.Cleanup(func() {
		select {
		case <-w.exited:
		default:
			_ = cmd.Process.Kill() // by its PID: we started it
			<-w.exited
		}
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if strings.TrimSpace(line) != "ready" {
		t.Fatalf("pace worker %d said %q (%v), want ready:\n%s", i, line, err, w.stderr)
	}
	go func() {
		_, _ = io.Copy(io.Discard, stdout)
		w.err = cmd.Wait()
		close(w.exited)
	}()
	return w
}

// TestPacedCallsEndToEnd runs the seed's verification against a real
// server: ten worker processes stampede one limiter (20 calls per 2 s, 5
// at a time) with ten calls each, calling an upstream that answers one of
// them 429, while the server is killed and started again in the middle of
// the run. Every call completes, none is dropped; no rolling window of the
// slots the server granted, nor of the starts the upstream sees, holds more
// than the limit, and no call starts before its slot; exactly five calls' work overlaps at the peak; the 429
// pauses every worker; and a mistyped limiter name fails at once.
//
// With -v it logs the run's figures: the drop rate and the distribution of
// waits, recorded in docs/benchmarks.md.
func TestPacedCallsEndToEnd(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverOptions{})
	pepper := readCredential(t, s.DataDir(), "pepper")
	cfg := client.DefaultConfig()
	cfg.URL, cfg.Secret, cfg.Pepper, cfg.Timeout = s.URL, s.secret(), pepper, client.MaxTimeout
	c := client.New(cfg)
	defer c.Close()
	reg := pace.NewRegistry(c)
	ctx := t.Context()

	const name = "e2e-upstream"
	lc := pace.DefaultConfig()
	lc.Limit, lc.Window, lc.Concurrency, lc.LeaseTTL = paceLimit, paceWindow, paceConcurrency, 10*time.Second
	if err := reg.Configure(ctx, name, lc); err != nil {
		t.Fatal(err)
	}

	// A mistyped name is not a second limiter: it fails at once.
	ran := false
	if _, err := pace.Call(ctx, pace.Define(name+"s").Bind(reg), func(context.Context) (int, error) {
		ran = true
		return 0, nil
	}); !errors.Is(err, pace.ErrNoSuchLimiter) || ran {
		t.Fatalf("a mistyped name: %v (fn ran: %v), want ErrNoSuchLimiter without running", err, ran)
	}

	// The upstream holds its first requests until the cap's worth of them
	// are in flight at once (a failure bound aside), so the run shows that
	// the limiter lets that many through, however slow the machine.
	var requests atomic.Int64
	rateLimited, restart, full := make(chan struct{}), make(chan struct{}), make(chan struct{})
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch n := requests.Add(1); {
		case n < paceConcurrency:
			select {
			case <-full:
			case <-time.After(startTimeout):
			}
		case n == paceConcurrency:
			close(full)
		case n == paceRateLimitAt:
			w.Header().Set("Retry-After", strconv.Itoa(pacePenalty))
			w.WriteHeader(http.StatusTooManyRequests)
			close(rateLimited)
			return
		case n == paceRestartAt:
			close(restart)
		}
		time.Sleep(paceWork) // the upstream working: the load, not a synchronisation
	}))
	defer upstream.Close()

	workers := make([]*paceWorkerProc, paceWorkers)
	for i := range workers {
		workers[i] = startPaceWorker(t, s, pepper, name, upstream.URL, i)
	}
	// The penalty's deadline, as the server holds it: read while it is in
	// force, from the moment the 429 has been answered.
	penalty := make(chan time.Time, 1)
	go func() {
		defer close(penalty)
		select {
		case <-rateLimited:
		case <-ctx.Done():
			return
		}
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for range 3 * pacePenalty * 200 { // a failure bound, not a claim
			if st, err := reg.Stats(ctx, name); err == nil && !st.PenaltyUntil.IsZero() {
				penalty <- st.PenaltyUntil
				return
			}
			<-tick.C
		}
	}()
	for _, w := range workers {
		if _, err := io.WriteString(w.stdin, "go\n"); err != nil {
			t.Fatal(err)
		}
	}

	// Kill the server in the middle of the run and start it again on the
	// same data and address, while calls wait in the gate's queue, hold
	// leases, sleep on their slots and run.
	allDone := make(chan struct{})
	go func() {
		for _, w := range workers {
			<-w.exited
		}
		close(allDone)
	}()
	select {
	case <-restart:
	case <-allDone:
		for i, w := range workers {
			t.Logf("pace worker %d: %v:\n%s", i, w.err, w.stderr)
		}
		t.Fatalf("the workers finished before the upstream's request %d", paceRestartAt)
	}
	killed := time.Now()
	s.kill()
	s.opts.Env = append(s.opts.Env, "SLUICE_ADDR="+s.Addr)
	s.start()
	outage := time.Since(killed)

	var calls []paceCall
	<-allDone
	for i, w := range workers {
		if w.err != nil {
			t.Fatalf("pace worker %d: %v:\n%s", i, w.err, w.stderr)
		}
		data, err := os.ReadFile(w.out)
		if err != nil {
			t.Fatal(err)
		}
		var cs []paceCall
		if err := json.Unmarshal(data, &cs); err != nil {
			t.Fatal(err)
		}
		calls = append(calls, cs...)
	}
	until, ok := <-penalty
	if !ok {
		t.Fatal("the server never held the penalty of the 429")
	}
	checkPacedRun(t, calls, until)

	f := summarise(calls)
	t.Logf("%d calls, %d attempts, %d dropped (%.1f %%); server down %v", len(calls), f.attempts, f.dropped, 100*float64(f.dropped)/float64(len(calls)), outage.Round(time.Millisecond))
	t.Logf("wait from the call to its first start: p50 %v, p90 %v, max %v", f.wait[0], f.wait[1], f.wait[2])
	t.Logf("start after the slot: p50 %v, p90 %v, max %v; most starts in a rolling %v: %d (slots: %d, limit %d); peak concurrency %d",
		f.late[0], f.late[1], f.late[2], paceWindow, f.mostStarts, f.mostSlots, paceLimit, peakOverlap(calls))
}

// checkPacedRun checks the records of every call of the run.
func checkPacedRun(t *testing.T, calls []paceCall, penaltyUntil time.Time) {
	t.Helper()
	if len(calls) != paceWorkers*paceCallsEach {
		t.Fatalf("%d calls recorded, want %d", len(calls), paceWorkers*paceCallsEach)
	}
	var attempts []paceAttempt
	limited := 0
	for _, c := range calls {
		if c.Err != "" || c.Drops != 0 || len(c.Attempts) == 0 {
			t.Errorf("worker %d call %d: %d attempts, %d drops, error %q; want it done without a drop", c.Worker, c.Call, len(c.Attempts), c.Drops, c.Err)
		}
		for _, a := range c.Attempts {
			if a.Status == http.StatusTooManyRequests {
				limited++
			}
			// The store's clock and the workers' are the machine's: a slot
			// is the whole millisecond in which the server granted it.
			if a.Start < a.Slot*int64(time.Millisecond) {
				t.Errorf("worker %d call %d started %v before its slot", c.Worker, c.Call, time.Duration(a.Slot*int64(time.Millisecond)-a.Start))
			}
			attempts = append(attempts, a)
		}
	}
	if limited != 1 || len(attempts) != len(calls)+1 {
		t.Errorf("%d attempts, %d of them rate limited; want one 429, retried once", len(attempts), limited)
	}

	// No rolling window of the slots the server granted holds more than
	// the limit, nor any rolling window of the starts the upstream sees:
	// starts follow their slots by the delivery of the grant, which
	// varies, and the start tolerance (the default, 100 ms) keeps them
	// within it.
	slots := make([]int64, len(attempts))
	starts := make([]int64, len(attempts))
	for i, a := range attempts {
		slots[i] = a.Slot * int64(time.Millisecond)
		starts[i] = a.Start
	}
	if n := mostInWindow(slots, paceWindow); n > paceLimit {
		t.Errorf("a rolling window of %v holds %d slots, limit %d", paceWindow, n, paceLimit)
	}
	if n := mostInWindow(starts, paceWindow); n > paceLimit {
		t.Errorf("a rolling window of %v holds %d starts, limit %d", paceWindow, n, paceLimit)
	}

	if got := peakOverlap(calls); got != paceConcurrency {
		t.Errorf("at most %d calls' work overlapped, want exactly the cap of %d", got, paceConcurrency)
	}

	// The 429 paused every worker: no attempt admitted after the penalty
	// was recorded — every slot from then on — started before its
	// deadline, and every worker had calls that waited for it.
	recorded := penaltyUntil.Add(-pacePenalty * time.Second).UnixMilli()
	after := map[int]bool{}
	for _, c := range calls {
		for _, a := range c.Attempts {
			if a.Slot >= recorded && a.Slot < penaltyUntil.UnixMilli() {
				t.Errorf("worker %d call %d was admitted at %v, inside the penalty (%v to %v)", c.Worker, c.Call,
					time.UnixMilli(a.Slot).Format(time.StampMilli), time.UnixMilli(recorded).Format(time.StampMilli), penaltyUntil.Format(time.StampMilli))
			}
			if a.Slot >= penaltyUntil.UnixMilli() {
				after[c.Worker] = true
			}
		}
	}
	if len(after) != paceWorkers {
		t.Errorf("%d workers ran after the penalty, want all %d: the test did not pause them all", len(after), paceWorkers)
	}
}

// peakOverlap returns the most calls whose fn ran at one instant.
func peakOverlap(calls []paceCall) int {
	type edge struct {
		at    int64
		delta int
	}
	var edges []edge
	for _, c := range calls {
		for _, a := range c.Attempts {
			edges = append(edges, edge{a.Start, 1}, edge{a.End, -1})
		}
	}
	// An end sorts before a start at the same instant: touching is not
	// overlapping.
	slices.SortFunc(edges, func(x, y edge) int {
		return cmp.Or(cmp.Compare(x.at, y.at), cmp.Compare(x.delta, y.delta))
	})
	n, peak := 0, 0
	for _, e := range edges {
		n += e.delta
		peak = max(peak, n)
	}
	return peak
}

// pacedFigures are the figures of a run.
type pacedFigures struct {
	attempts, dropped     int
	wait                  [3]time.Duration // p50, p90, max from the call to its first start
	late                  [3]time.Duration // p50, p90, max from an attempt's slot to its start
	mostStarts, mostSlots int              // the most starts, and slots, in a rolling window
}

func summarise(calls []paceCall) pacedFigures {
	var f pacedFigures
	var waits, late []time.Duration
	var starts, slots []int64
	for _, c := range calls {
		f.attempts += len(c.Attempts)
		f.dropped += c.Drops
		if len(c.Attempts) > 0 {
			waits = append(waits, time.Duration(c.Attempts[0].Start-c.Requested))
		}
		for _, a := range c.Attempts {
			slot := a.Slot * int64(time.Millisecond)
			late = append(late, time.Duration(a.Start-slot))
			starts, slots = append(starts, a.Start), append(slots, slot)
		}
	}
	f.wait, f.late = quantiles(waits), quantiles(late)
	f.mostStarts, f.mostSlots = mostInWindow(starts, paceWindow), mostInWindow(slots, paceWindow)
	return f
}

// quantiles returns the median, the 90th percentile and the largest of ds,
// to the millisecond.
func quantiles(ds []time.Duration) [3]time.Duration {
	if len(ds) == 0 {
		return [3]time.Duration{}
	}
	slices.Sort(ds)
	q := func(p float64) time.Duration { return ds[int(p*float64(len(ds)-1))].Round(time.Millisecond) }
	return [3]time.Duration{q(0.5), q(0.9), q(1)}
}

// mostInWindow returns the most instants (Unix nanoseconds) in any
// half-open window [x, x+w).
func mostInWindow(at []int64, w time.Duration) int {
	slices.Sort(at)
	most := 0
	for i, x := range at {
		j, _ := slices.BinarySearch(at, x+int64(w))
		most = max(most, j-i)
	}
	return most
}
