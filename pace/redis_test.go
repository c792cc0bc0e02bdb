package pace_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/pace"
	"github.com/sluicehq/sluice/store/redisstore"
)

// The gate's queue is built from commands every store runs alike: on Redis,
// whose Lua mirror runs them, waiters in two processes take the lease in
// their order of arrival, one at a time, and the later ones wait for slots
// reserved in the next window.
func TestQueueOnRedis(t *testing.T) {
	srv := redistest.Start(t)
	store, err := redisstore.New(redis.NewClient(srv.Options()), redisstore.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	ctx := t.Context()
	procs := []*pace.Registry{pace.NewRegistry(store), pace.NewRegistry(store)}
	cfg := config(4, time.Second)
	cfg.Concurrency, cfg.LeaseTTL = 1, 5*time.Second
	configure(t, procs[0], "api", cfg)

	var started order
	var running, peak atomic.Int64
	release, holding := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	call := func(reg *pace.Registry, id string) {
		if _, err := pace.Call(ctx, pace.Define("api").Bind(reg), func(context.Context) (int, error) {
			n := running.Add(1)
			for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
			}
			started.add(id)
			if id == "holder" {
				close(holding)
				<-release
			}
			running.Add(-1)
			return 0, nil
		}); err != nil {
			t.Error(err)
		}
	}
	wg.Go(func() { call(procs[0], "holder") })
	select {
	case <-holding:
	case <-time.After(10 * time.Second): // a failure bound
		t.Fatal("the first call never ran")
	}
	want := []string{"holder"}
	for i := range 6 {
		id := fmt.Sprintf("waiter-%d", i)
		want = append(want, id)
		wg.Go(func() { call(procs[i%2], id) })
		waitFor(t, func() bool {
			s, err := procs[0].Stats(ctx, "api")
			return err == nil && s.Waiting == i+1
		})
	}
	close(release)
	wg.Wait()
	if got := started.get(); !slices.Equal(got, want) {
		t.Errorf("callers started in the order %v, want their order of arrival %v", got, want)
	}
	if peak.Load() != 1 {
		t.Errorf("%d calls ran at once, want 1", peak.Load())
	}
}

// waitFor polls cond until it holds, failing the test if it does not within
// a bound that is a failure bound, not a claim.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for range 2000 {
		if cond() {
			return
		}
		<-tick.C
	}
	t.Fatal("the condition never held")
}
