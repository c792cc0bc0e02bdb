package httplimit_test

import (
	"errors"
	"net/http"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/metricstest"
)

// TestMetricsCountEachOutcome runs two stages on one registry: each
// counts its own requests under its prefix, allowed, limited or error;
// requests on routes it does not select are not counted.
func TestMetricsCountEachOutcome(t *testing.T) {
	mem, _ := newMem(t, 100)
	reg := prometheus.NewRegistry()

	login := config(mem, 2, "/login")
	login.Prefix, login.Registerer = "login", reg
	loginStage, _ := stage(t, login)

	api := config(&failingStore{err: engine.ErrUnavailable}, 5, "/api/*")
	api.Prefix, api.Registerer = "api", reg
	apiStage, _ := stage(t, api)

	for range 3 {
		serve(loginStage, http.MethodPost, "/login", "192.0.2.1:1234")
	}
	serve(loginStage, http.MethodGet, "/elsewhere", "192.0.2.1:1234")
	for range 2 {
		if rec := serve(apiStage, http.MethodGet, "/api/items", "192.0.2.1:1234"); rec.Code != http.StatusServiceUnavailable {
			t.Fatalf("api on a failing store: %d", rec.Code)
		}
	}

	want := map[[2]string]float64{
		{"login", "allowed"}: 2, {"login", "limited"}: 1, {"login", "error"}: 0,
		{"api", "allowed"}: 0, {"api", "limited"}: 0, {"api", "error"}: 2,
	}
	fams := metricstest.Gather(t, reg)
	for k, v := range want {
		if got, ok := metricstest.Value(fams, "sluice_httplimit_requests_total", "prefix", k[0], "outcome", k[1]); !ok || got != v {
			t.Errorf("%s %s = %v (present %v), want %v", k[0], k[1], got, ok, v)
		}
	}
	if len(fams) != 1 || metricstest.Series(fams, "sluice_httplimit_requests_total") != len(want) {
		t.Errorf("%d families, %d series of sluice_httplimit_requests_total; want it alone, with %d", len(fams), metricstest.Series(fams, "sluice_httplimit_requests_total"), len(want))
	}
}

// TestMetricsRegistererConflict checks that a registry already holding
// another metric of the same name refuses the stage with ErrInvalidConfig.
func TestMetricsRegistererConflict(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_httplimit_requests_total", Help: "not the stage's"}))
	mem, _ := newMem(t, 100)
	cfg := config(mem, 2, "/login")
	cfg.Registerer = reg
	if _, err := httplimit.New(cfg); !errors.Is(err, httplimit.ErrInvalidConfig) {
		t.Fatalf("New on a conflicting registry: %v, want ErrInvalidConfig", err)
	}
}
