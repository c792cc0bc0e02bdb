package redisstore_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/store/redisstore"
	"github.com/sluicehq/sluice/store/storetest"
)

// ringOf returns a Ring over the servers, as the store needs it: deadlines
// honoured, no automatic retries.
func ringOf(srvs ...*redistest.Server) *redis.Ring {
	addrs := make(map[string]string, len(srvs))
	for i, s := range srvs {
		addrs["shard"+strconv.Itoa(i)] = s.Options().Addr
	}
	return redis.NewRing(&redis.RingOptions{Addrs: addrs, ContextTimeoutEnabled: true, MaxRetries: -1})
}

// TestConformanceRing runs the suite on a Ring of two servers, where each
// partition lives on one shard, placed by its tag.
func TestConformanceRing(t *testing.T) {
	a, b := redistest.Start(t), redistest.Start(t)
	storetest.Run(t, func(t *testing.T, clock engine.Clock) engine.Store {
		s, err := redisstore.New(ringOf(a, b), freshConfig(clock))
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

// TestRing checks what a Ring needs beyond a single server's client: the
// eviction policy read from every shard, the function library loaded on
// every shard (no batch falls back to scripts), each partition's keys on
// one shard, and no joint steps, whose partitions may lie on two shards.
func TestRing(t *testing.T) {
	a, b := redistest.Start(t), redistest.Start(t)
	ctx := t.Context()

	t.Run("eviction read from every shard", func(t *testing.T) {
		evicting := redistest.Start(t, "--maxmemory-policy", "allkeys-lru")
		for _, srvs := range [][]*redistest.Server{{a, evicting}, {evicting, a}} {
			ring := ringOf(srvs...)
			s, err := redisstore.New(ring, freshConfig(nil))
			var eerr *redisstore.EvictionError
			if !errors.As(err, &eerr) || eerr.Policy != "allkeys-lru" {
				t.Errorf("New on a Ring with an evicting shard: %v, want an *EvictionError naming allkeys-lru", err)
			}
			if s != nil {
				s.Close()
			} else {
				ring.Close()
			}
		}
	})

	cfg := freshConfig(nil)
	s, err := redisstore.New(ringOf(a, b), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Joins() {
		t.Error("Joins() = true on a Ring, whose partitions lie on several servers")
	}
	var outs [2]engine.StepResult
	joint := []*engine.Batch{
		{Partition: "j1", Commands: []engine.Command{hit("k")}},
		{Partition: "j2", Commands: []engine.Command{hit("k")}},
	}
	if err := s.ApplyJoint(ctx, joint, outs[:]); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("ApplyJoint on a Ring: %v, want errors.ErrUnsupported", err)
	}

	eng := engine.New(s)
	const partitions = 64
	for i := range partitions {
		var out engine.StepResult
		if err := eng.Apply(ctx, "p"+strconv.Itoa(i), &out, hit("k"), engine.Set("v", "x", 60_000)); err != nil {
			t.Fatal(err)
		}
	}

	// Each partition's keys are on one shard, and both shards hold some.
	where := map[string]int{} // tag → shard
	for shard, srv := range []*redistest.Server{a, b} {
		c := srv.Client(t)
		keys, err := c.Keys(ctx, cfg.Prefix+":*").Result()
		if err != nil {
			t.Fatal(err)
		}
		if len(keys) == 0 {
			t.Errorf("shard %d holds no key of %d partitions", shard, partitions)
		}
		for _, k := range keys {
			tag := k[strings.Index(k, "{"):strings.Index(k, "}")]
			if other, ok := where[tag]; ok && other != shard {
				t.Errorf("partition %s has keys on shards %d and %d", tag, other, shard)
			}
			where[tag] = shard
		}
		// Every batch this shard ran was an FCALL of the library.
		if n := commandCalls(t, c, "fcall"); n == 0 {
			t.Errorf("shard %d ran no FCALL", shard)
		}
		for _, cmd := range []string{"evalsha", "eval"} {
			if n := commandCalls(t, c, cmd); n != 0 {
				t.Errorf("shard %d ran %d %s: the library was not loaded there", shard, n, strings.ToUpper(cmd))
			}
		}
	}
	if len(where) != partitions {
		t.Errorf("keys of %d partitions found, want %d", len(where), partitions)
	}
}
