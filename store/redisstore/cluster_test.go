package redisstore_test

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/store/redisstore"
)

// TestClusterBatchesStayInOneSlot runs 100,000 batches spread over 16
// partitions, themselves spread over the three masters of a cluster. Every
// batch names several keys — windows, a counter, budgets, a receipt, a
// replay record — and every fourth refunds a receipt, whose budgets the
// script reaches through the partition's key prefix. Not one batch may
// fail: a key outside the partition's slot would fail with CROSSSLOT (or
// with Redis's "non local key" error for a key the script names itself).
func TestClusterBatchesStayInOneSlot(t *testing.T) {
	const (
		batches    = 100_000
		partitions = 16
		workers    = 64
	)
	if testing.Short() {
		t.Skip("100,000 batches: skipped in -short mode")
	}
	cl := redistest.StartCluster(t, 3)
	raw := cl.Client(t)
	// The property is that no batch spans slots, not latency: the timeout
	// is only a failure bound, wide enough for a machine under heavy load.
	cfg := freshConfig(nil)
	cfg.Timeout = 30 * time.Second
	s, err := redisstore.New(redis.NewClusterClient(cl.Options()), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	eng := engine.New(s)

	names := make([]string, partitions)
	masters := map[int]int{}
	for i := range names {
		names[i] = "tenant-" + strconv.Itoa(i)
		slot, err := raw.ClusterKeySlot(t.Context(), "{"+names[i]+"}").Result()
		if err != nil {
			t.Fatal(err)
		}
		masters[int(slot)*3/16384]++
	}
	if len(masters) != 3 {
		t.Fatalf("the partitions land on %d masters (%v), want all 3", len(masters), masters)
	}

	var next, failed atomic.Int64
	var mu sync.Mutex
	var firstErr error
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				n := next.Add(1) - 1
				if n >= batches {
					return
				}
				req := clusterRequest(n, names[n%partitions])
				if _, err := eng.Do(t.Context(), req); err != nil {
					failed.Add(1)
					mu.Lock()
					firstErr = errors.Join(firstErr, fmt.Errorf("batch %d: %w", n, err))
					mu.Unlock()
					if failed.Load() > 10 {
						return
					}
				}
			}
		})
	}
	wg.Wait()
	if n := failed.Load(); n != 0 {
		t.Fatalf("%d of %d batches failed: %v", n, batches, firstErr)
	}
	t.Logf("%d batches over %d partitions on 3 masters %v: no error", batches, partitions, masters)
}

// clusterRequest is batch n: a replayable step on partition p touching
// seven keys, with a refund of the previous receipt every fourth batch.
func clusterRequest(n int64, p string) *engine.Request {
	receipt := "rc-" + strconv.FormatInt(n%8, 10)
	cmds := []engine.Command{
		engine.Hit(1,
			engine.Window{Key: "minute", Kind: algo.KindGCRA, Limit: 1 << 30, WindowMs: 60_000},
			engine.Window{Key: "hour", Kind: algo.KindSliding, Limit: 1 << 30, WindowMs: 3_600_000}),
		engine.Incr("count", 1, 3_600_000),
		engine.Reserve(receipt, 1,
			engine.Budget{Key: "src", Limit: 1 << 30, WindowMs: 3_600_000},
			engine.Budget{Key: "tgt", Limit: 1 << 30, WindowMs: 3_600_000, Refundable: true}),
	}
	if n%4 == 0 {
		cmds = append(cmds, engine.Refund(receipt))
	}
	return &engine.Request{
		OperationID: "op-" + strconv.FormatInt(n, 10),
		Steps:       []engine.Step{{Partition: p, Commands: cmds}},
	}
}

// TestClusterRedirectIsUnavailable sends batches to a cluster node through
// a client that cannot follow redirections (a single-node client): a
// partition whose slot lives on another node answers MOVED, which must be
// ErrUnavailable with no result, never an admission; one on the node
// itself runs.
func TestClusterRedirectIsUnavailable(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	raw := cl.Client(t)
	s, err := redisstore.New(redis.NewClient(cl.Masters[0].Options()), freshConfig(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	eng := engine.New(s)
	hit := engine.Hit(1, engine.Window{Key: "w", Kind: algo.KindFixed, Limit: 10, WindowMs: 60_000})
	var local, remote string
	for i := 0; local == "" || remote == ""; i++ {
		p := "p" + strconv.Itoa(i)
		slot, err := raw.ClusterKeySlot(t.Context(), "{"+p+"}").Result()
		if err != nil {
			t.Fatal(err)
		}
		if slot < 16384/3 {
			local = p
		} else {
			remote = p
		}
	}
	var out engine.StepResult
	if err := eng.Apply(t.Context(), local, &out, hit); err != nil || !out.Results[0].Allowed {
		t.Fatalf("batch on the node's own slot: %v", err)
	}
	err = eng.Apply(t.Context(), remote, &out, hit)
	if !errors.Is(err, engine.ErrUnavailable) || !strings.Contains(err.Error(), "MOVED") || len(out.Results) != 0 {
		t.Fatalf("batch on another node's slot: %v with %d results, want ErrUnavailable (MOVED) and none", err, len(out.Results))
	}
}
