package httplimit_test

import (
	"errors"
	"net/http"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/httplimit"
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
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(fams) != 1 || fams[0].GetName() != "sluice_httplimit_requests_total" {
		t.Fatalf("gathered %d families, want sluice_httplimit_requests_total alone", len(fams))
	}
	got := map[[2]string]float64{}
	for _, m := range fams[0].GetMetric() {
		var k [2]string
		for _, l := range m.GetLabel() {
			switch l.GetName() {
			case "prefix":
				k[0] = l.GetValue()
			case "outcome":
				k[1] = l.GetValue()
			}
		}
		got[k] = m.GetCounter().GetValue()
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s %s = %v, want %v", k[0], k[1], got[k], v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("series %v, want %v", got, want)
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
