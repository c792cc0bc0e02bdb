package e2e

import (
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/wire"
)

// charge is a mutating step: a hit of cost 3 on a limit of 10 and a counter
// increment.
func charge(partition string) engine.Step {
	return step(partition,
		engine.Hit(3, engine.Window{Key: "w", Kind: algo.KindSliding, Limit: 10, WindowMs: hour}),
		engine.Incr("n", 1, hour),
	)
}

// checkCharged checks that the partition of charge was charged exactly
// once: the counter reads 1 and the window holds 3 of 10 (a hit of 8 is
// denied, charging nothing, and reports 7 remaining).
func checkCharged(t *testing.T, s *server, partition string) {
	t.Helper()
	if v, _ := s.get(t, partition, "n"); v != "1" {
		t.Errorf("counter %q, want 1: charged more than once", v)
	}
	r := s.do(t, request(step(partition,
		engine.Hit(8, engine.Window{Key: "w", Kind: algo.KindSliding, Limit: 10, WindowMs: hour})))).Steps[0].Results[0]
	if r.Allowed || r.Remaining != 7 {
		t.Errorf("window: allowed %v, remaining %d; want a denial with 7 remaining", r.Allowed, r.Remaining)
	}
}

// TestReplayReturnsRecordedResult replays one signed request byte for byte,
// and again with a fresh signature, and then again after the server was
// killed and restarted: every replay returns the first answer's results,
// marked replayed, and nothing is charged twice. It runs under the two
// fsync policies whose answers survive a crash of the process; under
// interval with a period of an hour, only the write each answer waited
// for keeps the record through the kill.
func TestReplayReturnsRecordedResult(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		policy string
		args   []string
	}{
		{"always", nil},
		{"interval", []string{"--fsync", "interval", "--fsync-interval", "1h"}},
	} {
		t.Run(tc.policy, func(t *testing.T) {
			t.Parallel()
			testReplayReturnsRecordedResult(t, serverOptions{Args: tc.args})
		})
	}
}

func testReplayReturnsRecordedResult(t *testing.T, opts serverOptions) {
	s := startServer(t, opts)
	partition := unique(t, "replay")
	body := encode(t, request(charge(partition)))
	ts := time.Now().Unix()

	first := signedPost(t, s.URL, s.secret(), ts, body).response(t)
	if st := first.Steps[0]; st.Replayed || !st.Results[0].Allowed || st.Results[0].Remaining != 7 || st.Results[1].Int != 1 {
		t.Fatalf("first answer %+v, want an allowed hit with 7 remaining and a counter of 1", st)
	}
	checkReplay := func(what string, a answer) {
		t.Helper()
		got := a.response(t)
		if !got.Steps[0].Replayed {
			t.Errorf("%s: not marked replayed", what)
		}
		if !reflect.DeepEqual(got.Steps[0].Results, first.Steps[0].Results) {
			t.Errorf("%s: results %+v, want the recorded %+v", what, got.Steps[0].Results, first.Steps[0].Results)
		}
	}
	checkReplay("identical request", signedPost(t, s.URL, s.secret(), ts, body))
	checkReplay("re-signed request", signedPost(t, s.URL, s.secret(), time.Now().Unix(), body))
	checkCharged(t, s, partition)

	// A crash and a restart keep the record: the embedded store
	// acknowledged it only once it was durable.
	s.kill()
	s.start()
	checkReplay("identical request after a restart", signedPost(t, s.URL, s.secret(), ts, body))
	checkCharged(t, s, partition)
}

// TestConcurrentDuplicates sends 50 copies of one signed request at once:
// exactly one is executed, the other 49 replay it, and all 50 carry the
// same results.
func TestConcurrentDuplicates(t *testing.T) {
	t.Parallel()
	const copies = 50
	s := startServer(t, serverOptions{})
	partition := unique(t, "dup")
	body := encode(t, request(charge(partition)))
	ts := time.Now().Unix()
	secret := s.secret()

	reqs := make([]*http.Request, copies)
	for i := range reqs {
		reqs[i] = signedRequest(t, s.URL, secret, ts, body)
	}
	answers := sendAtOnce(t, reqs)

	executed := 0
	var want []engine.Result
	for i, a := range answers {
		r := a.response(t)
		if !r.Steps[0].Replayed {
			executed++
		}
		if i == 0 {
			want = r.Steps[0].Results
		} else if !reflect.DeepEqual(r.Steps[0].Results, want) {
			t.Errorf("copy %d: results %+v, want %+v", i, r.Steps[0].Results, want)
		}
	}
	if executed != 1 {
		t.Errorf("%d copies executed, want exactly 1", executed)
	}
	if !want[0].Allowed || want[0].Remaining != 7 || want[1].Int != 1 {
		t.Errorf("results %+v, want an allowed hit with 7 remaining and a counter of 1", want)
	}
	checkCharged(t, s, partition)
}

// TestOperationIDConflict reuses an operation id with other commands: the
// server answers 409 and changes nothing.
func TestOperationIDConflict(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverOptions{})
	partition := unique(t, "conflict")
	first := request(step(partition, engine.Incr("n", 1, hour)))
	s.do(t, first)

	for _, cmds := range [][]engine.Command{
		{engine.Incr("n", 2, hour)},
		{engine.Incr("n", 1, hour), engine.Incr("m", 1, hour)},
		{engine.Set("n", "x", hour)},
	} {
		other := first
		other.Steps = []engine.Step{step(partition, cmds...)}
		s.call(t, other).problem(t, wire.CodeConflict)
	}
	if v, _ := s.get(t, partition, "n"); v != "1" {
		t.Errorf("counter %q after conflicting reuses, want 1", v)
	}
	s.mustBeAbsent(t, partition, "m")
}
