package redisstore_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/store/redisstore"
)

// TestSentinel opens a store from a redis+sentinel:// URL naming one
// sentinel that watches a primary with one replica, writes through it, and
// kills the primary: the sentinel promotes the replica (about a second
// after the primary stops answering), the client follows it, and what was
// replicated before the kill is there.
func TestSentinel(t *testing.T) {
	if testing.Short() {
		t.Skip("sentinel failover: skipped in -short mode")
	}
	r := redistest.StartReplicated(t)
	sentinel := redistest.StartSentinel(t, r.Primary)
	opts, err := redisstore.ParseURL("redis+sentinel://" + sentinel.Addr + "/" + redistest.SentinelPrimary)
	if err != nil {
		t.Fatal(err)
	}
	cfg := freshConfig(nil)
	cfg.Timeout = 200 * time.Millisecond
	s, err := redisstore.New(redis.NewUniversalClient(opts), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	eng := engine.New(s)
	var out engine.StepResult
	for i := range 5 {
		if err := eng.Apply(t.Context(), "p", &out, engine.Incr("n", 1, 600_000)); err != nil || out.Results[0].Int != int64(i+1) {
			t.Fatalf("increment %d through the sentinel's primary: %v %+v", i, err, out.Results)
		}
	}
	// Every increment is on the replica before the kill.
	if n, err := r.Primary.Client(t).Wait(t.Context(), 1, 5*time.Second).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT: %d replicas, %v", n, err)
	}
	r.Primary.Stop()

	deadline := time.Now().Add(time.Minute)
	for {
		err := eng.Apply(t.Context(), "p", &out, engine.Get("n"))
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no answer a minute after the primary died: %v\n%s", err, sentinel.LogTail())
		}
		time.Sleep(50 * time.Millisecond) // polling for the failover, with a deadline
	}
	if out.Results[0].Value != "5" {
		t.Fatalf("after the failover n = %q, want the 5 replicated increments", out.Results[0].Value)
	}
	if err := eng.Apply(t.Context(), "p", &out, engine.Incr("n", 1, 600_000)); err != nil || out.Results[0].Int != 6 {
		t.Fatalf("increment on the promoted primary: %v %+v", err, out.Results)
	}
	role, err := r.Replica.Client(t).Do(t.Context(), "role").Slice()
	if err != nil || len(role) == 0 || role[0] != "master" {
		t.Errorf("the former replica's role is %v (%v), want master", role, err)
	}
}
