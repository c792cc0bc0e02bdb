package pace_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/pace"
	"github.com/sluicehq/sluice/store/memstore"
)

// benchLimiter returns a limiter on a memory store whose limit never binds
// (4,096 per millisecond), so that a benchmark measures the cost of the
// bookkeeping around fn: a take without a cap, or a lease, a take and a
// release with one. Most of it is the take's replay record (the engine
// encodes its result and hashes its commands), the price of answering a
// take resent after a lost answer only once.
func benchLimiter(b *testing.B, concurrency int, opts ...pace.RegistryOption) *pace.Bound {
	store, err := memstore.New(memstore.DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { store.Close() })
	reg := pace.NewRegistry(store, opts...)
	cfg := pace.DefaultConfig()
	cfg.Limit, cfg.Window, cfg.Concurrency = pace.MaxLimit, time.Millisecond, concurrency
	if err := reg.Configure(context.Background(), "bench", cfg); err != nil {
		b.Fatal(err)
	}
	return pace.Define("bench").Bind(reg)
}

func BenchmarkCall(b *testing.B) {
	for _, tc := range []struct {
		name    string
		cap     int
		metrics bool
	}{{"uncapped", 0, false}, {"uncapped/metrics=on", 0, true}, {"capped", pace.MaxConcurrency, false}} {
		var opts []pace.RegistryOption
		if tc.metrics {
			opts = append(opts, pace.WithRegisterer(prometheus.NewRegistry()))
		}
		b.Run(tc.name, func(b *testing.B) {
			api := benchLimiter(b, tc.cap, opts...)
			fn := func(context.Context) (int, error) { return 1, nil }
			b.ReportAllocs()
			for b.Loop() {
				if _, err := pace.Call(context.Background(), api, fn); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(tc.name+"/parallel", func(b *testing.B) {
			api := benchLimiter(b, tc.cap, opts...)
			fn := func(context.Context) (int, error) { return 1, nil }
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := pace.Call(context.Background(), api, fn); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
