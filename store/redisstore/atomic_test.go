package redisstore_test

import (
	"context"
	"errors"
	"maps"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/redistest"
)

// snapshot returns every key under match with its serialized value and
// absolute expiry: two equal snapshots mean nothing under match changed.
func snapshot(t *testing.T, c *redis.Client, match string) map[string]string {
	t.Helper()
	ctx := t.Context()
	out := map[string]string{}
	iter := c.Scan(ctx, 0, match, 1000).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
		dump, err := c.Dump(ctx, k).Result()
		if err != nil {
			t.Fatalf("DUMP %q: %v", k, err)
		}
		exp, err := c.Do(ctx, "pexpiretime", k).Int64()
		if err != nil {
			t.Fatalf("PEXPIRETIME %q: %v", k, err)
		}
		out[k] = dump + "@" + strconv.FormatInt(exp, 10)
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// eightCommands is a batch whose every command but the third would change
// the partition set up by seedPartition; the third hits window key "w3".
func eightCommands() []engine.Command {
	p := engine.Pace{Key: "pace", Limit: 10, WindowMs: 60_000}
	return []engine.Command{
		engine.Hit(1, engine.Window{Key: "w1", Kind: algo.KindFixed, Limit: 10, WindowMs: 60_000}),
		engine.Incr("n", 1, 60_000),
		engine.Hit(1, engine.Window{Key: "w3", Kind: algo.KindGCRA, Limit: 10, WindowMs: 60_000}),
		engine.Set("v", "new", 60_000),
		engine.Acquire("gate", "b", 5, 60_000),
		engine.Reserve("receipt", 1, engine.Budget{Key: "budget", Limit: 10, WindowMs: 60_000, Refundable: true}),
		p.Take(1, 0),
		engine.Del("old"),
	}
}

func seedPartition(t *testing.T, eng *engine.Engine, partition string) {
	t.Helper()
	var out engine.StepResult
	err := eng.Apply(t.Context(), partition, &out,
		engine.Hit(1, engine.Window{Key: "w1", Kind: algo.KindFixed, Limit: 10, WindowMs: 60_000}),
		engine.Incr("n", 5, 60_000),
		engine.Set("v", "old", 60_000),
		engine.Acquire("gate", "a", 5, 60_000),
		engine.Set("old", "x", 60_000),
	)
	if err != nil {
		t.Fatal(err)
	}
}

// TestWrongTypeLeavesPartition plants a key of the wrong type under the
// third command of an eight-command batch, whose other commands would each
// change the partition: the batch fails with ErrWrongType, naming that
// command, and every key of the partition is exactly as before, value and
// expiry. It plants both a Sluice record of another kind and a Redis value
// of another type.
func TestWrongTypeLeavesPartition(t *testing.T) {
	srv := redistest.Start(t)
	raw := srv.Client(t)
	plants := map[string]func(ctx context.Context, key string) error{
		"sluice record": nil, // a kv value, set through the store
		"redis list":    func(ctx context.Context, key string) error { return raw.RPush(ctx, key, "x").Err() },
	}
	for name, plant := range plants {
		t.Run(name, func(t *testing.T) {
			cfg := freshConfig(nil)
			s := openStore(t, srv, cfg)
			eng := engine.New(s)
			prefix := cfg.Prefix + ":{p}:"
			seedPartition(t, eng, "p")
			var out engine.StepResult
			var err error
			if plant == nil {
				err = eng.Apply(t.Context(), "p", &out, engine.Set("w3", "not a window", 60_000))
			} else {
				err = plant(t.Context(), prefix+"k:w3")
			}
			if err != nil {
				t.Fatal(err)
			}

			before := snapshot(t, raw, prefix+"*")
			err = eng.Apply(t.Context(), "p", &out, eightCommands()...)
			if !errors.Is(err, engine.ErrWrongType) || !strings.Contains(err.Error(), "command 2 (win.hit)") {
				t.Fatalf("batch over a planted key: %v, want ErrWrongType at command 2", err)
			}
			if len(out.Results) != 0 {
				t.Fatalf("a failed batch returned %d results", len(out.Results))
			}
			if after := snapshot(t, raw, prefix+"*"); !maps.Equal(before, after) {
				t.Fatalf("the partition changed:\n\tbefore: %q\n\tafter:  %q", before, after)
			}

			// The same batch without the planted key changes every key it
			// names: the comparison above could see a change.
			if err := raw.Del(t.Context(), prefix+"k:w3").Err(); err != nil {
				t.Fatal(err)
			}
			before = snapshot(t, raw, prefix+"*")
			if err := eng.Apply(t.Context(), "p", &out, eightCommands()...); err != nil {
				t.Fatal(err)
			}
			after := snapshot(t, raw, prefix+"*")
			for _, k := range []string{"w1", "n", "w3", "v", "gate", "receipt", "budget", "pace"} {
				if before[prefix+"k:"+k] == after[prefix+"k:"+k] {
					t.Errorf("key %s unchanged by the batch", k)
				}
			}
			if _, ok := after[prefix+"k:old"]; ok {
				t.Error("key old not deleted by the batch")
			}
		})
	}
}
