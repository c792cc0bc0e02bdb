package httplimit

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/promreg"
)

// metricRequests counts the requests every stage registered on one
// registry checked, by the stage's prefix and the outcome.
const metricRequests = "sluice_httplimit_requests_total"

// stageMetrics count one stage's checks (Config.Registerer). A nil
// *stageMetrics counts nothing.
type stageMetrics struct {
	allowed, limited, failed prometheus.Counter
}

// newStageMetrics registers the requests counter with reg, or joins the
// one another stage registered there, and resolves this stage's series.
func newStageMetrics(reg prometheus.Registerer, prefix string) (*stageMetrics, error) {
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: metricRequests,
		Help: "Requests on the routes of a route quota stage (prefix), by outcome: allowed (passed to the handler), limited (answered 429) or error (the quota could not be checked; answered by OnError).",
	}, []string{"prefix", "outcome"})
	vec, err := promreg.Join(reg, vec)
	if err != nil {
		return nil, fmt.Errorf("%w: Registerer: %w", ErrInvalidConfig, err)
	}
	return &stageMetrics{
		allowed: vec.WithLabelValues(prefix, "allowed"),
		limited: vec.WithLabelValues(prefix, "limited"),
		failed:  vec.WithLabelValues(prefix, "error"),
	}, nil
}

func (m *stageMetrics) count(allowed bool) {
	if m == nil {
		return
	}
	if allowed {
		m.allowed.Inc()
	} else {
		m.limited.Inc()
	}
}

func (m *stageMetrics) countError() {
	if m != nil {
		m.failed.Inc()
	}
}
