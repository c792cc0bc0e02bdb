package diskstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io/fs"
	"math/rand/v2"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/engine"
)

// BenchmarkSteadyRequests runs the store's share of the server's
// 32-decision load (bench/rpcbench's sluice-32) from 64 writers: requests
// of 4 steps of 8 GCRA hits on 4 consecutive of 1,250 partitions of 8 keys,
// each with a fresh operation id, names of 64 hexadecimal digits as the
// client's hashes are, fsync always. It measures the steady state, which a
// fresh store's first minutes do not: before the measured requests it
// warms the store up with the same load for engine.ReplayTTL and a minute,
// so that the first replay bucket has been swept (-benchtime 600000x then
// measures about half a minute here). Besides decisions/s it reports, per
// decision measured, the bytes written to Pebble's log (log-B), to tables
// by its flushes (flushed-B), and read and written by its compactions
// (compacted-B, compaction-written-B), and the directory's size at the
// end.
func BenchmarkSteadyRequests(b *testing.B) {
	const partitions, perPartition, steps = 1_250, 8, 4
	cfg := DefaultConfig()
	cfg.Dir = b.TempDir()
	s, err := Open(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		if err := s.Close(); err != nil {
			b.Error(err)
		}
	}()
	eng := engine.New(s)
	hashed := func(name string) string {
		sum := sha256.Sum256([]byte(name))
		return hex.EncodeToString(sum[:])
	}
	parts := make([]string, partitions)
	for i := range parts {
		parts[i] = hashed("partition-" + strconv.Itoa(i))
	}
	keys := make([]string, perPartition)
	for i := range keys {
		keys[i] = hashed("key-" + strconv.Itoa(i))
	}

	request := func(ctx context.Context, rng *rand.Rand, req *engine.Request) error {
		p := rng.IntN(partitions)
		for i := range req.Steps {
			req.Steps[i].Partition = parts[(p+i)%partitions]
		}
		req.OperationID = engine.NewOperationID()
		_, err := eng.Do(ctx, req)
		return err
	}
	newRequest := func() *engine.Request { // one per writer: nothing shared
		req := &engine.Request{Mode: engine.All, Steps: make([]engine.Step, steps)}
		for i := range req.Steps {
			for _, k := range keys {
				req.Steps[i].Commands = append(req.Steps[i].Commands,
					engine.Hit(1, engine.Window{Key: k, Kind: algo.KindGCRA, Limit: 1_000_000, WindowMs: 60_000}))
			}
		}
		return req
	}

	// The warm-up: the same load until the first replay bucket has been
	// swept, skipped by the one-request run that sizes the benchmark.
	if b.N > 1 {
		ctx, cancel := context.WithTimeout(context.Background(), engine.ReplayTTL+time.Duration(bucketMs)*time.Millisecond)
		var wg sync.WaitGroup
		for range 64 {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
				req := newRequest()
				for ctx.Err() == nil {
					if err := request(context.Background(), rng, req); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		cancel()
	}
	before := s.db.Metrics()

	b.SetParallelism(max(1, 64/runtime.GOMAXPROCS(0)))
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		rng := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
		req := newRequest()
		for pb.Next() {
			if err := request(ctx, rng, req); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()

	decisions := float64(b.N * steps * perPartition)
	after := s.db.Metrics()
	perDecision := func(f func(m *pebble.Metrics) uint64) float64 {
		return float64(f(after)-f(before)) / decisions
	}
	b.ReportMetric(decisions/b.Elapsed().Seconds(), "decisions/s")
	b.ReportMetric(perDecision(func(m *pebble.Metrics) uint64 { return m.WAL.BytesWritten }), "log-B/decision")
	b.ReportMetric(perDecision(func(m *pebble.Metrics) uint64 {
		return m.Levels[0].TableBytesFlushed + m.Levels[0].BlobBytesFlushed
	}), "flushed-B/decision")
	b.ReportMetric(perDecision(func(m *pebble.Metrics) uint64 {
		t := m.Total()
		return t.TableBytesRead + t.BlobBytesReadEstimate
	}), "compacted-B/decision")
	b.ReportMetric(perDecision(func(m *pebble.Metrics) uint64 {
		t := m.Total()
		return t.TableBytesCompacted + t.BlobBytesCompacted
	}), "compaction-written-B/decision")
	var size int64
	// Pebble may delete an obsolete file during the walk.
	err = filepath.WalkDir(cfg.Dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			var info fs.FileInfo
			if info, err = d.Info(); err == nil {
				size += info.Size()
			}
		}
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(size)/1e6, "dir-MB")
}
