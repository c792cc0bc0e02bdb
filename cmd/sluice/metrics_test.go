package main

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/metricstest"
	"github.com/sluicehq/sluice/store/diskstore"
	"github.com/sluicehq/sluice/store/memstore"
)

// metricValue gathers g and returns the value of the one series of name
// (a gauge's or a counter's), failing the test unless there is exactly one.
func metricValue(t *testing.T, g prometheus.Gatherer, name string) float64 {
	t.Helper()
	fams := metricstest.Gather(t, g)
	if n := metricstest.Series(fams, name); n != 1 {
		t.Fatalf("%s has %d series, want 1", name, n)
	}
	v, _ := metricstest.Value(fams, name)
	return v
}

// TestStoreMetrics checks the collectors openStore returns for the
// embedded store and the memory store: each registers with the process's
// and the runtime's, and reports the store it was given.
func TestStoreMetrics(t *testing.T) {
	for _, store := range []string{storeDisk, storeMemory} {
		t.Run(store, func(t *testing.T) {
			cfg := defaultServeConfig()
			cfg.Store, cfg.DataDir = store, t.TempDir()
			st, collector, err := openStore(cfg, discard)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			reg := newRegistry(collector)
			var out engine.StepResult
			for _, key := range []string{"a", "b", "c"} {
				if err := engine.New(st).Apply(context.Background(), "p", &out, engine.Incr(key, 1, 60_000)); err != nil {
					t.Fatal(err)
				}
			}
			switch s := st.(type) {
			case *diskstore.Store:
				stats := s.Stats()
				for name, want := range map[string]float64{
					"sluice_diskstore_log_bytes_total":     float64(stats.LogBytes),
					"sluice_diskstore_log_fsyncs_total":    float64(stats.LogFsyncs),
					"sluice_diskstore_resident_partitions": float64(stats.Partitions),
					"sluice_diskstore_read_amplification":  float64(stats.ReadAmp),
					"sluice_diskstore_failed":              0,
				} {
					if got := metricValue(t, reg, name); got != want || strings.HasSuffix(name, "_total") && got == 0 {
						t.Errorf("%s = %v, the store's Stats say %v", name, got, want)
					}
				}
				if got := metricValue(t, reg, "sluice_diskstore_disk_bytes"); got <= 0 {
					t.Errorf("sluice_diskstore_disk_bytes = %v", got)
				}
			case *memstore.Store:
				if got := metricValue(t, reg, "sluice_memstore_keys"); got != float64(s.Len()) || got < 3 {
					t.Errorf("sluice_memstore_keys = %v, the store holds %d", got, s.Len())
				}
			default:
				t.Fatalf("openStore(%q) opened a %T", store, st)
			}
			if got := metricValue(t, reg, "go_goroutines"); got < 1 {
				t.Errorf("go_goroutines = %v", got)
			}
		})
	}
}
