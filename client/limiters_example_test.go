package client_test

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"

	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/pace"
	"github.com/sluicehq/sluice/server"
	"github.com/sluicehq/sluice/store/memstore"
	"github.com/sluicehq/sluice/wire"
)

// A deploy step configures a paced-call limiter on the server; every worker
// calling through a client with the same pepper then finds it.
func ExampleLimiters() {
	store, err := memstore.New(memstore.DefaultConfig())
	if err != nil {
		panic(err)
	}
	scfg := server.DefaultConfig()
	scfg.Secrets, scfg.OperatorToken = []string{exampleSecret}, exampleToken
	scfg.Pepper = examplePepper // the clients' pepper: the server names limiters as they do
	srv := httptest.NewServer(server.New(engine.New(store), scfg))
	defer srv.Close()
	ctx := context.Background()

	// The deploy step, with the operator token (or a limits key).
	admin, err := client.NewLimiters(client.LimitersConfig{URL: srv.URL, Key: exampleToken})
	if err != nil {
		panic(err)
	}
	_, err = admin.Configure(ctx, "billing-api", wire.LimiterConfig{
		LimitPerWindow: 100, WindowMs: 60_000, // the upstream's "100 a minute"
		Concurrency: 10, LeaseTTLMs: 30_000, RefillFraction: 0.5, MaxWaitMs: 300_000,
	})
	fmt.Println("configured:", err)

	// A worker.
	cfg := client.DefaultConfig()
	cfg.URL, cfg.Secret, cfg.Pepper = srv.URL, exampleSecret, examplePepper
	c := client.New(cfg)
	defer c.Close()
	reg := pace.NewRegistry(c)
	n, err := pace.Call(ctx, pace.Define("billing-api").Bind(reg), func(context.Context) (int, error) {
		return 42, nil // the call to the upstream
	})
	fmt.Println(n, err)
	_, err = admin.Get(ctx, "biling-api")
	fmt.Println(errors.Is(err, wire.ErrNoSuchLimiter))
	// Output:
	// configured: <nil>
	// 42 <nil>
	// true
}
