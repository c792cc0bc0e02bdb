package client

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/promreg"
)

// metricDecisions counts the decisions of every Guard registered on one
// registry, by family, origin and result.
const metricDecisions = "sluice_guard_decisions_total"

// guardMetrics count one Guard's decisions (GuardConfig.Registerer): a
// counter per origin, allowed and denied. A nil *guardMetrics counts
// nothing.
type guardMetrics struct {
	decisions [len(originNames)][2]prometheus.Counter // [origin][allowed]
}

// newGuardMetrics registers the decisions counter with reg, or joins the
// one another Guard registered there, and resolves family's series.
func newGuardMetrics(reg prometheus.Registerer, family string) (*guardMetrics, error) {
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: metricDecisions,
		Help: "Decisions of Guard.Hit, by the client's family, what decided (server, cache: a denial the server gave earlier; fail-closed, fail-open, degraded: the fail mode while the server was unavailable) and the result (allowed, denied).",
	}, []string{"family", "origin", "result"})
	vec, err := promreg.Join(reg, vec)
	if err != nil {
		return nil, fmt.Errorf("%w: guard metrics: %w", engine.ErrInvalid, err)
	}
	m := &guardMetrics{}
	for o, origin := range originNames {
		m.decisions[o][0] = vec.WithLabelValues(family, origin, "denied")
		m.decisions[o][1] = vec.WithLabelValues(family, origin, "allowed")
	}
	return m, nil
}

func (m *guardMetrics) count(d Decision) {
	if m == nil || int(d.Origin) >= len(m.decisions) {
		return
	}
	allowed := 0
	if d.Allowed {
		allowed = 1
	}
	m.decisions[d.Origin][allowed].Inc()
}
