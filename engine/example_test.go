package engine_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/testclock"
	"github.com/sluicehq/sluice/store/memstore"
)

// newExampleEngine returns an engine on a memory store whose clock reads
// 2026-01-01T00:00:00Z until the example moves it.
func newExampleEngine() (*engine.Engine, *testclock.Clock) {
	clock := testclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	cfg := memstore.DefaultConfig()
	cfg.Clock = clock
	store, err := memstore.New(cfg)
	if err != nil {
		log.Fatal(err)
	}
	return engine.New(store), clock
}

// One hit charges a per-second and a per-minute window at once, all or
// nothing. A denial names the delay after which the same hit would pass.
func ExampleEngine_Apply() {
	eng, clock := newExampleEngine()
	ctx := context.Background()
	perSecond := engine.Window{Key: "api:sec", Kind: algo.KindFixed, Limit: 2, WindowMs: 1000}
	perMinute := engine.Window{Key: "api:min", Kind: algo.KindFixed, Limit: 3, WindowMs: 60_000}

	var out engine.StepResult // reused: the steady state allocates nothing
	for _, at := range []time.Duration{0, 100 * time.Millisecond, 200 * time.Millisecond, time.Second, 1100 * time.Millisecond} {
		clock.Set(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(at))
		if err := eng.Apply(ctx, "client-7f3a", &out, engine.Hit(1, perSecond, perMinute)); err != nil {
			log.Fatal(err)
		}
		r := out.Results[0]
		if r.Allowed {
			fmt.Printf("%-6v allowed, %d left\n", at, r.Remaining)
		} else {
			fmt.Printf("%-6v denied, retry after %v\n", at, time.Duration(r.RetryAfterMs)*time.Millisecond)
		}
	}
	// Output:
	// 0s     allowed, 1 left
	// 100ms  allowed, 0 left
	// 200ms  denied, retry after 800ms
	// 1s     allowed, 0 left
	// 1.1s   denied, retry after 58.9s
}

// A request with an operation id is safe to retry: the retry returns the
// recorded result and charges nothing.
func ExampleRequest_replay() {
	eng, _ := newExampleEngine()
	ctx := context.Background()
	send := func(opID string) {
		resp, err := eng.Do(ctx, &engine.Request{
			OperationID: opID, // from engine.NewOperationID(), reused on retry
			Steps: []engine.Step{{Partition: "user-42", Commands: []engine.Command{
				engine.Hit(1, engine.Window{Key: "exports", Kind: algo.KindSliding, Limit: 5, WindowMs: 3_600_000}),
			}}},
		})
		if err != nil {
			log.Fatal(err)
		}
		s := resp.Steps[0]
		fmt.Printf("%s: allowed=%v remaining=%d replayed=%v\n", opID, s.Results[0].Allowed, s.Results[0].Remaining, s.Replayed)
	}
	send("9c1e5f0a")
	send("9c1e5f0a") // a retry after a timeout
	send("4b7d2e61") // the next operation
	// Output:
	// 9c1e5f0a: allowed=true remaining=4 replayed=false
	// 9c1e5f0a: allowed=true remaining=4 replayed=true
	// 4b7d2e61: allowed=true remaining=3 replayed=false
}

// A kv.set with nx claims a key once: a replay fence for a one-time token.
// The losing claim is a denial, and the fence lasts as long as its TTL.
func ExampleSetIf() {
	eng, clock := newExampleEngine()
	ctx := context.Background()
	claim := func() {
		var out engine.StepResult
		fence := engine.SetIf("refresh:5d41402a", "used", time.Hour.Milliseconds(), engine.SetNX)
		if err := eng.Apply(ctx, "fence-5d41", &out, fence); err != nil {
			log.Fatal(err)
		}
		if out.Results[0].Allowed {
			fmt.Println("claimed")
		} else {
			fmt.Println("already used")
		}
	}
	claim()
	claim()
	clock.Advance(time.Hour)
	claim()
	// Output:
	// claimed
	// already used
	// claimed
}

// A login attempt reserves a source budget and a refundable target budget
// together; a successful login refunds the target, once. The target's window
// stays anchored to its first reservation.
func ExampleReserve() {
	eng, clock := newExampleEngine()
	ctx := context.Background()
	start := clock.Now().UnixMilli()
	source := engine.Budget{Key: "src:203.0.113.0", Limit: 10, WindowMs: 900_000}
	target := engine.Budget{Key: "acct:alice", Limit: 3, WindowMs: 900_000, Refundable: true}

	var out engine.StepResult
	apply := func(cmds ...engine.Command) {
		if err := eng.Apply(ctx, "login", &out, cmds...); err != nil {
			log.Fatal(err)
		}
	}
	reserve := func(receipt string) {
		apply(engine.Reserve(receipt, 1, source, target))
		r := out.Results[0]
		fmt.Printf("reserve %s: allowed=%v source left %d, target left %d, target resets at +%v\n",
			receipt, r.Allowed, r.Windows[0].Remaining, r.Windows[1].Remaining,
			time.Duration(r.Windows[1].ResetAt-start)*time.Millisecond)
	}
	reserve("attempt-1")
	clock.Advance(5 * time.Minute) // the password was right
	apply(engine.Refund("attempt-1"), engine.Refund("attempt-1"))
	fmt.Printf("refund: %v, again: %v\n", out.Results[0].Found, out.Results[1].Found)
	reserve("attempt-2")
	// Output:
	// reserve attempt-1: allowed=true source left 9, target left 2, target resets at +15m0s
	// refund: true, again: false
	// reserve attempt-2: allowed=true source left 8, target left 2, target resets at +15m0s
}

// A gate admits at most two calls in flight. Each lease has a TTL, so a
// crashed holder frees its slot; release is idempotent.
func ExampleAcquire() {
	eng, clock := newExampleEngine()
	ctx := context.Background()
	var out engine.StepResult
	acquire := func(lease string) {
		if err := eng.Apply(ctx, "upstream", &out, engine.Acquire("calls", lease, 2, 30_000)); err != nil {
			log.Fatal(err)
		}
		r := out.Results[0]
		if r.Allowed {
			fmt.Printf("%s: running, %d slot(s) free\n", lease, r.Remaining)
		} else {
			fmt.Printf("%s: wait %v\n", lease, time.Duration(r.RetryAfterMs)*time.Millisecond)
		}
	}
	acquire("worker-a")
	clock.Advance(10 * time.Second)
	acquire("worker-b")
	acquire("worker-c")
	if err := eng.Apply(ctx, "upstream", &out, engine.Release("calls", "worker-a")); err != nil {
		log.Fatal(err)
	}
	acquire("worker-c")
	// Output:
	// worker-a: running, 1 slot(s) free
	// worker-b: running, 0 slot(s) free
	// worker-c: wait 20s
	// worker-c: running, 0 slot(s) free
}

// A server keeps its own state in reserved partitions, which no request can
// name. A caller that builds a partition's name on every call builds it
// reserved once, from a prefix, and hands the whole name to
// ApplyReservedPartition.
func ExampleEngine_ApplyReservedPartition() {
	eng, _ := newExampleEngine()
	ctx := context.Background()
	prefix := engine.ReservedPartition("quotas/") // once
	var out engine.StepResult
	for _, caller := range []string{"alice", "bob", "alice"} {
		quota := engine.Budget{Key: "today", Limit: 2, WindowMs: 86_400_000}
		if err := eng.ApplyReservedPartition(ctx, prefix+caller, &out, engine.Reserve("", 1, quota)); err != nil {
			log.Fatal(err)
		}
		fmt.Println(caller, out.Results[0].Remaining)
	}
	// The same state, named the other way.
	if err := eng.ApplyReserved(ctx, "quotas/alice", &out, engine.Get("today")); err != nil {
		log.Fatal(err)
	}
	fmt.Println("alice has spent", out.Results[0].Value)
	// Output:
	// alice 1
	// bob 1
	// alice 0
	// alice has spent 2
}

// A server that charges a quota of its own before running a caller's
// request makes both wait for one fsync: the charge and the request run
// deferred, and one Sync comes before the answer. On a store that does not
// defer (here memstore) the same calls run as ApplyReservedPartition and
// Do, and Sync does nothing.
func ExampleEngine_DoDeferred() {
	eng, _ := newExampleEngine()
	ctx := context.Background()
	var out engine.StepResult
	quota := engine.Budget{Key: "today", Limit: 100, WindowMs: 86_400_000}
	if err := eng.ApplyReservedPartitionDeferred(ctx, engine.ReservedPartition("quotas/alice"), &out, engine.Reserve("", 1, quota)); err != nil {
		log.Fatal(err)
	}
	req := &engine.Request{OperationID: engine.NewOperationID(), Steps: []engine.Step{
		{Partition: "users", Commands: []engine.Command{engine.Incr("alice", 1, 60_000)}},
	}}
	resp, err := eng.DoDeferred(ctx, req)
	// Sync whether DoDeferred failed or not: the charge is pending either way.
	if serr := eng.Sync(ctx); serr != nil {
		log.Fatal("answer 503, never a grant: ", serr)
	}
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("quota left", out.Results[0].Remaining, "count", resp.Steps[0].Results[0].Int)
	// Output:
	// quota left 99 count 1
}
