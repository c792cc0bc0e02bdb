package redisstore_test

import (
	"context"
	"fmt"
	"log"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/store/redisstore"
)

// A store on one Redis, shared by every process that opens it: 100 calls
// per minute per tenant, smoothed by GCRA.
func ExampleNew() {
	client := redis.NewClient(&redis.Options{
		Addr:                  "localhost:6379",
		ContextTimeoutEnabled: true, // calls end at the store's timeout
		MaxRetries:            -1,   // a retried batch could run twice
	})
	store, err := redisstore.New(client, redisstore.DefaultConfig())
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	eng := engine.New(store)
	var out engine.StepResult
	hit := engine.Hit(1, engine.Window{Key: "calls", Kind: algo.KindGCRA, Limit: 100, WindowMs: 60_000})
	if err := eng.Apply(context.Background(), "tenant-42", &out, hit); err != nil {
		log.Fatal(err) // engine.ErrUnavailable: apply the caller's fail mode
	}
	fmt.Println(out.Results[0].Allowed, out.Results[0].Remaining)
}

// A store on a Redis Cluster: each partition lives in one slot.
func ExampleNew_cluster() {
	client := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:                 []string{"redis-1:6379", "redis-2:6379", "redis-3:6379"},
		ContextTimeoutEnabled: true,
		MaxRetries:            -1,
	})
	store, err := redisstore.New(client, redisstore.DefaultConfig())
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	_ = engine.New(store)
}

// A store on a Redis over mutual TLS: the servers' certificates come from a
// private authority, and the Redis requires a client certificate.
func ExampleTLSFiles() {
	opts, err := redisstore.ParseURL("rediss://redis.internal:6380")
	if err != nil {
		log.Fatal(err)
	}
	files := redisstore.TLSFiles{
		CAFile:   "/etc/sluice/redis-ca.pem",
		CertFile: "/etc/sluice/redis-client.pem",
		KeyFile:  "/etc/sluice/redis-client.key",
	}
	if err := files.Apply(opts); err != nil {
		log.Fatal(err) // a file missing or malformed, named in the error
	}
	store, err := redisstore.New(redis.NewUniversalClient(opts), redisstore.DefaultConfig())
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	_ = engine.New(store)
}
