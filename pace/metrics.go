package pace

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/promreg"
)

// The metrics of a Registry given WithRegisterer. Their one label beyond
// the result is the limiter's name, which the application defines.
const (
	metricCalls    = "sluice_pace_calls_total"
	metricAttempts = "sluice_pace_attempts_total"
	metricLimited  = "sluice_pace_upstream_rate_limits_total"
	metricWait     = "sluice_pace_wait_seconds"
)

// waitBuckets bound a call's wait for its turn: none at all, up to the
// longest MaxWait a caller is likely to accept.
var waitBuckets = []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

// paceMetrics count the calls of one Registry. A nil *paceMetrics counts
// nothing.
type paceMetrics struct {
	calls, attempts, limited *prometheus.CounterVec
	wait                     *prometheus.HistogramVec
}

// WithRegisterer has the Registry count its calls in reg: the calls by
// limiter and result, their attempts (runs of fn), the upstream rate limits
// they met, and the time each attempt waited for its turn. Registries
// registered on one registry share the metrics. A registry that refuses
// them (another metric of one of the names) is logged, and the Registry
// counts nothing.
func WithRegisterer(reg prometheus.Registerer) RegistryOption {
	return func(r *Registry) { r.metricsReg = reg }
}

// newPaceMetrics registers the metrics with reg, or joins those another
// Registry registered there.
func newPaceMetrics(reg prometheus.Registerer) (*paceMetrics, error) {
	m := &paceMetrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricCalls,
			Help: "Paced calls ended, by limiter and result: ok, rate_limited (the upstream's rate limit outlasted the attempts), failed, dropped, wait_too_long, reconfigured, no_such_limiter, cancelled or error.",
		}, []string{"limiter", "result"}),
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricAttempts,
			Help: "Attempts of paced calls: each run of the caller's function.",
		}, []string{"limiter"}),
		limited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricLimited,
			Help: "Attempts the upstream answered with a rate limit, each of which paused every caller of the limiter.",
		}, []string{"limiter"}),
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    metricWait,
			Help:    "Time from a call's start, or its previous attempt's end, to its function's start, in seconds: the wait for its turn.",
			Buckets: waitBuckets,
		}, []string{"limiter"}),
	}
	// Each metric is registered, or joined if another Registry holds it;
	// on a refusal, those this Registry registered are taken back.
	var mine []prometheus.Collector
	undo := func(err error) (*paceMetrics, error) {
		for _, c := range mine {
			reg.Unregister(c)
		}
		return nil, err
	}
	var err error
	if m.calls, mine, err = join(reg, m.calls, mine); err != nil {
		return undo(err)
	}
	if m.attempts, mine, err = join(reg, m.attempts, mine); err != nil {
		return undo(err)
	}
	if m.limited, mine, err = join(reg, m.limited, mine); err != nil {
		return undo(err)
	}
	if m.wait, mine, err = join(reg, m.wait, mine); err != nil {
		return undo(err)
	}
	return m, nil
}

// join is promreg.Join, adding c to mine when it registered c itself
// rather than joining another Registry's collector.
func join[C prometheus.Collector](reg prometheus.Registerer, c C, mine []prometheus.Collector) (C, []prometheus.Collector, error) {
	got, err := promreg.Join(reg, c)
	if err == nil && any(got) == any(c) {
		mine = append(mine, c)
	}
	return got, mine, err
}

// started counts an attempt of limiter about to run fn after waiting
// since since.
func (m *paceMetrics) started(limiter string, since time.Time) {
	if m == nil {
		return
	}
	m.attempts.WithLabelValues(limiter).Inc()
	m.wait.WithLabelValues(limiter).Observe(time.Since(since).Seconds())
}

// rateLimited counts an attempt the upstream rate limited.
func (m *paceMetrics) rateLimited(limiter string) {
	if m != nil {
		m.limited.WithLabelValues(limiter).Inc()
	}
}

// ended counts a call of limiter that ended with err.
func (m *paceMetrics) ended(limiter string, err error) {
	if m != nil {
		m.calls.WithLabelValues(limiter, callResult(err)).Inc()
	}
}

// callResult names the result of a call that ended with err.
func callResult(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, ErrRateLimited):
		return "rate_limited"
	case errors.Is(err, ErrCallFailed):
		return "failed"
	case errors.Is(err, ErrDropped):
		return "dropped"
	case errors.Is(err, ErrWaitTooLong):
		return "wait_too_long"
	case errors.Is(err, ErrReconfigured):
		return "reconfigured"
	case errors.Is(err, ErrNoSuchLimiter):
		return "no_such_limiter"
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return "cancelled"
	}
	return "error"
}
