package redisstore_test

import (
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/store/redisstore"
)

// waitConfig is a store configuration waiting for one replica.
func waitConfig() redisstore.Config {
	cfg := freshConfig(nil)
	cfg.WaitReplicas, cfg.WaitTimeout = 1, 50*time.Millisecond
	return cfg
}

// TestWaitReplicas runs batches with WaitReplicas 1 on a primary with one
// replica: they succeed while the replica acknowledges, and fail with
// ErrUnavailable while it is paused — though the primary applied them, as
// a store without the wait then reads.
func TestWaitReplicas(t *testing.T) {
	r := redistest.StartReplicated(t)
	cfg := waitConfig()
	// A replica answers WAIT within a millisecond on an idle machine; on a
	// busy one it may take far longer, and only the paused replica must
	// make the wait fail.
	cfg.WaitTimeout = 3 * time.Second
	s, err := redisstore.New(redis.NewClient(r.Primary.Options()), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	plain := cfg
	plain.WaitReplicas = 0
	reader, err := redisstore.New(redis.NewClient(r.Primary.Options()), plain)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	eng, read := engine.New(s), engine.New(reader)
	var out engine.StepResult
	incr := engine.Incr("n", 1, 60_000)

	if err := eng.Apply(t.Context(), "p", &out, incr); err != nil || out.Results[0].Int != 1 {
		t.Fatalf("with the replica acknowledging: %v, %+v", err, out.Results)
	}
	if err := r.Replica.Pause(); err != nil {
		t.Fatal(err)
	}
	err = eng.Apply(t.Context(), "p", &out, incr)
	if rerr := r.Replica.Resume(); rerr != nil {
		t.Fatal(rerr)
	}
	if !errors.Is(err, engine.ErrUnavailable) || len(out.Results) != 0 {
		t.Fatalf("with the replica paused: %v, %+v; want ErrUnavailable and no results", err, out.Results)
	}
	if err := read.Apply(t.Context(), "p", &out, engine.Get("n")); err != nil || out.Results[0].Value != "2" {
		t.Fatalf("the primary holds %+v (%v), want the unacknowledged increment applied: 2", out.Results, err)
	}
	// The replica caught up: batches succeed again.
	if err := eng.Apply(t.Context(), "p", &out, incr); err != nil || out.Results[0].Int != 3 {
		t.Fatalf("after the replica resumed: %v, %+v", err, out.Results)
	}
}

// TestWaitReplicasCluster checks that on a cluster the batch and its WAIT
// go to the master of the batch's slot, for partitions on every master: a
// master without replicas applies the batch, and the wait fails.
func TestWaitReplicasCluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	cfg := waitConfig()
	s, err := redisstore.New(redis.NewClusterClient(cl.Options()), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	plain := cfg
	plain.WaitReplicas = 0
	reader, err := redisstore.New(redis.NewClusterClient(cl.Options()), plain)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	eng, read := engine.New(s), engine.New(reader)
	var out engine.StepResult
	for _, p := range []string{"a", "b", "c", "d", "e", "f"} {
		err := eng.Apply(t.Context(), p, &out, engine.Incr("n", 1, 60_000))
		if !errors.Is(err, engine.ErrUnavailable) {
			t.Fatalf("partition %s: %v, want ErrUnavailable (no replica acknowledges)", p, err)
		}
		if err := read.Apply(t.Context(), p, &out, engine.Get("n")); err != nil || out.Results[0].Value != "1" {
			t.Fatalf("partition %s holds %+v (%v), want the batch applied on its master", p, out.Results, err)
		}
	}
}

// TestWaitReplicasNeedsAConnection checks that New refuses WaitReplicas
// with a client that cannot hold one connection for a batch and its WAIT.
func TestWaitReplicasNeedsAConnection(t *testing.T) {
	srv := redistest.Start(t)
	c := struct{ redisstore.Client }{redis.NewClient(srv.Options())}
	defer c.Close()
	cfg := waitConfig()
	cfg.AllowEviction = true
	if _, err := redisstore.New(c, cfg); !errors.Is(err, engine.ErrInvalid) {
		t.Fatalf("New: %v, want ErrInvalid", err)
	}
}

// TestWaitCoversAReplayedRetry: a batch whose WAIT timed out is retried
// with the same operation id, as the docs advise, through another store
// (another connection) while the replica is still paused. The retry
// replays the recorded result and writes nothing; it must still not be
// answered as confirmed, since no replica holds the batch yet. It is not:
// Redis records the replication offset after every command a connection
// runs, written or not, and WAIT waits for that offset, which the batch the
// retry replays lies before. Once the replica answers, the same retry
// succeeds with the recorded result, and the batch ran once.
func TestWaitCoversAReplayedRetry(t *testing.T) {
	r := redistest.StartReplicated(t)
	// While the replica is paused any timeout fails the wait; while it
	// answers, a busy machine may take far longer than an idle one.
	cfg := waitConfig()
	patient := cfg
	patient.WaitTimeout = 5 * time.Second
	open := func(cfg redisstore.Config) *redisstore.Store {
		s, err := redisstore.New(redis.NewClient(r.Primary.Options()), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	first, second, third := open(cfg), open(cfg), open(patient)
	req := &engine.Request{OperationID: "op-retried", Steps: []engine.Step{{Partition: "p", Commands: []engine.Command{engine.Incr("n", 1, 60_000)}}}}

	// Load the library and settle the replica before pausing it.
	if _, err := engine.New(third).Do(t.Context(), &engine.Request{OperationID: "warm", Steps: []engine.Step{{Partition: "w", Commands: []engine.Command{engine.Incr("n", 1, 60_000)}}}}); err != nil {
		t.Fatal(err)
	}
	if err := r.Replica.Pause(); err != nil {
		t.Fatal(err)
	}
	_, err1 := engine.New(first).Do(t.Context(), req)
	_, err2 := engine.New(second).Do(t.Context(), req)
	if rerr := r.Replica.Resume(); rerr != nil {
		t.Fatal(rerr)
	}
	if !errors.Is(err1, engine.ErrUnavailable) {
		t.Fatalf("the batch with the replica paused: %v, want ErrUnavailable", err1)
	}
	if !errors.Is(err2, engine.ErrUnavailable) {
		t.Fatalf("its replayed retry with the replica still paused: %v, want ErrUnavailable (no replica holds the batch)", err2)
	}
	// The replica answers again: the retry is confirmed, and replays.
	resp, err := engine.New(third).Do(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	if st := resp.Steps[0]; !st.Replayed || st.Results[0].Int != 1 {
		t.Errorf("the retry once the replica answers: %+v, want the recorded count of 1, replayed", st)
	}
}
