package pace

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
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
	var (
		mine []prometheus.Collector // registered here, undone on a failure
		err  error
	)
	join := func(c prometheus.Collector) prometheus.Collector {
		if err != nil {
			return c
		}
		if err = reg.Register(c); err == nil {
			mine = append(mine, c)
			return c
		}
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			// Another Registry's: the same metric, if of the same kind.
			existing := are.ExistingCollector
			if sameKind(existing, c) {
				err = nil
				return existing
			}
		}
		return c
	}
	m.calls = join(m.calls).(*prometheus.CounterVec)
	m.attempts = join(m.attempts).(*prometheus.CounterVec)
	m.limited = join(m.limited).(*prometheus.CounterVec)
	m.wait = join(m.wait).(*prometheus.HistogramVec)
	if err != nil {
		for _, c := range mine {
			reg.Unregister(c)
		}
		return nil, err
	}
	return m, nil
}

// sameKind reports whether a collector registered before is of c's type,
// so that it can stand for c.
func sameKind(existing, c prometheus.Collector) bool {
	switch c.(type) {
	case *prometheus.CounterVec:
		_, ok := existing.(*prometheus.CounterVec)
		return ok
	case *prometheus.HistogramVec:
		_, ok := existing.(*prometheus.HistogramVec)
		return ok
	}
	return false
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
