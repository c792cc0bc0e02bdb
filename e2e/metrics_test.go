package e2e

import (
	"bytes"
	"net/http"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/metricstest"
	"github.com/sluicehq/sluice/wire"
)

// scrape reads GET /metrics with the operator token and parses it.
func (s *server) scrape(t *testing.T, token string) []*dto.MetricFamily {
	t.Helper()
	a := s.operator(t, http.MethodGet, wire.PathMetrics, token, "")
	if a.Status != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", a.Status, a.Body)
	}
	return metricstest.Parse(t, bytes.NewReader(a.Body))
}

// value returns the value of the series of name with the label values
// given as name, value pairs, or -1 if there is none.
func value(fams []*dto.MetricFamily, name string, labels ...string) float64 {
	if v, ok := metricstest.Value(fams, name, labels...); ok {
		return v
	}
	return -1
}

// TestMetrics scrapes a real sluice serve on the embedded store: refused
// without the operator token; the server's counters follow the RPCs sent,
// the embedded store's follow its log (one fsync at least per admitted
// hit under fsync always), the stop fence shows, and the process's and the Go
// runtime's metrics are there beside them.
func TestMetrics(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverOptions{})
	if a := s.operator(t, http.MethodGet, wire.PathMetrics, "", ""); a.Status != http.StatusUnauthorized {
		t.Fatalf("GET /metrics without the token: %d %s", a.Status, a.Body)
	}
	before := s.scrape(t, s.operatorToken())

	p := unique(t, "metrics")
	for range 5 { // each its own operation
		s.do(t, request(step(p, engine.Hit(1, engine.Window{Key: "w", Kind: algo.KindSliding, Limit: 3, WindowMs: hour}))))
	}
	after := s.scrape(t, s.operatorToken())

	for _, c := range []struct {
		name   string
		labels []string
		delta  float64
	}{
		{"sluice_rpc_calls_total", []string{"endpoint", "rpc", "code", "ok"}, 5},
		{"sluice_rpc_requests_total", []string{"code", "ok"}, 5},
		{"sluice_commands_total", []string{"op", "win.hit", "outcome", "allowed"}, 3},
		{"sluice_commands_total", []string{"op", "win.hit", "outcome", "denied"}, 2},
	} {
		if got := value(after, c.name, c.labels...) - value(before, c.name, c.labels...); got != c.delta {
			t.Errorf("%s%v rose by %v, want %v", c.name, c.labels, got, c.delta)
		}
	}
	if got := value(after, "sluice_diskstore_log_fsyncs_total") - value(before, "sluice_diskstore_log_fsyncs_total"); got < 3 {
		t.Errorf("%v log fsyncs for 3 admitted hits answered one by one under fsync always, want one each at least", got)
	}
	if value(after, "sluice_diskstore_log_bytes_total") <= value(before, "sluice_diskstore_log_bytes_total") {
		t.Errorf("the log's bytes did not grow")
	}
	for _, name := range []string{"sluice_diskstore_log_fsync_seconds_total", "sluice_diskstore_disk_bytes", "sluice_diskstore_resident_partitions"} {
		if value(after, name) <= 0 {
			t.Errorf("%s = %v, want above 0", name, value(after, name))
		}
	}
	for name, want := range map[string]float64{"sluice_diskstore_failed": 0, "sluice_stopped": 0, "sluice_build_info": 1} {
		if got := value(after, name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	for _, name := range []string{"go_goroutines", "process_resident_memory_bytes", "sluice_family_allowance"} {
		if metricstest.Series(after, name) == 0 {
			t.Errorf("no %s", name)
		}
	}

	if _, errOut, status := s.cli(t, "control", "stop", "--reason", "metrics"); status != 0 {
		t.Fatalf("control stop: %d %s", status, errOut)
	}
	if got := value(s.scrape(t, s.operatorToken()), "sluice_stopped"); got != 1 {
		t.Errorf("sluice_stopped = %v while stopped, want 1", got)
	}
}
