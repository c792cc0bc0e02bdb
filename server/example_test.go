package server_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/server"
	"github.com/sluicehq/sluice/store/memstore"
	"github.com/sluicehq/sluice/wire"
)

// A server embedded in another program, with its metrics in a registry of
// the program's own, served at /metrics behind the operator token.
func Example_metrics() {
	store, err := memstore.New(memstore.DefaultConfig())
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	const (
		secret = "a-signing-secret-of-32-characters-at-least"
		token  = "an-operator-token-of-32-characters-at-least"
	)
	reg := prometheus.NewRegistry()
	cfg := server.DefaultConfig()
	cfg.Secrets, cfg.OperatorToken = []string{secret}, token
	cfg.Registerer, cfg.Gatherer = reg, reg
	srv := server.New(engine.New(store), cfg)

	// Three signed hits on a limit of two.
	for range 3 {
		body, err := json.Marshal(wire.Request{
			OperationID: engine.NewOperationID(),
			Family:      "api",
			Steps: []engine.Step{{Partition: "user:42", Commands: []engine.Command{
				engine.Hit(1, engine.Window{Key: "per-minute", Kind: algo.KindSliding, Limit: 2, WindowMs: 60_000}),
			}}},
		})
		if err != nil {
			log.Fatal(err)
		}
		req := httptest.NewRequest(http.MethodPost, wire.PathRPC, bytes.NewReader(body))
		ts := time.Now().Unix()
		req.Header.Set(wire.HeaderTimestamp, strconv.FormatInt(ts, 10))
		req.Header.Set(wire.HeaderSignature, wire.Sign([]byte(secret), ts, http.MethodPost, wire.PathRPC, body))
		srv.ServeHTTP(httptest.NewRecorder(), req)
	}

	req := httptest.NewRequest(http.MethodGet, wire.PathMetrics, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, req)
	for line := range strings.Lines(rec.Body.String()) {
		if strings.HasPrefix(line, `sluice_commands_total{op="win.hit"`) && !strings.HasSuffix(line, " 0\n") ||
			strings.HasPrefix(line, `sluice_rpc_calls_total{code="ok"`) || strings.HasPrefix(line, "sluice_stopped") {
			fmt.Print(line)
		}
	}
	// Output:
	// sluice_commands_total{op="win.hit",outcome="allowed"} 2
	// sluice_commands_total{op="win.hit",outcome="denied"} 1
	// sluice_rpc_calls_total{code="ok",endpoint="rpc"} 3
	// sluice_rpc_calls_total{code="ok",endpoint="rpcs"} 0
	// sluice_stopped 0
}
