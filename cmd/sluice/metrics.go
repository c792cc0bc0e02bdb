package main

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/store/diskstore"
	"github.com/sluicehq/sluice/store/memstore"
)

// newRegistry returns the metrics registry of sluice serve, served at
// GET /metrics: the Go runtime's and the process's metrics, the store's
// (its collector, from openStore) and, registered by server.New, the
// server's.
func newRegistry(store prometheus.Collector) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		store,
	)
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
	dsReadAmp = prometheus.NewDesc("sluice_diskstore_read_amplification",
		"Sorted files a read of the embedded store may look in (Pebble's read amplification); growing without end, compactions fall behind.", nil, nil)
	dsDebt = prometheus.NewDesc("sluice_diskstore_compaction_debt_bytes",
		"Bytes Pebble estimates its compactions must still rewrite to catch up with the writes.", nil, nil)
	dsFailed = prometheus.NewDesc("sluice_diskstore_failed",
		"1 once the embedded store has failed (a write-ahead log fsync failed): it answers nothing more until the server restarts.", nil, nil)
)

func (diskstoreCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{dsLogBytes, dsFsyncs, dsFsyncSeconds, dsPartitions, dsDiskBytes, dsReadAmp, dsDebt, dsFailed} {
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
	ch <- prometheus.MustNewConstMetric(dsReadAmp, prometheus.GaugeValue, float64(st.ReadAmp))
	ch <- prometheus.MustNewConstMetric(dsDebt, prometheus.GaugeValue, float64(st.CompactionDebt))
	ch <- prometheus.MustNewConstMetric(dsFailed, prometheus.GaugeValue, failed)
}

// memstoreCollector reports the memory store's size at each scrape.
type memstoreCollector struct{ st *memstore.Store }

var msKeys = prometheus.NewDesc("sluice_memstore_keys",
	"Records the memory store holds (windows, values, counters, leases, replay records), against its key cap.", nil, nil)

func (memstoreCollector) Describe(ch chan<- *prometheus.Desc) { ch <- msKeys }

func (c memstoreCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(msKeys, prometheus.GaugeValue, float64(c.st.Len()))
}

// redisPoolCollector reports the Redis client's connection pool at each
// scrape (on a cluster, summed over its nodes' pools).
type redisPoolCollector struct {
	client interface{ PoolStats() *redis.PoolStats }
}

var (
	rpConns = prometheus.NewDesc("sluice_redis_pool_connections",
		"Connections the Redis client holds open.", nil, nil)
	rpIdle = prometheus.NewDesc("sluice_redis_pool_idle_connections",
		"Of those, the connections idle.", nil, nil)
	rpHits = prometheus.NewDesc("sluice_redis_pool_hits_total",
		"Commands that found an idle connection in the pool.", nil, nil)
	rpMisses = prometheus.NewDesc("sluice_redis_pool_misses_total",
		"Commands that found none and opened or waited for one.", nil, nil)
	rpTimeouts = prometheus.NewDesc("sluice_redis_pool_timeouts_total",
		"Commands that gave up waiting for a connection (the pool was exhausted).", nil, nil)
	rpWait = prometheus.NewDesc("sluice_redis_pool_wait_seconds_total",
		"Time commands spent waiting for a connection, in seconds.", nil, nil)
)

func (redisPoolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{rpConns, rpIdle, rpHits, rpMisses, rpTimeouts, rpWait} {
		ch <- d
	}
}

func (c redisPoolCollector) Collect(ch chan<- prometheus.Metric) {
	ps := c.client.PoolStats()
	ch <- prometheus.MustNewConstMetric(rpConns, prometheus.GaugeValue, float64(ps.TotalConns))
	ch <- prometheus.MustNewConstMetric(rpIdle, prometheus.GaugeValue, float64(ps.IdleConns))
	ch <- prometheus.MustNewConstMetric(rpHits, prometheus.CounterValue, float64(ps.Hits))
	ch <- prometheus.MustNewConstMetric(rpMisses, prometheus.CounterValue, float64(ps.Misses))
	ch <- prometheus.MustNewConstMetric(rpTimeouts, prometheus.CounterValue, float64(ps.Timeouts))
	ch <- prometheus.MustNewConstMetric(rpWait, prometheus.CounterValue, float64(ps.WaitDurationNs)/1e9)
}
