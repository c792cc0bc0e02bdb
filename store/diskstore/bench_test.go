package diskstore_test

import (
	"context"
	"encoding/binary"
	"math/rand/v2"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/store/diskstore"
)

// The benchmarks run 64 goroutines whatever GOMAXPROCS is, the load the
// design is measured at: a store's fsync groups only fill with that many
// writers in flight.
const benchWriters = 64

func setParallelism(b *testing.B) {
	b.SetParallelism(max(1, benchWriters/runtime.GOMAXPROCS(0)))
}

// BenchmarkPebbleCommit is the reference floor: a one-key Pebble batch
// committed by 64 writers, with the same Pebble options the store uses.
// Each writer sets its own key so the floor measures the commit pipeline,
// not one hot key's memtable entry.
func BenchmarkPebbleCommit(b *testing.B) {
	for _, mode := range []struct {
		name string
		opts *pebble.WriteOptions
	}{{"sync", pebble.Sync}, {"nosync", pebble.NoSync}} {
		b.Run(mode.name, func(b *testing.B) {
			cfg := diskstore.DefaultConfig()
			db, err := pebble.Open(b.TempDir(), &pebble.Options{
				CacheSize:          cfg.CacheBytes,
				MemTableSize:       uint64(cfg.MemTableBytes),
				FormatMajorVersion: pebble.FormatNewest,
				Logger:             quietLogger{},
			})
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			var writer atomic.Int64
			b.ReportAllocs()
			setParallelism(b)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				key := binary.BigEndian.AppendUint64([]byte("k"), uint64(writer.Add(1)))
				val := make([]byte, 1+8+16) // the size of a fixed window record
				for pb.Next() {
					batch := db.NewBatch()
					_ = batch.Set(key, val, nil)
					if err := batch.Commit(mode.opts); err != nil {
						b.Error(err)
						return
					}
					_ = batch.Close()
				}
			})
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "commits/s")
		})
	}
}

// BenchmarkHit measures single-window win.hit decisions through the
// engine, every hit admitted (so every decision is a durable write), on one
// hot key and spread over 1,000,000 keys, under each fsync policy.
func BenchmarkHit(b *testing.B) {
	for _, keys := range []int{1, 1_000_000} {
		for _, sync := range []diskstore.SyncPolicy{diskstore.SyncAlways, diskstore.SyncOnInterval, diskstore.SyncNever} {
			b.Run("keys="+strconv.Itoa(keys)+"/fsync="+string(sync), func(b *testing.B) {
				benchHit(b, keys, sync)
			})
		}
	}
}

func benchHit(b *testing.B, keys int, sync diskstore.SyncPolicy) {
	cfg := diskstore.DefaultConfig()
	cfg.Dir = b.TempDir()
	cfg.Sync = sync
	s, err := diskstore.Open(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	window := engine.Window{Key: "w", Kind: algo.KindFixed, Limit: algo.MaxLimit, WindowMs: 3_600_000}
	hitRandomly(b, engine.New(s), partitionNames(keys), window)
}

// hitRandomly runs one hit of window a call on a random partition of
// names, from 64 goroutines, every hit admitted.
func hitRandomly(b *testing.B, eng *engine.Engine, names []string, window engine.Window) {
	b.ReportAllocs()
	setParallelism(b)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		var out engine.StepResult
		cmds := []engine.Command{engine.Hit(1, window)}
		rng := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
		for pb.Next() {
			name := names[0]
			if len(names) > 1 {
				name = names[rng.IntN(len(names))]
			}
			if err := eng.Apply(ctx, name, &out, cmds...); err != nil {
				b.Error(err)
				return
			}
			if !out.Results[0].Allowed {
				b.Error("hit denied")
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
}

// BenchmarkRequest measures replay-safe requests through engine.Do, the
// store's share of the server's RPC benchmark (bench/rpcbench): each
// request has a fresh operation id, so every step writes a replay record
// besides its windows. "1x1" is one hit per request on one of 10,000 keys;
// "4x8" is 4 steps of 8 hits, every key of 4 consecutive partitions of 8
// keys (32 decisions). The windows are GCRA windows of 1,000,000 a minute,
// so every hit is admitted and each record drains between its hits.
func BenchmarkRequest(b *testing.B) {
	for _, shape := range []struct {
		name        string
		steps, cmds int
	}{{"1x1", 1, 1}, {"4x8", 4, 8}} {
		for _, sync := range []diskstore.SyncPolicy{diskstore.SyncAlways, diskstore.SyncOnInterval, diskstore.SyncNever} {
			b.Run(shape.name+"/fsync="+string(sync), func(b *testing.B) {
				benchRequest(b, shape.steps, shape.cmds, sync)
			})
		}
	}
}

func benchRequest(b *testing.B, steps, cmds int, sync diskstore.SyncPolicy) {
	const keys, perPartition = 10_000, 8
	cfg := diskstore.DefaultConfig()
	cfg.Dir = b.TempDir()
	cfg.Sync = sync
	s, err := diskstore.Open(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	eng := engine.New(s)
	partitions := make([]string, keys/perPartition)
	for i := range partitions {
		partitions[i] = "tenant-" + strconv.Itoa(i)
	}
	windowKeys := make([]string, perPartition)
	for i := range windowKeys {
		windowKeys[i] = "limit-" + strconv.Itoa(i)
	}
	hit := func(key string) engine.Command {
		return engine.Hit(1, engine.Window{Key: key, Kind: algo.KindGCRA, Limit: 1_000_000, WindowMs: 60_000})
	}

	b.ReportAllocs()
	setParallelism(b)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		rng := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
		req := &engine.Request{Mode: engine.All, Steps: make([]engine.Step, steps)}
		for i := range req.Steps {
			for j := range cmds {
				req.Steps[i].Commands = append(req.Steps[i].Commands, hit(windowKeys[j]))
			}
		}
		for pb.Next() {
			if steps == 1 && cmds == 1 {
				k := rng.IntN(keys)
				req.Steps[0].Partition = partitions[k/perPartition]
				req.Steps[0].Commands[0].Windows[0].Key = windowKeys[k%perPartition]
			} else {
				p := rng.IntN(len(partitions))
				for i := range req.Steps {
					req.Steps[i].Partition = partitions[(p+i)%len(partitions)]
				}
			}
			req.OperationID = engine.NewOperationID()
			resp, err := eng.Do(ctx, req)
			if err != nil {
				b.Error(err)
				return
			}
			for i := range resp.Steps {
				if resp.Steps[i].Denied {
					b.Error("hit denied")
					return
				}
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N*steps*cmds)/b.Elapsed().Seconds(), "decisions/s")
}

var (
	namesOnce sync.Once
	manyNames []string
)

// partitionNames returns n partition names; the million-key set is built
// once per process.
func partitionNames(n int) []string {
	if n == 1 {
		return []string{"hot"}
	}
	namesOnce.Do(func() {
		manyNames = make([]string, 1_000_000)
		for i := range manyNames {
			manyNames[i] = "p" + strconv.Itoa(i)
		}
	})
	return manyNames[:n]
}

// quietLogger discards Pebble's messages.
type quietLogger struct{}

func (quietLogger) Infof(string, ...any)  {}
func (quietLogger) Errorf(string, ...any) {}
func (quietLogger) Fatalf(format string, args ...any) {
	panic("pebble: fatal: " + format)
}

// BenchmarkRetry measures the retry of a recorded request (the same
// operation id and commands, answered from its replay record) on a hot
// partition that has committed pending other requests since its last
// checkpoint: a client retrying after a timeout, during a burst. The
// retry must not cost more as the partition's pending journal grows.
func BenchmarkRetry(b *testing.B) {
	for _, pending := range []int{100, 10_000, 100_000} {
		b.Run("pending="+strconv.Itoa(pending), func(b *testing.B) {
			cfg := diskstore.DefaultConfig()
			cfg.Dir = b.TempDir()
			cfg.Sync = diskstore.SyncNever
			cfg.SweepInterval = time.Hour // no checkpoint while loading
			s, err := diskstore.Open(cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			eng := engine.New(s)
			request := func(id string) *engine.Request {
				return &engine.Request{OperationID: id, Steps: []engine.Step{{
					Partition: "hot",
					Commands: []engine.Command{engine.Hit(1, engine.Window{
						Key: "api", Kind: algo.KindGCRA, Limit: 1 << 40, WindowMs: 60_000})},
				}}}
			}
			ctx := context.Background()
			retried := request(engine.NewOperationID())
			if _, err := eng.Do(ctx, retried); err != nil {
				b.Fatal(err)
			}
			for range pending {
				if _, err := eng.Do(ctx, request(engine.NewOperationID())); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			for b.Loop() {
				resp, err := eng.Do(ctx, retried)
				if err != nil {
					b.Fatal(err)
				}
				if !resp.Steps[0].Replayed {
					b.Fatal("the retry was charged again")
				}
			}
		})
	}
}

// BenchmarkColdPartitions measures hits on partitions that are mostly not
// in memory: 500,000 partitions, each written once, at most 50,000
// resident, hits on random ones (fsync never). Most hits load their
// partition from disk (a prefix scan of its records and a seek among the
// replay records) and evict another, writing its rows first if a
// checkpoint has not yet: the cost of a workload of many more clients
// than MaxResident, such as a limit per client address.
func BenchmarkColdPartitions(b *testing.B) {
	cfg := diskstore.DefaultConfig()
	cfg.Dir = b.TempDir()
	cfg.Sync = diskstore.SyncNever
	cfg.MaxResident = 50_000
	s, err := diskstore.Open(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	eng := engine.New(s)
	names := partitionNames(1_000_000)[:500_000]
	window := engine.Window{Key: "w", Kind: algo.KindFixed, Limit: algo.MaxLimit, WindowMs: 3_600_000}
	ctx := context.Background()
	var out engine.StepResult
	for _, n := range names {
		if err := eng.Apply(ctx, n, &out, engine.Hit(1, window)); err != nil {
			b.Fatal(err)
		}
	}
	hitRandomly(b, eng, names, window)
}
