package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/metricstest"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/wire"
)

// redisFleet is several sluice serve processes on one Redis store, with
// the same signing secret and operator token, as an operator would run
// them behind a load balancer.
type redisFleet struct {
	servers []*server
	token   string
	// pepper is the clients' key-hashing pepper, shared by every server
	// (for /v1/limiters) and by the sluice processes that call them, so
	// that an identity hashes alike whichever server it is sent to.
	pepper string
}

// startRedisFleet starts n servers on the store URL, each with its own
// working directory, with extra arguments.
func startRedisFleet(t *testing.T, n int, store string, extra ...string) *redisFleet {
	t.Helper()
	f := &redisFleet{token: "operator-" + strings.Repeat("t", 40), pepper: "pepper-" + strings.Repeat("p", 40)}
	secret := "secret-" + strings.Repeat("s", 40)
	for range n {
		f.servers = append(f.servers, startServer(t, serverOptions{
			// The tests check what is shared, not how fast: a call may
			// take 10 s on a busy machine (the default is 750 ms).
			Args:   append([]string{"--store", store, "--redis-timeout", "10s"}, extra...),
			Env:    []string{"SLUICE_SECRETS=" + secret, "SLUICE_OPERATOR_TOKEN=" + f.token, "SLUICE_PEPPER=" + f.pepper},
			Secret: secret,
		}))
	}
	return f
}

func redisURL(s *redistest.Server) string { return "redis://" + s.Addr }

func clusterURL(c *redistest.Cluster) string {
	return "redis+cluster://" + strings.Join(c.Addrs(), ",")
}

// TestRedisServersShareQuotas sends hits on a few partitions spread over
// two servers on one Redis, concurrently: each partition admits exactly
// its limit between them, on a single node and on a 3-master cluster
// (where the partitions land on different masters).
func TestRedisServersShareQuotas(t *testing.T) {
	t.Parallel()
	onSingleAndCluster(t, shareQuotas)
}

// onSingleAndCluster runs test in parallel subtests, on the URL of a
// single Redis node and on that of a 3-master cluster.
func onSingleAndCluster(t *testing.T, test func(t *testing.T, store string)) {
	t.Run("single", func(t *testing.T) {
		t.Parallel()
		test(t, redisURL(redistest.Start(t)))
	})
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		test(t, clusterURL(redistest.StartCluster(t, 3)))
	})
}

func shareQuotas(t *testing.T, store string) {
	const (
		partitions = 4
		perServer  = 20 // hits per partition and server
		limit      = 25
	)
	fleet := startRedisFleet(t, 2, store)
	win := engine.Window{Key: "w", Kind: algo.KindSliding, Limit: limit, WindowMs: hour}
	names := make([]string, partitions)
	for i := range names {
		names[i] = unique(t, fmt.Sprintf("share%d", i))
	}

	var reqs []*http.Request
	var parts []int
	for _, s := range fleet.servers {
		for p, name := range names {
			for range perServer {
				reqs = append(reqs, signedRequest(t, s.URL, s.secret(), time.Now().Unix(), encode(t, request(step(name, engine.Hit(1, win))))))
				parts = append(parts, p)
			}
		}
	}
	admitted := make([]int, partitions)
	for i, a := range sendAtOnce(t, reqs) {
		if a.response(t).Steps[0].Results[0].Allowed {
			admitted[parts[i]]++
		}
	}
	for p, n := range admitted {
		if n != limit {
			t.Errorf("partition %d: %d of %d hits admitted across two servers, want exactly the limit %d", p, n, 2*perServer, limit)
		}
	}
	// Either server now sees every partition full.
	for _, s := range fleet.servers {
		for p, name := range names {
			if r := s.do(t, request(step(name, engine.Hit(1, win)))).Steps[0].Results[0]; r.Allowed || r.Remaining != 0 {
				t.Errorf("%s, partition %d after the load: allowed %v, remaining %d; want a full window", s.URL, p, r.Allowed, r.Remaining)
			}
		}
	}
	// Each server counted what it answered, and reports the Redis
	// client's pool rather than an embedded store.
	for _, s := range fleet.servers {
		m := s.scrape(t, fleet.token)
		if got, want := value(m, "sluice_rpc_requests_total", "code", "ok"), float64(partitions*(perServer+1)); got != want {
			t.Errorf("%s counted %v requests answered ok, want %v", s.URL, got, want)
		}
		if got := value(m, "sluice_redis_pool_connections"); got < 1 {
			t.Errorf("%s: sluice_redis_pool_connections = %v", s.URL, got)
		}
		// Pipelines share a connection among batches, so fewer than one
		// a request.
		if got := value(m, "sluice_redis_pool_hits_total") + value(m, "sluice_redis_pool_misses_total"); got < 1 {
			t.Errorf("%s: %v connections taken from the pool for %d RPCs", s.URL, got, partitions*(perServer+1))
		}
		if metricstest.Series(m, "sluice_diskstore_log_fsyncs_total") != 0 {
			t.Errorf("%s reports an embedded store's metrics over Redis", s.URL)
		}
	}
}

// TestRedisStopFenceIsShared stops one server through its operator
// endpoint: the other server, on the same Redis, refuses RPCs once its
// cached fence is refreshed (1 s by default; the test polls it, bounded
// by startTimeout). A resume through the second server reaches the first
// in the same way.
func TestRedisStopFenceIsShared(t *testing.T) {
	t.Parallel()
	fleet := startRedisFleet(t, 2, redisURL(redistest.Start(t)))
	a, b := fleet.servers[0], fleet.servers[1]
	p, probe := unique(t, "fence"), unique(t, "probe")
	refused := func(s *server) wire.Problem {
		t.Helper()
		return s.call(t, request(step(p, engine.Set("x", "must not land", hour)))).problem(t, wire.CodeStopped)
	}

	if got := a.operator(t, http.MethodPost, wire.PathStop, fleet.token, `{"reason":"shared drill"}`); got.Status != http.StatusOK {
		t.Fatalf("stop through the first server: %d %s", got.Status, got.Body)
	}
	refused(a)
	waitAnswer(t, b, probe, http.StatusServiceUnavailable)
	refused(b)
	if got := b.operator(t, http.MethodGet, wire.PathState, fleet.token, ""); !strings.Contains(string(got.Body), "shared drill") {
		t.Errorf("the second server's state %d %s lacks the stop set through the first", got.Status, got.Body)
	}

	if got := b.operator(t, http.MethodPost, wire.PathResume, fleet.token, `{}`); got.Status != http.StatusOK {
		t.Fatalf("resume through the second server: %d %s", got.Status, got.Body)
	}
	waitAnswer(t, a, probe, http.StatusOK)
	a.mustBeAbsent(t, p, "x")
}

// waitAnswer sends a fresh increment to s until it answers status, within
// startTimeout: the fence of another server is seen once s refreshes its
// cached copy.
func waitAnswer(t *testing.T, s *server, partition string, status int) {
	t.Helper()
	deadline := time.Now().Add(startTimeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		got := s.call(t, request(step(partition, engine.Incr("n", 1, hour))))
		if got.Status == status {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still answers %d %s after %v, want %d", s.URL, got.Status, got.Body, startTimeout, status)
		}
		<-tick.C // polling a condition with a deadline
	}
}

// TestRedisReplayAcrossServers sends a request to one server and the same
// bytes to another on the same Redis: the second returns the recorded
// result, marked replayed, and charges nothing.
func TestRedisReplayAcrossServers(t *testing.T) {
	t.Parallel()
	fleet := startRedisFleet(t, 2, redisURL(redistest.Start(t)))
	a, b := fleet.servers[0], fleet.servers[1]
	partition := unique(t, "replay")
	body := encode(t, request(charge(partition)))

	first := signedPost(t, a.URL, a.secret(), time.Now().Unix(), body).response(t)
	if st := first.Steps[0]; st.Replayed || !st.Results[0].Allowed {
		t.Fatalf("first answer %+v, want an allowed, fresh step", st)
	}
	again := signedPost(t, b.URL, b.secret(), time.Now().Unix(), body).response(t)
	if !again.Steps[0].Replayed {
		t.Error("the other server ran the request again instead of replaying it")
	}
	if !reflect.DeepEqual(again.Steps[0].Results, first.Steps[0].Results) {
		t.Errorf("replayed results %+v, want the recorded %+v", again.Steps[0].Results, first.Steps[0].Results)
	}
	checkCharged(t, b, partition)
	checkCharged(t, a, partition)
}

// TestRedisAdmissionBudgetIsShared gives a family 100 commands a day,
// leased in chunks of 10, and alternates one-command RPCs between two
// servers until both refuse: together they admit no more than the budget,
// exactly what the shared durable counter leased less what each still
// holds unspent.
func TestRedisAdmissionBudgetIsShared(t *testing.T) {
	t.Parallel()
	const budget, chunk = 100, 10
	fleet := startRedisFleet(t, 2, redisURL(redistest.Start(t)), "--daily-budget", fmt.Sprint(budget), "--admission-chunk", fmt.Sprint(chunk))
	partition := unique(t, "budget")
	admitted, refusedBy := 0, map[int]bool{}
	for i := 0; len(refusedBy) < len(fleet.servers); i++ {
		if i > 4*budget {
			t.Fatalf("%d RPCs sent, %d admitted, and the servers still admit", i, admitted)
		}
		k := i % len(fleet.servers)
		got := fleet.servers[k].call(t, request(step(partition, engine.Incr("n", 1, hour))))
		switch got.Status {
		case http.StatusOK:
			if refusedBy[k] {
				t.Errorf("server %d admitted after refusing for the exhausted budget", k)
			}
			admitted++
		default:
			got.problem(t, wire.CodeStopped)
			refusedBy[k] = true
		}
	}
	var used, held int64
	for k, s := range fleet.servers {
		st := fleetFamily(t, s, fleet.token)
		if k == 0 {
			used = st.Used
		} else if st.Used != used {
			t.Errorf("servers report %d and %d commands leased: not one shared counter", used, st.Used)
		}
		held += st.LeasedLeft
	}
	if admitted > budget || used > budget {
		t.Errorf("%d admitted, %d leased: beyond the daily budget of %d", admitted, used, budget)
	}
	if int64(admitted) != used-held {
		t.Errorf("%d admitted, but the shared counter leased %d and the servers hold %d unspent", admitted, used, held)
	}
	t.Logf("%d of %d admitted across two servers (%d leased, %d left unspent in leases)", admitted, budget, used, held)
}

// fleetFamily reads the default family's state from s.
func fleetFamily(t testing.TB, s *server, token string) admission.FamilyState {
	t.Helper()
	a := s.operator(t, http.MethodGet, wire.PathState, token, "")
	if a.Status != http.StatusOK {
		t.Fatalf("state: %d %s", a.Status, a.Body)
	}
	var st controlState
	if err := json.Unmarshal(a.Body, &st); err != nil {
		t.Fatal(err)
	}
	for _, f := range st.Families {
		if f.Family == admission.DefaultFamily {
			return f
		}
	}
	t.Fatalf("no family %q in %s", admission.DefaultFamily, a.Body)
	return admission.FamilyState{}
}

// spent returns the commands the default family has admitted today across
// the fleet: what the servers leased from the shared allowance less what
// each still holds unspent.
func (f *redisFleet) spent(t testing.TB) int64 {
	t.Helper()
	var used, held int64
	for k, s := range f.servers {
		st := fleetFamily(t, s, f.token)
		if k > 0 && st.Used != used {
			t.Fatalf("servers report %d and %d commands leased: not one shared counter", used, st.Used)
		}
		used = st.Used
		held += st.LeasedLeft
	}
	return used - held
}

// TestRedisFairnessIsShared runs fair admission on two servers sharing one
// Redis: on a single node, where a fair RPC's charges are one joint step
// (one script call), and on a 3-master cluster, where they are two
// batches, the second refunding the first when it refuses.
func TestRedisFairnessIsShared(t *testing.T) {
	t.Parallel()
	onSingleAndCluster(t, fairnessIsShared)
}

func fairnessIsShared(t *testing.T, store string) {
	fleet := startRedisFleet(t, 2, store, fairArgs...)
	// Two sluice hit processes from two addresses of one /64, each through
	// its own server: between them they get the source's share.
	var runs []*cliRun
	for k, addr := range []string{"2001:db8:7:1::a", "2001:DB8:7:1:ffff:ffff:ffff:fffe"} {
		s := fleet.servers[k]
		runs = append(runs, s.startCLI(t, hitArgs(t, 80, "--source", addr, "--secret", s.secret(), "--pepper", fleet.pepper)...))
	}
	rs := []hitResult{runs[0].hits(t), runs[1].hits(t)}
	if got := totalAdmitted(rs); got != sourceShare {
		t.Fatalf("two processes on one /64, through two servers, were admitted %d, want the source share %d:\n%+v", got, sourceShare, rs)
	}
	for _, r := range rs {
		if r.refused > 0 && r.first != wire.CodeLimited {
			t.Errorf("refusal %s, want %s", r.first, wire.CodeLimited)
		}
	}
	if got := fleet.spent(t); got != sourceShare {
		t.Errorf("the fleet spent %d, want %d", got, sourceShare)
	}
	// A principal exhausted through both servers is refused through
	// either, and its refusals spend nothing anywhere.
	fairnessDenialSpendsNothing(t, fleet.servers, func() int64 { return fleet.spent(t) })
}

// TestRedisSentinelStore starts a server on a redis+sentinel:// URL: it
// finds the primary through the sentinel and serves from it.
func TestRedisSentinelStore(t *testing.T) {
	t.Parallel()
	r := redistest.StartReplicated(t)
	sentinel := redistest.StartSentinel(t, r.Primary)
	fleet := startRedisFleet(t, 1, "redis+sentinel://"+sentinel.Addr+"/"+redistest.SentinelPrimary)
	s := fleet.servers[0]
	partition := unique(t, "sentinel")
	s.do(t, request(step(partition, engine.Set("k", "through the sentinel", hour))))
	if v, ok := s.get(t, partition, "k"); !ok || v != "through the sentinel" {
		t.Fatalf("read back %q, %v", v, ok)
	}
	primary := r.Primary.Client(t)
	if n, err := primary.DBSize(t.Context()).Result(); err != nil || n == 0 {
		t.Errorf("the sentinel's primary holds %d keys (%v): the server wrote elsewhere", n, err)
	}
}
