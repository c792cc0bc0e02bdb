package httplimit_test

import (
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluicehq/sluice/httplimit"
)

// A stage given a registry counts its requests by outcome; the
// application serves the registry where its Prometheus scrapes.
func ExampleConfig_registerer() {
	reg := prometheus.NewRegistry()
	cfg := httplimit.DefaultConfig()
	cfg.Routes = []string{"/login"}
	cfg.Prefix = "login"
	cfg.Quota.Limit = 1
	cfg.Store = exampleStore()
	cfg.Registerer = reg
	lim, err := httplimit.New(cfg)
	if err != nil {
		log.Fatal(err)
	}
	h := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	for range 3 {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/login", nil))
	}

	rec := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	for line := range strings.Lines(rec.Body.String()) {
		if strings.HasPrefix(line, "sluice_") {
			fmt.Print(line)
		}
	}
	// Output:
	// sluice_httplimit_requests_total{outcome="allowed",prefix="login"} 1
	// sluice_httplimit_requests_total{outcome="error",prefix="login"} 0
	// sluice_httplimit_requests_total{outcome="limited",prefix="login"} 2
}
