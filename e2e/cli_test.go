package e2e

import (
	"strings"
	"testing"
)

// TestCLIAgainstServer drives a server with the sluice command-line tools,
// reading their credentials from the data directory beside them.
func TestCLIAgainstServer(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverOptions{})

	out, errOut, status := s.cli(t, "ping")
	if status != 0 || !strings.Contains(out, "protocol  1") || !strings.Contains(out, "ready     yes") {
		t.Errorf("ping: status %d, %q %q", status, out, errOut)
	}

	hit := []string{"hit", "--partition", "user:42", "--key", "api", "--kind", "fixed", "--limit", "2", "--window", "1h"}
	for i, want := range []struct {
		status    int
		allowed   string
		remaining string
	}{
		{0, "yes", "1"},
		{0, "yes", "0"},
		{2, "no", "0"},
	} {
		out, errOut, status := s.cli(t, hit...)
		if status != want.status || !strings.Contains(out, "allowed      "+want.allowed) || !strings.Contains(out, "remaining    "+want.remaining) {
			t.Errorf("hit %d: status %d, %q %q; want status %d, allowed %s, remaining %s", i, status, out, errOut, want.status, want.allowed, want.remaining)
		}
	}

	// A wrong token is refused loudly.
	_, errOut, status = s.cli(t, "control", "state", "--operator-token", strings.Repeat("x", 64))
	if status != 1 || !strings.Contains(errOut, "401 unauthorized") {
		t.Errorf("control state with a wrong token: status %d, %q", status, errOut)
	}
	// So is a wrong secret.
	_, errOut, status = s.cli(t, append(hit, "--secret", strings.Repeat("x", 64))...)
	if status != 1 || !strings.Contains(errOut, "401 unauthorized") {
		t.Errorf("hit with a wrong secret: status %d, %q", status, errOut)
	}
	// And a server that is not there.
	_, errOut, status = runCLI(t, t.TempDir(), "ping", "--url", "http://127.0.0.1:1")
	if status != 1 || errOut == "" {
		t.Errorf("ping of nothing: status %d, %q", status, errOut)
	}
}
