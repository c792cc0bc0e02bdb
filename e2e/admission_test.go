package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/wire"
)

// fairArgs configure a server whose one family, default, has 2,000
// commands a day and charges every RPC to a source bucket: a source bucket
// or a principal may spend 100 (1/20), an IPv6 /56 200 (1/10), an IPv6 /48
// or an IPv4 /24 400 (1/5).
var fairArgs = []string{"--daily-budget", "2000", "--fair-families", admission.DefaultFamily}

const (
	sourceShare = 100
	slash48     = 400
)

// hitResult is what one sluice hit --count process reported.
type hitResult struct {
	admitted, refused int
	first             wire.Code // the first refusal's code
	out, errOut       string
	status            int
}

var (
	admittedRE = regexp.MustCompile(`(?m)^admitted\s+(\d+)$`)
	refusedRE  = regexp.MustCompile(`(?m)^refused\s+(\d+)(?: \(first: (\S+)\))?$`)
)

// cliRun is a sluice command-line process running concurrently with others.
type cliRun struct {
	cmd       *exec.Cmd
	out, errb bytes.Buffer
}

// startCLI starts sluice with args against s, without waiting for it.
func (s *server) startCLI(t *testing.T, args ...string) *cliRun {
	t.Helper()
	r := &cliRun{cmd: exec.Command(sluiceBin, append(args, "--url", s.URL)...)}
	r.cmd.Dir, r.cmd.Env = s.opts.Dir, cleanEnv()
	r.cmd.Stdout, r.cmd.Stderr = &r.out, &r.errb
	if err := r.cmd.Start(); err != nil {
		t.Fatalf("starting sluice %s: %v", strings.Join(args, " "), err)
	}
	return r
}

// hits waits for a sluice hit --count process and parses its report.
func (r *cliRun) hits(t *testing.T) hitResult {
	t.Helper()
	_ = r.cmd.Wait()
	res := hitResult{out: r.out.String(), errOut: r.errb.String(), status: r.cmd.ProcessState.ExitCode()}
	a, rf := admittedRE.FindStringSubmatch(res.out), refusedRE.FindStringSubmatch(res.out)
	if a == nil || rf == nil || res.status == 1 {
		t.Fatalf("sluice %s: status %d, %q %q", strings.Join(r.cmd.Args[1:], " "), res.status, res.out, res.errOut)
	}
	res.admitted, _ = strconv.Atoi(a[1])
	res.refused, _ = strconv.Atoi(rf[1])
	res.first = wire.Code(rf[2])
	return res
}

// hitArgs returns the arguments of n hits of a window that never denies,
// on a partition of their own, with extra identity flags.
func hitArgs(t *testing.T, n int, extra ...string) []string {
	return append([]string{"hit", "--partition", unique(t, "hit"), "--limit", "100000", "--window", "1h", "--count", strconv.Itoa(n)}, extra...)
}

// hitAll runs one sluice hit process per argument list, all at once, and
// returns their reports in order.
func (s *server) hitAll(t *testing.T, argLists ...[]string) []hitResult {
	t.Helper()
	runs := make([]*cliRun, len(argLists))
	for i, args := range argLists {
		runs[i] = s.startCLI(t, args...)
	}
	out := make([]hitResult, len(runs))
	for i, r := range runs {
		out[i] = r.hits(t)
	}
	return out
}

func totalAdmitted(rs []hitResult) int {
	n := 0
	for _, r := range rs {
		n += r.admitted
	}
	return n
}

// controlState is the body of GET /control/state (server.ControlState).
type controlState struct {
	Stopped  bool                    `json:"stopped"`
	Families []admission.FamilyState `json:"families"`
}

// controlState reads GET /control/state.
func (s *server) controlState(t testing.TB) controlState {
	t.Helper()
	a := s.operator(t, http.MethodGet, wire.PathState, s.operatorToken(), "")
	if a.Status != http.StatusOK {
		t.Fatalf("state: %d %s", a.Status, a.Body)
	}
	var st controlState
	if err := json.Unmarshal(a.Body, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// family returns one family's state.
func (s *server) family(t testing.TB, name string) admission.FamilyState {
	t.Helper()
	for _, f := range s.controlState(t).Families {
		if f.Family == name {
			return f
		}
	}
	t.Fatalf("no family %q in the state", name)
	return admission.FamilyState{}
}

// spent returns the commands a family has admitted today: what the server
// leased from the durable allowance less what it still holds unspent.
func (s *server) spent(t testing.TB, family string) int64 {
	t.Helper()
	f := s.family(t, family)
	return f.Used - f.LeasedLeft
}

// TestTwoProcessesShareOneSlash64 runs two sluice hit processes from two
// addresses of one IPv6 /64: between them they are admitted exactly the
// source's share, and so is the family.
func TestTwoProcessesShareOneSlash64(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverOptions{Args: fairArgs})
	rs := s.hitAll(t,
		hitArgs(t, 80, "--source", "2001:db8:7:1::a"),
		hitArgs(t, 80, "--source", "2001:DB8:7:1:ffff:ffff:ffff:fffe"),
	)
	if got := totalAdmitted(rs); got != sourceShare {
		t.Fatalf("two processes on one /64 were admitted %d, want the source share %d:\n%+v", got, sourceShare, rs)
	}
	for _, r := range rs {
		if r.refused > 0 && r.first != wire.CodeLimited {
			t.Errorf("refusal %s, want %s", r.first, wire.CodeLimited)
		}
	}
	if got := s.spent(t, admission.DefaultFamily); got != sourceShare {
		t.Errorf("the family spent %d, want %d", got, sourceShare)
	}
}

// TestPrincipalQuotaHoldsAcrossSources runs one principal from three
// sources in three processes: together they get the principal's share.
func TestPrincipalQuotaHoldsAcrossSources(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverOptions{Args: fairArgs})
	rs := s.hitAll(t,
		hitArgs(t, 50, "--principal", "user:42", "--source", "198.51.100.1"),
		hitArgs(t, 50, "--principal", "user:42", "--source", "203.0.113.1"),
		hitArgs(t, 50, "--principal", "user:42", "--source", "2001:db8:9::1"),
	)
	if got := totalAdmitted(rs); got != sourceShare {
		t.Fatalf("one principal over three sources was admitted %d, want the principal share %d:\n%+v", got, sourceShare, rs)
	}
	if got := s.spent(t, admission.DefaultFamily); got != sourceShare {
		t.Errorf("the family spent %d, want %d", got, sourceShare)
	}
}

// TestSlash48TierCapsItsSlash64s sends from 256 distinct /64s of one /48
// (64 in each of four /56s), four RPCs each. Without the /48 tier the /56s
// would admit 4 × 200 = 800; the /48 admits its 400. For speed this test
// runs the Go client in the test process rather than 256 processes; the
// client hashes the source and its tiers exactly as sluice hit does.
func TestSlash48TierCapsItsSlash64s(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverOptions{Args: fairArgs})
	cfg := client.DefaultConfig()
	cfg.URL, cfg.Secret, cfg.Pepper, cfg.Timeout = s.URL, s.secret(), readCredential(t, s.DataDir(), "pepper"), client.MaxTimeout
	c := client.New(cfg)
	defer c.Close()
	if err := c.Err(); err != nil {
		t.Fatal(err)
	}
	type job struct{ addr string }
	jobs := make(chan job)
	var admitted, limited atomic.Int64
	var mu sync.Mutex
	var failures []error
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for j := range jobs {
				eng := engine.New(c.WithFairness(j.addr, ""))
				_, err := eng.Do(context.Background(), &engine.Request{Steps: []engine.Step{{Partition: "tiers", Commands: []engine.Command{engine.Get("k")}}}})
				var werr *wire.Error
				switch {
				case err == nil:
					admitted.Add(1)
				case errors.As(err, &werr) && werr.Code == wire.CodeLimited:
					limited.Add(1)
				default:
					mu.Lock()
					failures = append(failures, err)
					mu.Unlock()
				}
			}
		})
	}
	for round := range 4 {
		for slash56 := range 4 {
			for n := range 64 {
				jobs <- job{fmt.Sprintf("2001:db8:48:%02x%02x::%x", slash56, n, round+1)}
			}
		}
	}
	close(jobs)
	wg.Wait()
	if len(failures) > 0 {
		t.Fatalf("%d RPCs failed, first: %v", len(failures), failures[0])
	}
	if got := admitted.Load(); got != slash48 {
		t.Fatalf("256 /64s of one /48 were admitted %d (limited %d), want the /48 share %d", got, limited.Load(), slash48)
	}
	if got := s.spent(t, admission.DefaultFamily); got != slash48 {
		t.Errorf("the family spent %d, want %d", got, slash48)
	}
}

// TestUnknownBucketIsShared runs six processes whose sources are missing,
// empty, "unknown", unspecified or unparsable: they share one bucket, so
// together they get one source share. Any one of them in a bucket of its
// own would have been admitted all of its 25 and pushed the total over.
func TestUnknownBucketIsShared(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverOptions{Args: fairArgs})
	rs := s.hitAll(t,
		hitArgs(t, 25), // no source at all: a fair family charges unknown
		hitArgs(t, 25, "--source", ""),
		hitArgs(t, 25, "--source", "unknown"),
		hitArgs(t, 25, "--source", "0.0.0.0"),
		hitArgs(t, 25, "--source", "::"),
		hitArgs(t, 25, "--source", "not-an-address"),
	)
	if got := totalAdmitted(rs); got != sourceShare {
		t.Fatalf("the unknown sources were admitted %d, want one shared share of %d:\n%+v", got, sourceShare, rs)
	}
}

// TestFairnessDenialSpendsNothingAndReachesNoSubject exhausts a principal,
// then sends it from a fresh source with a kv.incr on a fresh key: 429
// guard_limited, no family allowance spent, and the key was never written.
func TestFairnessDenialSpendsNothingAndReachesNoSubject(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverOptions{Args: fairArgs})
	fairnessDenialSpendsNothing(t, []*server{s}, func() int64 { return s.spent(t, admission.DefaultFamily) })
}

// fairnessDenialSpendsNothing exhausts a principal, then sends it from a
// fresh source with a kv.incr on a fresh key, taking the servers in turn:
// 429 guard_limited, no family allowance spent (spent reads what the
// servers have spent between them), and the key was never written. The
// fresh source was charged nothing either: it is then admitted its whole
// share, and no more.
func fairnessDenialSpendsNothing(t *testing.T, servers []*server, spent func() int64) {
	t.Helper()
	p := unique(t, "denial")
	on := func(i int) *server { return servers[i%len(servers)] }
	// The server charges whatever hashed identities it is sent.
	identified := func(source, principal string, cmds ...engine.Command) wire.Request {
		r := request(step(p, cmds...))
		r.Source, r.Principal = source, principal
		return r
	}
	for i := range sourceShare {
		on(i).do(t, identified("src-1", "principal-1", engine.Incr(fmt.Sprint("spent-", i), 1, hour)))
	}
	before := spent()
	for i := range 10 {
		a := on(i).call(t, identified("src-2", "principal-1", engine.Incr(fmt.Sprint("fresh-", i), 1, hour)))
		pr := a.problem(t, wire.CodeLimited)
		if a.Status != http.StatusTooManyRequests || !strings.Contains(pr.Reason, "principal quota") {
			t.Fatalf("denial %d: %d %q", i, a.Status, pr.Reason)
		}
	}
	if after := spent(); after != before {
		t.Errorf("ten fairness denials spent %d of the family allowance", after-before)
	}
	for i := range 10 {
		on(i).mustBeAbsent(t, p, fmt.Sprint("fresh-", i))
	}
	// src-2 was charged nothing for the denials: it still has its share.
	for i := range sourceShare {
		on(i).do(t, identified("src-2", fmt.Sprint("principal-", i+2), engine.Get("k")))
	}
	on(0).call(t, identified("src-2", "principal-x", engine.Get("k"))).problem(t, wire.CodeLimited)
}

// TestInvalidAdmissionSettingAnswers503 starts servers with one malformed
// admission setting each: none exits; each logs the reason once and
// answers every RPC and operator call 503 guard_unavailable with it.
func TestInvalidAdmissionSettingAnswers503(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		env    []string
		reason string
	}{
		{"budget not a number", []string{"SLUICE_DAILY_BUDGET=lots"}, `daily budget (--daily-budget) "lots"`},
		{"negative budget", []string{"SLUICE_DAILY_BUDGET=-1"}, "daily budget"},
		{"unknown family", []string{"SLUICE_FAMILY_BUDGETS=offline=5"}, `unknown family "offline"`},
		{"duplicate family", []string{"SLUICE_FAMILIES=replay,offline,replay"}, `family "replay" listed twice`},
		{"bad family budget", []string{"SLUICE_FAMILIES=replay", "SLUICE_FAMILY_BUDGETS=replay=1e5"}, "not a non-negative integer"},
		{"parts above the total", []string{"SLUICE_DAILY_BUDGET=1000", "SLUICE_FAMILY_BUDGETS=default=1001"}, "above the daily total"},
		{"bad share", []string{"SLUICE_SHARES=source=0"}, "at least 1"},
		{"bad family share", []string{"SLUICE_FAMILY_SHARES=default.ip=10"}, "unknown share axis"},
		{"unknown fair family", []string{"SLUICE_FAIR_FAMILIES=replay"}, `fair family "replay" is not a configured family`},
		{"bad chunk", []string{"SLUICE_ADMISSION_CHUNK=0"}, "admission chunk"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := startServer(t, serverOptions{Env: append(tc.env, "SLUICE_STORE=memory"), Misconfigured: true})
			check := func(what string, a answer) {
				t.Helper()
				p := a.problem(t, wire.CodeUnavailable)
				if !strings.Contains(p.Reason, tc.reason) {
					t.Errorf("%s: reason %q, want it to mention %q", what, p.Reason, tc.reason)
				}
			}
			key := unique(t, "probe")
			check("incr", s.call(t, request(step("cfg", engine.Incr(key, 1, hour)))))
			check("read", s.call(t, request(step("cfg", engine.Get(key)))))
			other := request(step("cfg", engine.Get(key)))
			other.Family = "replay"
			check("another family", s.call(t, other))
			check("state", s.operator(t, http.MethodGet, wire.PathState, s.operatorToken(), ""))
			check("family stop", s.operator(t, http.MethodPost, wire.PathStop, s.operatorToken(), `{"family":"default"}`))
			req, _ := http.NewRequest(http.MethodGet, s.URL+wire.PathReadyz, nil)
			check("readyz", send(t, req))
			if _, errOut, status := s.cli(t, "ping"); status != 1 || !strings.Contains(errOut, "guard_unavailable") {
				t.Errorf("ping of a misconfigured server: status %d, %q", status, errOut)
			}
			if n := strings.Count(s.logs.String(), "refusing every RPC"); n != 1 {
				t.Errorf("the reason was logged %d times, want once:\n%s", n, s.logs)
			}
		})
	}
}

// TestFamilyBudgetStopSurvivesRestart exhausts one family's budget: it is
// stopped (and warned about at 80 % once), another family is not, the stop
// holds across a restart, and an operator resume gives it a fresh
// allowance. That the stop clears at the next UTC day is shown with a
// controlled clock by admission's TestBudgetStopPersistsAcrossRestartAndClearsAtRollover
// (and TestBurstAcrossMidnightAdmitsAtMostTwoAllowances for a burst across
// midnight).
func TestFamilyBudgetStopSurvivesRestart(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverOptions{Args: []string{"--families", "a,b", "--daily-budget", "100", "--family-budgets", "a=40", "--admission-chunk", "8"}})
	r := s.hitAll(t, hitArgs(t, 45, "--family", "a"))[0]
	if r.admitted != 40 || r.refused != 5 || r.first != wire.CodeStopped {
		t.Fatalf("family a: %+v, want 40 admitted then guard_stopped", r)
	}
	if _, ok := s.logs.waitFor(0, s.exited, func(l logRecord) bool {
		return l["msg"] == "daily operation budget exhausted" && l["family"] == "a"
	}); !ok {
		t.Error("no exhaustion error in the logs")
	}
	if n := strings.Count(s.logs.String(), `"msg":"daily operation budget at threshold"`); n != 1 {
		t.Errorf("the 80 %% warning was logged %d times, want once", n)
	}
	if r := s.hitAll(t, hitArgs(t, 10, "--family", "b"))[0]; r.admitted != 10 {
		t.Errorf("family b after a's exhaustion: %+v", r)
	}

	check := func(when string) {
		t.Helper()
		a := request(step(unique(t, "stopped"), engine.Incr("n", 1, hour)))
		a.Family = "a"
		if pr := s.call(t, a).problem(t, wire.CodeStopped); !strings.Contains(pr.Reason, "daily operation budget exhausted") {
			t.Errorf("%s: reason %q", when, pr.Reason)
		}
		f := s.family(t, "a")
		if !f.Stopped || f.OperatorStop || f.Used != 40 || f.Allowance != 40 {
			t.Errorf("%s: state of a %+v, want a budget stop at 40 of 40", when, f)
		}
		b := request(step(unique(t, "b"), engine.Incr("n", 1, hour)))
		b.Family = "b"
		s.do(t, b)
	}
	check("before the restart")
	s.restart()
	check("after the restart")

	out, errOut, status := s.cli(t, "control", "resume", "--family", "a", "--reason", "raised the budget")
	if status != 0 || strings.Contains(out, "stopped") {
		t.Fatalf("resume: status %d, %q %q", status, out, errOut)
	}
	if r := s.hitAll(t, hitArgs(t, 45, "--family", "a"))[0]; r.admitted != 40 || r.first != wire.CodeStopped {
		t.Errorf("after the resume: %+v, want a fresh 40", r)
	}
}

// TestStopWhileRPCsAreInFlight keeps 1,000 kv.incr RPCs in flight, from
// 1,000 senders on a connection each, every RPC on a key of its own, and
// stops the server once 300 have been answered. Each sender goes on until
// it has sent one RPC after the stop was acknowledged: every such RPC
// answers 503 guard_stopped. After a resume, each key holds 1 exactly when
// its RPC answered 200, so no refused RPC — in flight at the stop or sent
// after it — had any effect.
func TestStopWhileRPCsAreInFlight(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverOptions{})
	const senders = 1000
	p := unique(t, "inflight")
	partition := func(sender int) string { return fmt.Sprintf("%s-%d", p, sender%16) }
	key := func(sender, n int) string { return fmt.Sprintf("k%d-%d", sender, n) }
	secret := s.secret()

	type outcome struct {
		afterAck bool
		status   int
		code     wire.Code
		err      error
	}
	outcomes := make([][]outcome, senders) // by sender, in the order sent
	var acked atomic.Bool
	var answered atomic.Int64
	ready, start := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	for i := range senders {
		wg.Go(func() {
			<-start
			for n := 0; ; n++ {
				var o outcome
				o.afterAck, o.status, o.code, o.err = sendIncr(s.URL, secret, partition(i), key(i, n), &acked)
				outcomes[i] = append(outcomes[i], o)
				if answered.Add(1) == 300 {
					close(ready)
				}
				if o.afterAck || o.err != nil {
					return
				}
			}
		})
	}
	close(start)
	<-ready
	if a := s.operator(t, http.MethodPost, wire.PathStop, s.operatorToken(), `{"reason":"in-flight drill"}`); a.Status != http.StatusOK {
		t.Fatalf("stop: %d %s", a.Status, a.Body)
	}
	acked.Store(true)
	wg.Wait()

	var ok, refusedInFlight, afterAck int
	for i, rpcs := range outcomes {
		for n, o := range rpcs {
			switch {
			case o.err != nil:
				t.Fatalf("sender %d, rpc %d: %v", i, n, o.err)
			case o.status == http.StatusOK:
				ok++
				if o.afterAck {
					t.Errorf("sender %d, rpc %d was sent after the stop was acknowledged and admitted", i, n)
				}
			case o.code != wire.CodeStopped:
				t.Fatalf("sender %d, rpc %d answered %d %s", i, n, o.status, o.code)
			case o.afterAck:
				afterAck++
			default:
				refusedInFlight++
			}
		}
	}
	t.Logf("%d admitted before the stop, %d in flight and refused, %d sent after the acknowledgement and refused", ok, refusedInFlight, afterAck)
	if afterAck != senders {
		t.Fatalf("%d RPCs sent after the acknowledgement, want one from each of the %d senders", afterAck, senders)
	}
	if ok < 300 {
		t.Fatalf("only %d RPCs admitted", ok)
	}

	if a := s.operator(t, http.MethodPost, wire.PathResume, s.operatorToken(), ""); a.Status != http.StatusOK {
		t.Fatalf("resume: %d %s", a.Status, a.Body)
	}
	// Read every key back: steps of 8 keys of one partition, 4 steps (32
	// commands) to a request.
	type sent struct{ sender, n int }
	var steps []engine.Step
	var order []sent // the RPC of each command, in request order
	for part := range 16 {
		for i := part; i < senders; i += 16 {
			for n := range outcomes[i] {
				if k := len(steps); k == 0 || steps[k-1].Partition != partition(i) || len(steps[k-1].Commands) == engine.MaxCommandsPerStep {
					steps = append(steps, step(partition(i)))
				}
				last := &steps[len(steps)-1]
				last.Commands = append(last.Commands, engine.Get(key(i, n)))
				order = append(order, sent{i, n})
			}
		}
	}
	for len(steps) > 0 {
		k := min(len(steps), 4)
		resp := s.do(t, request(steps[:k]...))
		for _, st := range resp.Steps {
			for _, r := range st.Results {
				rpc := order[0]
				order = order[1:]
				o := outcomes[rpc.sender][rpc.n]
				want := o.status == http.StatusOK
				if r.Found != want || want && r.Value != "1" {
					t.Errorf("sender %d, rpc %d: found %v value %q; it answered %d (sent after the acknowledgement: %v)",
						rpc.sender, rpc.n, r.Found, r.Value, o.status, o.afterAck)
				}
			}
		}
		steps = steps[k:]
	}
}

// sendIncr sends one signed kv.incr of key on partition and reports
// whether it was sent after the stop was acknowledged (acked read just
// before sending), its status and its error code.
func sendIncr(baseURL, secret, partition, key string, acked *atomic.Bool) (afterAck bool, status int, code wire.Code, err error) {
	body, err := json.Marshal(request(step(partition, engine.Incr(key, 1, hour))))
	if err != nil {
		return false, 0, "", err
	}
	req, err := http.NewRequest(http.MethodPost, baseURL+wire.PathRPC, bytes.NewReader(body))
	if err != nil {
		return false, 0, "", err
	}
	ts := time.Now().Unix()
	req.Header.Set(wire.HeaderTimestamp, strconv.FormatInt(ts, 10))
	req.Header.Set(wire.HeaderSignature, wire.Sign([]byte(secret), ts, http.MethodPost, wire.PathRPC, body))
	afterAck = acked.Load()
	a, err := trySend(httpClient, req)
	if err != nil {
		return afterAck, 0, "", err
	}
	var pr wire.Problem
	if a.Status != http.StatusOK && json.Unmarshal(a.Body, &pr) == nil {
		code = pr.Code
	}
	return afterAck, a.Status, code, nil
}

// TestFairnessResetIsAudited spends a source's share and a principal's
// share with sluice hit, resets each with sluice control fairness-reset,
// finds the audit lines in the server's log, and is admitted again.
func TestFairnessResetIsAudited(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverOptions{Args: fairArgs})
	if r := s.hitAll(t, hitArgs(t, 110, "--source", "198.51.100.7"))[0]; r.admitted != sourceShare || r.first != wire.CodeLimited {
		t.Fatalf("source: %+v", r)
	}
	mark := s.logs.count()
	out, errOut, status := s.cli(t, "control", "fairness-reset", "--family", admission.DefaultFamily,
		"--source", "198.51.100.7", "--actor", "alice", "--reason", "office NAT")
	if status != 0 || !strings.Contains(out, "by           alice from 127.0.0.1:") || !strings.Contains(out, "198.51.100.0/24") {
		t.Fatalf("fairness-reset: status %d, %q %q", status, out, errOut)
	}
	rec, ok := s.logs.waitFor(mark, s.exited, func(l logRecord) bool { return l["msg"] == "fairness quota reset" })
	if !ok {
		t.Fatalf("no audit line in the log:\n%s", s.logs)
	}
	if actor, _ := rec["actor"].(string); !strings.HasPrefix(actor, "alice from ") || rec["family"] != admission.DefaultFamily ||
		rec["reason"] != "office NAT" || rec["source"] != true || rec["principal"] != false {
		t.Errorf("audit line %v", rec)
	}
	if strings.Contains(s.logs.String(), "198.51.100") {
		t.Error("the raw address reached the server's log")
	}
	if r := s.hitAll(t, hitArgs(t, 10, "--source", "198.51.100.7"))[0]; r.admitted != 10 {
		t.Errorf("after the reset: %+v, want the source admitted again", r)
	}

	if r := s.hitAll(t, hitArgs(t, 105, "--source", "2001:db8:5::1", "--principal", "bob"))[0]; r.admitted != sourceShare {
		t.Fatalf("principal: %+v", r)
	}
	if _, errOut, status := s.cli(t, "control", "fairness-reset", "--family", admission.DefaultFamily, "--principal", "bob", "--actor", "alice"); status != 0 {
		t.Fatalf("principal reset: %q", errOut)
	}
	if r := s.hitAll(t, hitArgs(t, 5, "--source", "2001:db8:6::1", "--principal", "bob"))[0]; r.admitted != 5 {
		t.Errorf("after the principal reset: %+v", r)
	}
	if n := strings.Count(s.logs.String(), `"msg":"fairness quota reset"`); n != 2 {
		t.Errorf("%d audit lines, want 2", n)
	}

	// The store keeps both records, listed newest first; they survive a
	// restart.
	s.restart()
	out, errOut, status = s.cli(t, "control", "audit")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if status != 0 || len(lines) != 3 ||
		!strings.HasPrefix(lines[1], "2 ") || !strings.Contains(lines[1], "principal") ||
		!strings.HasPrefix(lines[2], "1 ") || !strings.Contains(lines[2], "source (v4/24)") || !strings.Contains(lines[2], "office NAT") {
		t.Errorf("control audit: status %d, %q %q", status, out, errOut)
	}
	if strings.Contains(out, "198.51.100") || strings.Contains(out, "bob") {
		t.Errorf("the audit listing shows a raw identity:\n%s", out)
	}
}

// TestEveryCommandIsCharged shows what a family's allowance counts: every
// command of an admitted RPC, those of the steps a denial skipped
// included, and again for a retry of an operation id, which the subject
// answers from its replay record without running it twice.
func TestEveryCommandIsCharged(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverOptions{})
	p := unique(t, "charged")
	full := engine.Window{Key: "w", Kind: algo.KindFixed, Limit: 1, WindowMs: hour}
	s.do(t, request(step(p, engine.Hit(1, full))))

	before := s.spent(t, admission.DefaultFamily)
	got := s.do(t, request(
		step(p, engine.Hit(1, full)), // denied: the window is full
		step(p, engine.Incr("a", 1, hour), engine.Incr("b", 1, hour)),
		step(p, engine.Set("c", "x", hour), engine.Incr("d", 1, hour), engine.Incr("e", 1, hour)),
	))
	if got.Steps[0].Results[0].Allowed || !got.Steps[1].Skipped || !got.Steps[2].Skipped {
		t.Fatalf("answer %+v, want the hit denied and the two steps after it skipped", got.Steps)
	}
	if spent := s.spent(t, admission.DefaultFamily) - before; spent != 6 {
		t.Errorf("an RPC of 6 commands, 5 of them skipped, spent %d of the allowance, want 6", spent)
	}
	for _, k := range []string{"a", "b", "c", "d", "e"} {
		s.mustBeAbsent(t, p, k)
	}

	body := encode(t, request(step(p, engine.Incr("n", 1, hour))))
	before = s.spent(t, admission.DefaultFamily)
	first := signedPost(t, s.URL, s.secret(), time.Now().Unix(), body).response(t)
	again := signedPost(t, s.URL, s.secret(), time.Now().Unix(), body).response(t)
	if first.Steps[0].Replayed || !again.Steps[0].Replayed || again.Steps[0].Results[0].Int != 1 {
		t.Fatalf("first %+v, retry %+v: want the retry to replay the first's n = 1", first.Steps[0], again.Steps[0])
	}
	if spent := s.spent(t, admission.DefaultFamily) - before; spent != 2 {
		t.Errorf("an RPC of one command and its retry spent %d of the allowance, want 2: a retry is admitted again", spent)
	}
	if v, _ := s.get(t, p, "n"); v != "1" {
		t.Errorf("n = %q after an increment and its retry, want 1", v)
	}
}

// TestFairnessQuotaSurvivesRestart spends a source's share, restarts the
// server and sends from that source again: still refused, as durable
// quotas are, while another source is admitted.
func TestFairnessQuotaSurvivesRestart(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverOptions{Args: fairArgs})
	if r := s.hitAll(t, hitArgs(t, sourceShare+5, "--source", "198.51.100.9"))[0]; r.admitted != sourceShare || r.first != wire.CodeLimited {
		t.Fatalf("before the restart: %+v, want the share of %d admitted and then guard_limited", r, sourceShare)
	}
	s.restart()
	rs := s.hitAll(t, hitArgs(t, 2, "--source", "198.51.100.9"), hitArgs(t, 2, "--source", "203.0.113.9"))
	if r := rs[0]; r.admitted != 0 || r.first != wire.CodeLimited {
		t.Errorf("the spent source after the restart: %+v, want guard_limited", r)
	}
	if r := rs[1]; r.admitted != 2 {
		t.Errorf("another source after the restart: %+v, want admitted", r)
	}
}
