package redisstore_test

import (
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/store/redisstore"
	"github.com/sluicehq/sluice/store/storetest"
)

// stores numbers the stores of a test run: each gets a key prefix of its
// own, so the stores sharing one server start empty and stay apart.
var stores atomic.Int64

func freshConfig(clock engine.Clock) redisstore.Config {
	cfg := redisstore.DefaultConfig()
	cfg.Prefix = "t" + strconv.FormatInt(stores.Add(1), 10)
	cfg.Clock = clock
	// The suite checks semantics, not latency: on a machine busy with other
	// work a call may take longer than the production default.
	cfg.Timeout = 10 * time.Second
	return cfg
}

func TestConformance(t *testing.T) {
	srv := redistest.Start(t)
	storetest.Run(t, func(t *testing.T, clock engine.Clock) engine.Store {
		s, err := redisstore.New(redis.NewClient(srv.Options()), freshConfig(clock))
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

func TestConformanceCluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	storetest.Run(t, func(t *testing.T, clock engine.Clock) engine.Store {
		s, err := redisstore.New(redis.NewClusterClient(cl.Options()), freshConfig(clock))
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

// TestConformanceScripts runs the suite on a store running its batches as
// scripts (EVALSHA), as on a server without functions.
func TestConformanceScripts(t *testing.T) {
	srv := redistest.Start(t)
	storetest.Run(t, func(t *testing.T, clock engine.Clock) engine.Store {
		s, err := redisstore.New(redis.NewClient(srv.Options()), freshConfig(clock))
		if err != nil {
			t.Fatal(err)
		}
		redisstore.UseScripts(s)
		return s
	})
}

// pipelined is a store configuration that coalesces concurrent batches
// into pipelines behind one round trip in flight, so that any concurrency
// in the suite queues. (freshConfig coalesces behind DefaultPipeline.)
func pipelined(clock engine.Clock) redisstore.Config {
	cfg := freshConfig(clock)
	cfg.Pipeline = 1
	return cfg
}

// alone is a store configuration that sends every batch alone.
func alone(clock engine.Clock) redisstore.Config {
	cfg := freshConfig(clock)
	cfg.Pipeline = -1
	return cfg
}

func TestConformanceAlone(t *testing.T) {
	srv := redistest.Start(t)
	storetest.Run(t, func(t *testing.T, clock engine.Clock) engine.Store {
		s, err := redisstore.New(redis.NewClient(srv.Options()), alone(clock))
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

func TestConformanceAloneCluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	storetest.Run(t, func(t *testing.T, clock engine.Clock) engine.Store {
		s, err := redisstore.New(redis.NewClusterClient(cl.Options()), alone(clock))
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

func TestConformancePipelined(t *testing.T) {
	srv := redistest.Start(t)
	storetest.Run(t, func(t *testing.T, clock engine.Clock) engine.Store {
		s, err := redisstore.New(redis.NewClient(srv.Options()), pipelined(clock))
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

func TestConformancePipelinedCluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	storetest.Run(t, func(t *testing.T, clock engine.Clock) engine.Store {
		s, err := redisstore.New(redis.NewClusterClient(cl.Options()), pipelined(clock))
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

func TestConformancePipelinedScripts(t *testing.T) {
	srv := redistest.Start(t)
	storetest.Run(t, func(t *testing.T, clock engine.Clock) engine.Store {
		s, err := redisstore.New(redis.NewClient(srv.Options()), pipelined(clock))
		if err != nil {
			t.Fatal(err)
		}
		redisstore.UseScripts(s)
		return s
	})
}

// openStore returns a store with cfg on srv, closed when the test ends.
func openStore(t *testing.T, srv *redistest.Server, cfg redisstore.Config) *redisstore.Store {
	t.Helper()
	s, err := redisstore.New(redis.NewClient(srv.Options()), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
