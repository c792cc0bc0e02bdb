package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/store/redisstore"
)

// TestFailoverLoss measures what a failover costs, rather than assuming
// it: about 1,000 hits per second on one key (a fixed window of 900 per
// second) go to a primary with one replica; the primary is killed with
// SIGKILL, the replica promoted, and the load moves to it. Redis replicates
// asynchronously, so the promoted replica may lack the primary's last
// batches. The test reports, per window, the admissions beyond the limit,
// and how many acknowledged batches lost their replay record (found by
// replaying every acknowledged operation on the new primary).
//
// It runs each protection — none (the server defaults),
// min-replicas-to-write 1, and the store's WaitReplicas 1 (WAIT after
// every batch) — twice: with the replica in sync when the primary dies,
// and with the replica's link cut for the last 200 hits before (it is
// pointed at an address where nothing listens, keeping its data, as a
// network partition between the two would), the case where asynchronous
// replication loses acknowledged writes. Where a protection refuses writes
// without a replica, one is attached to the promoted primary at once, as
// an operator's failover would reattach the old primary.
//
// What it asserts holds whatever the timing: the new primary serves, no
// window admits more beyond its limit than the admissions it lost, and
// with WaitReplicas no answered admission is lost — what the package
// documentation and docs/operations.md promise of it — in sync or cut off.
func TestFailoverLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("failover measurement: skipped in -short mode")
	}
	minReplicas := []string{"--min-replicas-to-write", "1", "--min-replicas-max-lag", "10"}
	for _, c := range []failoverCase{
		{name: "async"},
		{name: "min-replicas-to-write", extra: minReplicas, reattach: true},
		{name: "wait", wait: 1, reattach: true},
		{name: "async/replica-cut", cut: true},
		{name: "min-replicas-to-write/replica-cut", extra: minReplicas, reattach: true, cut: true},
		{name: "wait/replica-cut", wait: 1, reattach: true, cut: true},
	} {
		t.Run(c.name, func(t *testing.T) { failover(t, c) })
	}
}

// failoverCase is one failover scenario.
type failoverCase struct {
	name     string
	extra    []string // redis-server arguments of every server
	wait     int      // Config.WaitReplicas of the load's stores
	reattach bool     // attach a replica to the promoted primary at once
	cut      bool     // cut the replica's link for the last 200 hits before the kill
}

// outcome is one hit as its caller saw it.
type outcome struct {
	op      string
	allowed bool
	window  int64 // the window's end: its ResetAt
}

func failover(t *testing.T, fc failoverCase) {
	const (
		rate  = 1000 // hits per second
		limit = 900  // per window: most hits admit, so most writes matter
		winMs = 1000
		cut   = 200 // hits between the cut and the kill
	)
	r := redistest.StartReplicated(t, fc.extra...)
	open := func(s *redistest.Server, wait int) *redisstore.Store {
		opts := s.Options()
		cfg := redisstore.DefaultConfig()
		cfg.Timeout = 200 * time.Millisecond
		cfg.WaitReplicas = wait
		store, err := redisstore.New(redis.NewClient(opts), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { store.Close() })
		return store
	}
	win := engine.Window{Key: "hot", Kind: algo.KindFixed, Limit: limit, WindowMs: winMs}
	request := func(op string) *engine.Request {
		return &engine.Request{OperationID: op, Steps: []engine.Step{{Partition: "p", Commands: []engine.Command{engine.Hit(1, win)}}}}
	}

	var mu sync.Mutex
	var seen []outcome
	failed := 0
	var eng *engine.Engine
	setEngine := func(e *engine.Engine) { mu.Lock(); eng = e; mu.Unlock() }
	setEngine(engine.New(open(r.Primary, fc.wait)))

	ctx, stop := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(time.Second / rate)
		defer tick.Stop()
		for n := 0; ; n++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			op := "op-" + strconv.Itoa(n)
			mu.Lock()
			e := eng
			mu.Unlock()
			wg.Go(func() {
				resp, err := e.Do(ctx, request(op))
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					failed++
					return
				}
				res := resp.Steps[0].Results[0]
				seen = append(seen, outcome{op: op, allowed: res.Allowed, window: res.ResetAt})
			})
		}
	})

	// Two seconds of load on the primary, two on the promoted replica,
	// counted in hits rather than timed.
	attempts := func() int { mu.Lock(); defer mu.Unlock(); return len(seen) + failed }
	waitFor := func(n int) {
		deadline := time.Now().Add(time.Minute)
		for attempts() < n {
			if time.Now().After(deadline) {
				t.Fatalf("%d hits attempted, want %d", attempts(), n)
			}
			time.Sleep(10 * time.Millisecond) // polling a condition with a deadline
		}
	}
	failedAtCut := 0
	if fc.cut {
		waitFor(2*rate - cut)
		mu.Lock()
		failedAtCut = failed
		mu.Unlock()
		// The replica keeps its data while it looks for a primary where
		// nothing listens: from now on, nothing reaches it.
		replica := r.Replica.Client(t)
		if err := replica.Do(t.Context(), "replicaof", "127.0.0.1", "1").Err(); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(2 * rate)
	mu.Lock()
	before, failedBefore := len(seen), failed
	mu.Unlock()
	if !fc.cut {
		failedAtCut = failedBefore
	}
	r.Primary.Stop() // SIGKILL
	killed := time.Now()
	if err := r.Promote(t.Context()); err != nil {
		t.Fatal(err)
	}
	setEngine(engine.New(open(r.Replica, fc.wait)))
	promoted := time.Since(killed)
	if fc.reattach {
		redistest.StartReplica(t, r.Replica, fc.extra...)
	}
	waitFor(before + failedBefore + 2*rate)
	stop()
	wg.Wait()

	// Admissions per window, as the callers saw them.
	admitted := map[int64]int{}
	acked := map[string]outcome{}
	for _, o := range seen {
		if o.allowed {
			admitted[o.window]++
			acked[o.op] = o
		}
	}
	// Replay every acknowledged admission on the new primary: a batch
	// whose replay record survived is replayed; one that is charged afresh
	// lost its record, and its admission is missing from its window.
	e := engine.New(open(r.Replica, 0))
	lost := map[int64]int{}
	lostTotal := 0
	for op, o := range acked {
		resp, err := e.Do(t.Context(), request(op))
		switch {
		case errors.Is(err, engine.ErrUnavailable):
			// No record to replay, and the charge afresh was refused
			// (NOREPLICAS): the record is lost all the same.
		case err != nil:
			t.Fatalf("replaying %s on the promoted replica: %v", op, err)
		case resp.Steps[0].Replayed:
			continue
		}
		lost[o.window]++
		lostTotal++
	}
	var windows []int64
	for w := range admitted {
		windows = append(windows, w)
	}
	sort.Slice(windows, func(i, j int) bool { return windows[i] < windows[j] })
	overTotal, worst := 0, 0
	var perWindow []string
	for _, w := range windows {
		over := max(0, admitted[w]-limit)
		overTotal += over
		worst = max(worst, over)
		if over > lost[w] {
			t.Errorf("window ending %d admitted %d (limit %d) but lost only %d acknowledged admissions", w, admitted[w], limit, lost[w])
		}
		perWindow = append(perWindow, fmt.Sprintf("%d/%d/%d", admitted[w], over, lost[w]))
	}
	// WaitReplicas answers an admission only once the replica has it: the
	// promoted replica holds every one, whether it was in sync or cut off
	// (docs/operations.md, "Failover"), and so no window admits beyond its
	// limit.
	if fc.wait > 0 && lostTotal > 0 {
		t.Errorf("with WaitReplicas %d, %d answered admissions are missing from the promoted replica (per window, admitted/beyond the limit/lost: %s)",
			fc.wait, lostTotal, strings.Join(perWindow, ", "))
	}
	if len(seen) <= before {
		t.Fatalf("no hit answered after the failover (%d failed)", failed)
	}
	t.Logf("%d hits answered (%d before the kill); failed: %d while the replica was cut off, %d after the kill (promotion took %v); "+
		"%d acknowledged admissions lost their replay record; admissions beyond the limit: %d in all, at most %d in one window of %d; "+
		"per window, admitted/beyond the limit/lost: %s",
		len(seen), before, failedBefore-failedAtCut, failed-failedBefore, promoted.Round(time.Millisecond), lostTotal, overTotal, worst, limit,
		strings.Join(perWindow, ", "))
}
