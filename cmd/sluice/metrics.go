package main

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/store/diskstore"
)

// newRegistry returns the metrics registry of sluice serve, served at
// GET /metrics: the Go runtime's and the process's metrics, the embedded
// store's when st is one, and (registered by server.New) the server's.
func newRegistry(st engine.Store) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	if ds, ok := st.(*diskstore.Store); ok {
		reg.MustRegister(diskstoreCollector{ds})
	}
	return reg
}

// diskstoreCollector reports an embedded store's Stats at each scrape.
type diskstoreCollector struct{ st *diskstore.Store }

var (
	dsLogBytes = prometheus.NewDesc("sluice_diskstore_log_bytes_total",
		"Bytes written to the embedded store's write-ahead log.", nil, nil)
	dsFsyncs = prometheus.NewDesc("sluice_diskstore_log_fsyncs_total",
		"Fsyncs of the embedded store's write-ahead log: one per group of commits under --fsync always, one per log file written in a period under interval.", nil, nil)
	dsFsyncSeconds = prometheus.NewDesc("sluice_diskstore_log_fsync_seconds_total",
		"Wall time spent in the write-ahead log's fsyncs, in seconds; divided by sluice_diskstore_log_fsyncs_total, an fsync's mean time.", nil, nil)
	dsPartitions = prometheus.NewDesc("sluice_diskstore_resident_partitions",
		"Partitions the embedded store holds in memory.", nil, nil)
	dsDiskBytes = prometheus.NewDesc("sluice_diskstore_disk_bytes",
		"Space the embedded store's files take on disk, in bytes.", nil, nil)
	dsFailed = prometheus.NewDesc("sluice_diskstore_failed",
		"1 once the embedded store has failed (a write-ahead log fsync failed): it answers nothing more until the server restarts.", nil, nil)
)

func (diskstoreCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{dsLogBytes, dsFsyncs, dsFsyncSeconds, dsPartitions, dsDiskBytes, dsFailed} {
		ch <- d
	}
}

func (c diskstoreCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.st.Stats()
	failed := 0.0
	if st.Failed {
		failed = 1
	}
	ch <- prometheus.MustNewConstMetric(dsLogBytes, prometheus.CounterValue, float64(st.LogBytes))
	ch <- prometheus.MustNewConstMetric(dsFsyncs, prometheus.CounterValue, float64(st.LogFsyncs))
	ch <- prometheus.MustNewConstMetric(dsFsyncSeconds, prometheus.CounterValue, st.LogFsyncTime.Seconds())
	ch <- prometheus.MustNewConstMetric(dsPartitions, prometheus.GaugeValue, float64(st.Partitions))
	ch <- prometheus.MustNewConstMetric(dsDiskBytes, prometheus.GaugeValue, float64(st.DiskBytes))
	ch <- prometheus.MustNewConstMetric(dsFailed, prometheus.GaugeValue, failed)
}
