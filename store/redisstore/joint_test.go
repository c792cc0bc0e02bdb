package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"pgregory.net/rapid"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/testclock"
	"github.com/sluicehq/sluice/store/memstore"
	"github.com/sluicehq/sluice/store/redisstore"
	"github.com/sluicehq/sluice/store/storetest"
)

// TestJointMirror holds the script's joint steps to memstore's, itself
// held to its batches applied alone (memstore's own tests): random joint
// steps of reservations, hits, values and deletions over a few partitions
// and keys, with plain batches between them and the clock moving on, give
// the same results and errors on both stores. A value where a budget or a
// window is makes a batch fail part way through a step.
func TestJointMirror(t *testing.T) {
	srv := redistest.Start(t)
	rapid.Check(t, func(rt *rapid.T) {
		clock := testclock.At(storetest.DefaultEpoch)
		rs, err := redisNew(srv, clock)
		if err != nil {
			rt.Fatal(err)
		}
		defer rs.Close()
		cfg := memstore.DefaultConfig()
		cfg.Clock = clock
		ms, err := memstore.New(cfg)
		if err != nil {
			rt.Fatal(err)
		}
		keys := []string{"a", "b"}
		partitions := []string{"p", "q", "r", "s"}
		batch := func(label string) *engine.Batch {
			b := &engine.Batch{Partition: rapid.SampledFrom(partitions).Draw(rt, label+"Partition")}
			key := func(l string) string { return rapid.SampledFrom(keys).Draw(rt, label+l) }
			cost := int64(rapid.IntRange(0, 3).Draw(rt, label+"Cost"))
			budget := func(l string) engine.Budget {
				return engine.Budget{Key: key(l + "Key"), Limit: int64(rapid.IntRange(1, 5).Draw(rt, label+l+"Limit")), WindowMs: 60_000}
			}
			switch rapid.IntRange(0, 4).Draw(rt, label+"Shape") {
			case 0, 1:
				b.Commands = []engine.Command{engine.Reserve("", cost, budget("b1"))}
			case 2:
				b.Commands = []engine.Command{engine.Reserve("", cost, budget("b1")), engine.Hit(1, engine.Window{Key: key("wKey"), Kind: algo.KindFixed, Limit: 2, WindowMs: 10_000})}
			case 3:
				b.Commands = []engine.Command{engine.Set(key("setKey"), rapid.SampledFrom([]string{"1", "x"}).Draw(rt, label+"value"), 30_000)}
			case 4:
				b.Commands = []engine.Command{engine.Del(key("delKey"))}
			}
			return b
		}
		for i := range rapid.IntRange(1, 30).Draw(rt, "steps") {
			clock.Advance(time.Duration(rapid.IntRange(0, 20_000).Draw(rt, "advanceMs")) * time.Millisecond)
			n := rapid.IntRange(1, engine.MaxJointBatches).Draw(rt, "batches")
			var bs []*engine.Batch
			for k := range n {
				b := batch(fmt.Sprint("j", k))
				if b.Validate() == nil {
					bs = append(bs, b)
				}
			}
			if len(bs) == 0 {
				continue
			}
			want, got := make([]engine.StepResult, len(bs)), make([]engine.StepResult, len(bs))
			werr := ms.ApplyJoint(context.Background(), bs, want)
			gerr := rs.ApplyJoint(context.Background(), bs, got)
			if !sameError(werr, gerr) {
				rt.Fatalf("step %d: memstore %v, redis %v", i, werr, gerr)
			}
			if werr != nil {
				continue
			}
			for k := range bs {
				w := &engine.Response{Steps: []engine.StepResult{want[k]}}
				g := &engine.Response{Steps: []engine.StepResult{got[k]}}
				if !sameResponse(w, g) {
					rt.Fatalf("step %d, batch %d %+v:\n\tmemstore %+v\n\tredis    %+v", i, k, *bs[k], want[k], got[k])
				}
			}
		}
	})
}

// A joint step whose second batch fails (a Redis list where its window's
// record would be) answers the error and writes nothing, in either
// partition; without the planted key the same step changes both. A step
// whose batch carries an operation id is refused and changes nothing.
func TestJointFailureLeavesEveryPartition(t *testing.T) {
	srv := redistest.Start(t)
	raw := srv.Client(t)
	cfg := freshConfig(nil)
	s := openStore(t, srv, cfg)
	if !s.Joins() {
		t.Fatal("a store on one node runs no joint steps")
	}
	eng := engine.New(s)
	seedPartition(t, eng, "p")
	seedPartition(t, eng, "q")
	bs := []*engine.Batch{
		{Partition: "p", Commands: eightCommands()},
		{Partition: "q", Commands: eightCommands()},
	}
	outs := make([]engine.StepResult, 2)
	qw3 := cfg.Prefix + ":{q}:k:w3"
	if err := raw.RPush(t.Context(), qw3, "x").Err(); err != nil {
		t.Fatal(err)
	}
	match := cfg.Prefix + ":*"
	before := snapshot(t, raw, match)
	err := s.ApplyJoint(t.Context(), bs, outs)
	if !errors.Is(err, engine.ErrWrongType) || !strings.Contains(err.Error(), "command 2 (win.hit)") {
		t.Fatalf("a joint step over a planted key: %v, want ErrWrongType at command 2", err)
	}
	if len(outs[0].Results)+len(outs[1].Results) != 0 {
		t.Fatal("a failed joint step returned results")
	}
	if after := snapshot(t, raw, match); !maps.Equal(before, after) {
		t.Fatalf("the store changed:\n\tbefore: %q\n\tafter:  %q", before, after)
	}

	if err := raw.Del(t.Context(), qw3).Err(); err != nil {
		t.Fatal(err)
	}
	before = snapshot(t, raw, match)
	if err := s.ApplyJoint(t.Context(), bs, outs); err != nil || outs[0].Denied || outs[1].Denied {
		t.Fatalf("the joint step without the planted key: %v, denied %v %v", err, outs[0].Denied, outs[1].Denied)
	}
	after := snapshot(t, raw, match)
	for _, p := range []string{"p", "q"} {
		if k := cfg.Prefix + ":{" + p + "}:k:w1"; before[k] == after[k] {
			t.Errorf("key %s unchanged by the joint step", k)
		}
	}

	// A batch of a joint step carries no operation id: refused before
	// anything is sent.
	withID := []*engine.Batch{bs[0], {Partition: "q", Commands: eightCommands(), OperationID: "op"}}
	if err := s.ApplyJoint(t.Context(), withID, outs); !errors.Is(err, engine.ErrInvalid) {
		t.Fatalf("a joint step with an operation id: %v, want ErrInvalid", err)
	}
	if again := snapshot(t, raw, match); !maps.Equal(after, again) {
		t.Fatal("a refused joint step changed the store")
	}
}

// On a cluster a store runs no joint steps: Joins says so, and
// ApplyJoint refuses before sending anything.
func TestClusterRunsNoJointSteps(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	s, err := redisstore.New(redis.NewClusterClient(cl.Options()), freshConfig(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Joins() || engine.New(s).Joins() {
		t.Fatal("a store on a cluster reported as running joint steps")
	}
	bs := []*engine.Batch{{Partition: "p", Commands: []engine.Command{engine.Set("k", "v", 60_000)}}}
	if err := s.ApplyJoint(t.Context(), bs, make([]engine.StepResult, 1)); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("ApplyJoint on a cluster: %v, want ErrUnsupported", err)
	}
}
