package diskstore_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/cputime"
	"github.com/sluicehq/sluice/store/diskstore"
)

// BenchmarkJoint measures the store's share of a fair RPC's charge: one
// joint step of the shape admission makes (a res.reserve of a source with
// its two IPv6 tiers in the partition named by the coarsest, and one of
// a principal in a partition of its own), deferred, then a Sync, under
// fsync always. Each of the 64 goroutines charges identities of its own,
// named as the server receives them (hex SHA-256), as bench/rpcbench's
// callers do. Besides the wall time it reports cpu-ns/op, the process CPU
// time per step (getrusage), steadier on a shared machine.
func BenchmarkJoint(b *testing.B) {
	cfg := diskstore.DefaultConfig()
	cfg.Dir = b.TempDir()
	st, err := diskstore.Open(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	eng := engine.New(st)
	var callers atomic.Int64
	const day = "2026-11-30"
	hash := func(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }

	b.ReportAllocs()
	setParallelism(b)
	before, ok := cputime.Process()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		id := strconv.FormatInt(callers.Add(1), 10)
		src, n56, n48, prin := hash("src"+id), hash("n56"+id), hash("n48"+id), hash("principal"+id)
		budget := func(key string) engine.Budget {
			return engine.Budget{Key: key, Limit: algo.MaxLimit, WindowMs: 2 * 24 * 60 * 60 * 1000}
		}
		cmds := []engine.Command{
			engine.Reserve("", 1, budget("src/"+day+"/"+src), budget("t/v6/56/"+day+"/"+n56), budget("t/v6/48/"+day+"/"+n48)),
			engine.Reserve("", 1, budget("p/"+day)),
		}
		steps := []engine.Step{
			{Partition: engine.ReservedPartition("adm/q/default/" + n48), Commands: cmds[0:1]},
			{Partition: engine.ReservedPartition("adm/p/default/" + prin), Commands: cmds[1:2]},
		}
		outs := make([]engine.StepResult, 2)
		ctx := context.Background()
		for pb.Next() {
			if err := eng.ApplyReservedJointDeferred(ctx, steps, outs); err != nil {
				b.Error(err)
				return
			}
			if outs[0].Denied || outs[1].Denied {
				b.Error("a charge was refused")
				return
			}
			if err := eng.Sync(ctx); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	if after, ok2 := cputime.Process(); ok && ok2 && b.N > 0 {
		b.ReportMetric(float64(after-before)/float64(b.N), "cpu-ns/op")
	}
}
