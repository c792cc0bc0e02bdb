package client_test

import (
	"testing"

	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/server"
	"github.com/sluicehq/sluice/store/memstore"
	"github.com/sluicehq/sluice/store/storetest"
)

// TestConformance runs the store conformance suite on a client of a real
// Sluice server (signed RPC over loopback HTTP) whose store is a memstore
// on the suite's clock: the client is a store like any other.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T, clock engine.Clock) engine.Store {
		cfg := memstore.DefaultConfig()
		cfg.Clock = clock
		mem, err := memstore.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { mem.Close() })
		scfg := server.DefaultConfig()
		scfg.Secrets = []string{testSecret}
		scfg.OperatorToken = testToken
		srv := startHTTPServer(t, server.New(engine.New(mem), scfg))
		ccfg := client.DefaultConfig()
		ccfg.URL = srv.URL
		ccfg.Secret = testSecret
		ccfg.Pepper = testPepper
		// The suite checks semantics, not latency: on a machine busy with
		// other work a call may take longer than the default.
		ccfg.Timeout = client.MaxTimeout
		c := client.New(ccfg)
		if err := c.Err(); err != nil {
			t.Fatal(err)
		}
		return c
	})
}
