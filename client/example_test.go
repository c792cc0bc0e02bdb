package client_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/server"
	"github.com/sluicehq/sluice/store/memstore"
)

// Example secrets. Real ones come from the environment or a secret store.
const (
	exampleSecret = "example-signing-secret-0123456789ab"
	examplePepper = "pepper-v2:example-key-pepper-0123456789abcdef" // the compact form, as NewPepper makes
	exampleToken  = "example-operator-token-0123456789ab"
)

// startServer runs a Sluice server over an in-memory store on a loopback
// port and returns it with a client configuration that reaches it.
func startServer() (*httptest.Server, client.Config) {
	store, err := memstore.New(memstore.DefaultConfig())
	if err != nil {
		panic(err)
	}
	scfg := server.DefaultConfig()
	scfg.Secrets = []string{exampleSecret}
	scfg.OperatorToken = exampleToken
	handler := server.New(engine.New(store), scfg)
	// Served as sluice serve serves it: HTTP/1.1, and HTTP/2 (h2c) for a
	// client configured with client.HTTP2.
	hs, err := server.NewHTTPServer(handler, server.DefaultHTTPConfig())
	if err != nil {
		panic(err)
	}
	srv := httptest.NewUnstartedServer(handler)
	srv.Config = hs
	srv.Start()

	cfg := client.DefaultConfig()
	cfg.URL = srv.URL // http is accepted on loopback only; use https elsewhere
	cfg.Secret = exampleSecret
	cfg.Pepper = examplePepper
	return srv, cfg
}

// A Client is a store: the engine runs on it as on a local one, one RPC per
// call, and the server sees only hashed names.
func Example() {
	srv, cfg := startServer()
	defer srv.Close()

	c := client.New(cfg)
	defer c.Close()
	eng := engine.New(c)

	// Two requests a minute per user, as an exact sliding log.
	perMinute := engine.Window{Key: "per-minute", Kind: algo.KindLog, Limit: 2, WindowMs: 60_000}
	var out engine.StepResult
	for range 3 {
		if err := eng.Apply(context.Background(), "user:alice", &out, engine.Hit(1, perMinute)); err != nil {
			fmt.Println("apply your fail mode:", err)
			return
		}
		r := out.Results[0]
		fmt.Printf("allowed=%v remaining=%d\n", r.Allowed, r.Remaining)
	}
	// Output:
	// allowed=true remaining=1
	// allowed=true remaining=0
	// allowed=false remaining=0
}

// A caller that retries after an unknown outcome passes the same operation
// id: the server returns the recorded result and charges nothing again.
func ExampleClient_Do() {
	srv, cfg := startServer()
	defer srv.Close()
	c := client.New(cfg)
	defer c.Close()

	req := &engine.Request{
		OperationID: engine.NewOperationID(),
		Steps: []engine.Step{{
			Partition: "login:alice@example.com",
			Commands:  []engine.Command{engine.Incr("attempts", 1, 15*60_000)},
		}},
	}
	for range 2 { // say the first answer was lost to a timeout
		resp, err := c.Do(context.Background(), req)
		if err != nil {
			fmt.Println(err)
			return
		}
		st := resp.Steps[0]
		fmt.Printf("attempts=%d replayed=%v\n", st.Results[0].Int, st.Replayed)
	}
	// Output:
	// attempts=1 replayed=false
	// attempts=1 replayed=true
}

// A Guard answers repeated denials from memory until their reset, with no
// RPC, and applies the family's fail mode when the server is unavailable.
func ExampleGuard() {
	srv, cfg := startServer()
	defer srv.Close()
	c := client.New(cfg)
	defer c.Close()

	g, err := client.NewGuard(c.WithFamily("proxy"), client.DefaultGuardConfig())
	if err != nil {
		panic(err)
	}
	perMinute := engine.Window{Key: "per-minute", Kind: algo.KindLog, Limit: 1, WindowMs: 60_000}
	for range 3 {
		d, err := g.Hit(context.Background(), "ip:203.0.113.9", 1, perMinute)
		if err != nil {
			panic(err)
		}
		fmt.Printf("allowed=%v by %v\n", d.Allowed, d.Origin)
	}
	// Output:
	// allowed=true by server
	// allowed=false by server
	// allowed=false by cache
}

// With the Degraded fail mode, an unavailable server (here a client whose
// backend is off) leaves the same windows enforced in this process.
func ExampleGuard_degraded() {
	cfg := client.DefaultConfig()
	cfg.Off = true // as SLUICE_BACKEND=off
	c := client.New(cfg)

	gcfg := client.DefaultGuardConfig()
	gcfg.FailMode = client.Degraded
	g, err := client.NewGuard(c, gcfg)
	if err != nil {
		panic(err)
	}
	perMinute := engine.Window{Key: "per-minute", Kind: algo.KindSliding, Limit: 2, WindowMs: 60_000}
	for range 3 {
		d, err := g.Hit(context.Background(), "ip:203.0.113.9", 1, perMinute)
		if err != nil {
			panic(err)
		}
		fmt.Printf("allowed=%v by %v, unavailable=%v\n", d.Allowed, d.Origin, errors.Is(d.Err, client.ErrUnavailable))
	}
	// Output:
	// allowed=true by degraded, unavailable=true
	// allowed=true by degraded, unavailable=true
	// allowed=false by degraded, unavailable=true
}

// A handler of a family that fails closed answers 503 with Retry-After: 30
// whenever the store is unavailable.
func ExampleWriteUnavailable() {
	cfg := client.DefaultConfig()
	cfg.URL = "http://sluice.example" // cleartext to a remote host: the client is off
	c := client.New(cfg)

	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req := &engine.Request{Steps: []engine.Step{{Partition: "token:abc", Commands: []engine.Command{engine.Get("used")}}}}
		if _, err := c.Do(r.Context(), req); errors.Is(err, client.ErrUnavailable) {
			client.WriteUnavailable(w)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	rec := httptest.NewRecorder()
	handler.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/refresh", nil))
	fmt.Println(rec.Code, rec.Header().Get("Retry-After"))
	// Output:
	// 503 30
}

// ConfigFromEnv reads the SLUICE_* variables; an invalid configuration
// yields a client that is off, never one running on silent defaults.
func ExampleConfigFromEnv() {
	os.Setenv("SLUICE_URL", "https://sluice.internal:7443")
	os.Setenv("SLUICE_SECRET", "short")
	os.Setenv("SLUICE_PEPPER", examplePepper)
	os.Setenv("SLUICE_FAMILIES", "proxy,replay")
	defer func() {
		for _, v := range []string{"SLUICE_URL", "SLUICE_SECRET", "SLUICE_PEPPER", "SLUICE_FAMILIES"} {
			os.Unsetenv(v)
		}
	}()

	cfg, err := client.ConfigFromEnv()
	fmt.Println("config:", err)
	c := client.New(cfg)
	fmt.Println("off:", errors.Is(c.Err(), client.ErrUnavailable))
	fmt.Println("proxy assigned:", c.Assigned("proxy"))
	// Output:
	// config: signing secret is 5 characters (minimum 32)
	// off: true
	// proxy assigned: true
}

// Concurrent callers share one Client: while Config.Coalesce RPCs are in
// flight, the calls made meanwhile travel together in envelopes, each
// still answered on its own. Here 100 goroutines share a limit of 40.
func ExampleConfig_coalesce() {
	srv, cfg := startServer()
	defer srv.Close()

	cfg.Coalesce = 2 // at most 2 RPCs in flight; client.CoalesceOff sends every call alone
	c := client.New(cfg)
	defer c.Close()
	eng := engine.New(c)

	perHour := engine.Window{Key: "per-hour", Kind: algo.KindFixed, Limit: 40, WindowMs: 3_600_000}
	var allowed atomic.Int64
	var wg sync.WaitGroup
	for range 100 {
		wg.Go(func() {
			var out engine.StepResult
			if err := eng.Apply(context.Background(), "tenant:acme", &out, engine.Hit(1, perHour)); err != nil {
				fmt.Println("apply your fail mode:", err)
				return
			}
			if out.Results[0].Allowed {
				allowed.Add(1)
			}
		})
	}
	wg.Wait()
	fmt.Println("allowed:", allowed.Load())
	// Output:
	// allowed: 40
}

// NewPepper makes a pepper for a secret store, to give every process that
// shares the quotas. A pepper from NewPepper, like the one sluice serve
// writes to a new data directory, names keys by 22 characters; a pepper of
// any other form, by 64 hex digits.
func ExampleNewPepper() {
	pepper := client.NewPepper()
	cfg := client.DefaultConfig()
	cfg.URL, cfg.Secret, cfg.Pepper = "http://127.0.0.1:7420", exampleSecret, pepper
	c := client.New(cfg)
	defer c.Close()
	fmt.Println(strings.HasPrefix(pepper, client.CompactPrefix), len(c.Hash(client.PurposeKey, "user:42")))

	cfg.Pepper = strings.TrimPrefix(pepper, client.CompactPrefix) // without the prefix: a pepper of the hex form
	old := client.New(cfg)
	defer old.Close()
	fmt.Println(len(old.Hash(client.PurposeKey, "user:42")))
	// Output:
	// true 22
	// 64
}
