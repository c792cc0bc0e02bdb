package client_test

import (
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/metricstest"
	"github.com/sluicehq/sluice/internal/testclock"
)

// TestGuardMetricsCountEachOrigin runs two Guards of two families on one
// registry through the server's decisions, a cached denial and, with the
// server down, each one's fail mode, and checks every decision was counted
// under its family, origin and result, and a refused hit was not.
func TestGuardMetricsCountEachOrigin(t *testing.T) {
	h := newHarness(t)
	reg := prometheus.NewRegistry()
	guard := func(c *client.Client, mode client.FailMode) *client.Guard {
		cfg := client.DefaultGuardConfig()
		cfg.FailMode, cfg.Clock, cfg.Registerer = mode, testclock.At(start), reg
		g, err := client.NewGuard(c, cfg)
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	api := guard(h.client().WithFamily("api"), client.FailClosed)
	jobs := guard(h.client().WithFamily("jobs"), client.FailOpen)
	w := fixed("per-second", 1, 1000)
	hit := func(g *client.Guard, partition string) {
		t.Helper()
		if _, err := g.Hit(ctxT(t), partition, 1, w); err != nil {
			t.Fatal(err)
		}
	}
	hit(api, "alice") // server, allowed
	hit(api, "alice") // server, denied
	hit(api, "alice") // cache, denied
	hit(jobs, "bob")  // server, allowed
	h.down.Store(true)
	hit(api, "carol") // fail-closed
	hit(jobs, "dave") // fail-open
	hit(jobs, "dave") // fail-open
	if _, err := api.Hit(ctxT(t), "erin", 1); !errors.Is(err, engine.ErrInvalid) {
		t.Fatalf("a hit with no window: %v, want ErrInvalid", err)
	}

	want := map[[3]string]float64{
		{"api", "server", "allowed"}:     1,
		{"api", "server", "denied"}:      1,
		{"api", "cache", "denied"}:       1,
		{"api", "fail-closed", "denied"}: 1,
		{"jobs", "server", "allowed"}:    1,
		{"jobs", "fail-open", "allowed"}: 2,
	}
	fams := metricstest.Gather(t, reg)
	for _, family := range []string{"api", "jobs"} {
		for _, origin := range []string{"server", "cache", "fail-closed", "fail-open", "degraded"} {
			for _, result := range []string{"allowed", "denied"} {
				k := [3]string{family, origin, result}
				got, ok := metricstest.Value(fams, "sluice_guard_decisions_total", "family", family, "origin", origin, "result", result)
				if !ok || got != want[k] {
					t.Errorf("%v = %v (present %v), want %v", k, got, ok, want[k])
				}
			}
		}
	}
	if n := metricstest.Series(fams, "sluice_guard_decisions_total"); n != 2*5*2 {
		t.Errorf("%d series, want every family, origin and result: 20", n)
	}
}

// TestGuardMetricsRegistererConflict checks that a registry holding
// another metric of the name refuses the Guard with ErrInvalid.
func TestGuardMetricsRegistererConflict(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_guard_decisions_total", Help: "not the Guard's"}))
	cfg := client.DefaultGuardConfig()
	cfg.Registerer = reg
	if _, err := client.NewGuard(offClient(), cfg); !errors.Is(err, engine.ErrInvalid) {
		t.Fatalf("NewGuard on a conflicting registry: %v, want ErrInvalid", err)
	}
}
