// Package promreg registers the Prometheus collectors of components that
// an application may create several of (route quota stages, Guards,
// pace registries) on one registry: the first registers a metric, the
// others join it, each counting under labels of its own.
package promreg

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Join registers c with reg and returns it; or, if reg already holds a
// collector describing the same metric with the same type as c (another
// instance of the component registered it), returns that one. Any other
// refusal, such as another metric of the same name, is returned as reg
// gave it.
func Join[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	err := reg.Register(c)
	if err == nil {
		return c, nil
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	return c, err
}
