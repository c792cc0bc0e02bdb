// Package metricstest reads Prometheus metrics in tests: it gathers a
// registry, or parses a scraped exposition, and finds one series by its
// labels.
package metricstest

import (
	"io"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Gather gathers g, failing t if it fails.
func Gather(t testing.TB, g prometheus.Gatherer) []*dto.MetricFamily {
	t.Helper()
	fams, err := g.Gather()
	if err != nil {
		t.Fatalf("gathering metrics: %v", err)
	}
	return fams
}

// Parse parses r, a scrape in the Prometheus text format, failing t if it
// is malformed.
func Parse(t testing.TB, r io.Reader) []*dto.MetricFamily {
	t.Helper()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	byName, err := parser.TextToMetricFamilies(r)
	if err != nil {
		t.Fatalf("parsing the exposition: %v", err)
	}
	fams := make([]*dto.MetricFamily, 0, len(byName))
	for _, f := range byName {
		fams = append(fams, f)
	}
	return fams
}

// Value returns the value of the first series of name whose labels
// include labels, given as name, value pairs: a counter's or a gauge's
// value, or a histogram's count of observations. ok is false if there is
// no such series.
func Value(fams []*dto.MetricFamily, name string, labels ...string) (v float64, ok bool) {
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				if !hasLabel(m, labels[i], labels[i+1]) {
					continue series
				}
			}
			switch {
			case m.Counter != nil:
				return m.GetCounter().GetValue(), true
			case m.Gauge != nil:
				return m.GetGauge().GetValue(), true
			case m.Histogram != nil:
				return float64(m.GetHistogram().GetSampleCount()), true
			case m.Untyped != nil:
				return m.GetUntyped().GetValue(), true
			}
		}
	}
	return 0, false
}

// Series returns the number of series of name.
func Series(fams []*dto.MetricFamily, name string) int {
	for _, f := range fams {
		if f.GetName() == name {
			return len(f.GetMetric())
		}
	}
	return 0
}

func hasLabel(m *dto.Metric, name, value string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue() == value
		}
	}
	return false
}
