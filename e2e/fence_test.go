package e2e

import (
	"net/http"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/wire"
)

// TestStopFence stops a server with sluice control, checks that every RPC is
// refused before any command runs, restarts it, checks the stop held, and
// resumes it: the data written before the stop is intact, and nothing sent
// while stopped was applied.
func TestStopFence(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverOptions{})
	p := unique(t, "fence")
	s.do(t, request(step(p, engine.Set("kept", "before the stop", hour))))

	out, errOut, status := s.cli(t, "control", "stop", "--reason", "e2e drill")
	if status != 0 || !strings.Contains(out, "stopped since") || !strings.Contains(out, "e2e drill") {
		t.Fatalf("control stop: status %d, output %q %q", status, out, errOut)
	}

	checkStopped := func(when string) {
		t.Helper()
		for _, r := range []wire.Request{
			request(step(p, engine.Set("stopped", "must not land", hour))),
			request(step(p, engine.Incr("stopped-counter", 1, hour))),
			request(step(p, engine.Get("kept"))), // even a read
		} {
			a := s.call(t, r)
			pr := a.problem(t, wire.CodeStopped)
			if a.Header.Get("Retry-After") == "" {
				t.Errorf("%s: 503 guard_stopped without Retry-After", when)
			}
			if !strings.Contains(pr.Reason, "stopped") {
				t.Errorf("%s: reason %q", when, pr.Reason)
			}
		}
		out, _, status := s.cli(t, "control", "state")
		if status != 0 || !strings.Contains(out, "e2e drill") {
			t.Errorf("%s: control state: status %d, output %q", when, status, out)
		}
	}
	checkStopped("after the stop")
	s.restart()
	checkStopped("after a restart")

	out, errOut, status = s.cli(t, "control", "resume")
	if status != 0 || !strings.HasPrefix(out, "running\n") {
		t.Fatalf("control resume: status %d, output %q %q", status, out, errOut)
	}
	if v, ok := s.get(t, p, "kept"); !ok || v != "before the stop" {
		t.Errorf("kept = %q, %v after resume; want the value written before the stop", v, ok)
	}
	s.mustBeAbsent(t, p, "stopped")
	s.mustBeAbsent(t, p, "stopped-counter")
	if out, _, _ := s.cli(t, "control", "state"); !strings.HasPrefix(out, "running\n") {
		t.Errorf("control state after resume: %q", out)
	}
}

// TestOperatorAuth checks that the operator endpoints take the operator
// token and nothing else: not a signing secret, not a near miss.
func TestOperatorAuth(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverOptions{})
	token := s.operatorToken()
	for _, bad := range []string{"", s.secret(), token[:len(token)-1], token + "x", strings.ToUpper(token)} {
		for _, ep := range []struct{ method, path string }{
			{http.MethodPost, wire.PathStop},
			{http.MethodPost, wire.PathResume},
			{http.MethodGet, wire.PathState},
		} {
			s.operator(t, ep.method, ep.path, bad, "").problem(t, wire.CodeUnauthorized)
		}
	}
	// None of those stopped the server.
	s.do(t, request(step(unique(t, "op"), engine.Incr("n", 1, hour))))
	if a := s.operator(t, http.MethodGet, wire.PathState, token, ""); a.Status != http.StatusOK || !strings.Contains(string(a.Body), `"stopped":false`) {
		t.Errorf("state with the token: %d %s", a.Status, a.Body)
	}
}
