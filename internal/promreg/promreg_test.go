package promreg_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/promreg"
)

func counterVec() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x_total", Help: "x"}, []string{"who"})
}

// TestJoin registers a vector, has a second of the same metric join it,
// and checks both count into one; a metric of the name with another
// type is refused.
func TestJoin(t *testing.T) {
	reg := prometheus.NewRegistry()
	first, err := promreg.Join(reg, counterVec())
	if err != nil {
		t.Fatal(err)
	}
	second, err := promreg.Join(reg, counterVec())
	if err != nil {
		t.Fatal(err)
	}
	if first != second {
		t.Fatal("the second vector did not join the first")
	}
	second.WithLabelValues("b").Inc()
	fams, err := reg.Gather()
	if err != nil || len(fams) != 1 || len(fams[0].GetMetric()) != 1 {
		t.Fatalf("gathered %v, %v; want one series", fams, err)
	}

	other := prometheus.NewRegistry()
	other.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "x_total", Help: "x"}))
	if _, err := promreg.Join(other, counterVec()); err == nil {
		t.Fatal("a vector joined a plain counter of its name")
	}
}
