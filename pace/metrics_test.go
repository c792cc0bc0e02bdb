package pace_test

import (
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/sluicehq/sluice/internal/metricstest"
	"github.com/sluicehq/sluice/pace"
)

// histogram returns the series of metric name for limiter from fams.
func histogram(fams []*dto.MetricFamily, name, limiter string) *dto.Histogram {
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "limiter" && l.GetValue() == limiter {
					return m.GetHistogram()
				}
			}
		}
	}
	return nil
}

// TestMetricsCountCallsAttemptsAndWaits runs, on a controlled clock, a
// call that succeeds at once, a call rate limited twice by its upstream
// (Retry-After 7 s, then 20 s) before it succeeds, a call whose attempts
// all meet a rate limit, and a call through a name never configured; then
// checks each counter and the waits observed.
func TestMetricsCountCallsAttemptsAndWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		metrics := prometheus.NewRegistry()
		reg := pace.NewRegistry(newStore(t), pace.WithRegisterer(metrics))
		configure(t, reg, "api", config(100, time.Second))
		api := pace.Define("api").Bind(reg)

		var a attempts
		if _, err := pace.Call(t.Context(), api, a.fn(response(200))); err != nil {
			t.Fatal(err)
		}
		a = attempts{}
		if _, err := pace.Call(t.Context(), api, a.fn(
			response(429, "Retry-After", "7"),
			response(429, "Retry-After", "20"),
			response(200))); err != nil {
			t.Fatal(err)
		}
		a = attempts{}
		if _, err := pace.Call(t.Context(), api, a.fn(response(429, "Retry-After", "1")), pace.WithRetry(pace.Retry{Attempts: 2})); err == nil {
			t.Fatal("a call rate limited at every attempt succeeded")
		}
		if _, err := pace.Call(t.Context(), pace.Define("typo").Bind(reg), a.fn(response(200))); err == nil {
			t.Fatal("a call through an unknown limiter succeeded")
		}

		fams := metricstest.Gather(t, metrics)
		for _, c := range []struct {
			name   string
			labels []string
			want   float64
		}{
			{"sluice_pace_calls_total", []string{"limiter", "api", "result", "ok"}, 2},
			{"sluice_pace_calls_total", []string{"limiter", "api", "result", "rate_limited"}, 1},
			{"sluice_pace_calls_total", []string{"limiter", "typo", "result", "no_such_limiter"}, 1},
			{"sluice_pace_attempts_total", []string{"limiter", "api"}, 6},
			{"sluice_pace_upstream_rate_limits_total", []string{"limiter", "api"}, 4},
			{"sluice_pace_wait_seconds", []string{"limiter", "api"}, 6},
		} {
			if got, _ := metricstest.Value(fams, c.name, c.labels...); got != c.want {
				t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
			}
		}
		if n := metricstest.Series(fams, "sluice_pace_attempts_total"); n != 1 {
			t.Errorf("%d series of attempts, want api's alone: a call that never ran made none", n)
		}
		// Each retry waited for the pause its 429 asked for (7, 20 and
		// 1 s), from the previous attempt's end; the first attempts
		// waited for nothing.
		h := histogram(fams, "sluice_pace_wait_seconds", "api")
		if h == nil {
			t.Fatal("no wait histogram for api")
		}
		if got, want := h.GetSampleSum(), (7 + 20 + 1 + 0.0); got != want {
			t.Errorf("waits sum to %v s, want %v", got, want)
		}
	})
}

// TestMetricsTwoRegistriesShareOneRegisterer checks that two Registries
// on one registerer count into the same metrics, each under its limiters.
func TestMetricsTwoRegistriesShareOneRegisterer(t *testing.T) {
	metrics := prometheus.NewRegistry()
	for _, name := range []string{"first", "second"} {
		reg := pace.NewRegistry(newStore(t), pace.WithRegisterer(metrics))
		configure(t, reg, name, config(100, time.Second))
		var a attempts
		if _, err := pace.Call(t.Context(), pace.Define(name).Bind(reg), a.fn(response(http.StatusOK))); err != nil {
			t.Fatal(err)
		}
	}
	fams := metricstest.Gather(t, metrics)
	for _, name := range []string{"first", "second"} {
		if got, _ := metricstest.Value(fams, "sluice_pace_calls_total", "limiter", name, "result", "ok"); got != 1 {
			t.Errorf("%s: %v calls counted, want 1", name, got)
		}
	}
}

// TestMetricsRefusedByTheRegisterer checks that a registerer holding
// another metric of one of the names leaves the Registry counting
// nothing and says so in its log; calls run as before.
func TestMetricsRefusedByTheRegisterer(t *testing.T) {
	metrics := prometheus.NewRegistry()
	metrics.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_pace_attempts_total", Help: "not pace's"}))
	var logs strings.Builder
	reg := pace.NewRegistry(newStore(t), pace.WithRegisterer(metrics), pace.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	if !strings.Contains(logs.String(), "metrics not registered") {
		t.Errorf("nothing logged: %q", logs.String())
	}
	configure(t, reg, "api", config(100, time.Second))
	var a attempts
	if _, err := pace.Call(t.Context(), pace.Define("api").Bind(reg), a.fn(response(http.StatusOK))); err != nil {
		t.Fatal(err)
	}
	fams := metricstest.Gather(t, metrics)
	if len(fams) != 1 {
		t.Errorf("%d metric families registered, want the conflicting one alone", len(fams))
	}
}
