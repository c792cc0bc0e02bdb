package client_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/engine"
)

// A request the client refuses before sending names the offending windows,
// budgets and receipt by position, never by their raw keys: the error is
// logged by callers, and a key is often a raw identifier. Nothing is sent.
func TestRefusedRequestErrorsNameNoKey(t *testing.T) {
	const raw = "alice@example.com"
	h := newHarness(t)
	c := h.client()
	win := func(key string) engine.Window {
		return engine.Window{Key: key, Kind: algo.KindFixed, Limit: 5, WindowMs: 60_000}
	}
	bud := func(key string) engine.Budget {
		return engine.Budget{Key: key, Limit: 5, WindowMs: 60_000, Refundable: true}
	}
	for name, cmd := range map[string]engine.Command{
		"window twice":      engine.Hit(1, win("login:"+raw), win("login:"+raw)),
		"budget twice":      engine.Reserve("receipt", 1, bud("target:"+raw), bud("target:"+raw)),
		"budget is receipt": engine.Reserve("target:"+raw, 1, bud("target:"+raw)),
	} {
		t.Run(name, func(t *testing.T) {
			req := &engine.Request{Steps: []engine.Step{{Partition: "p", Commands: []engine.Command{cmd}}}}
			_, err := c.Do(ctxT(t), req)
			if !errors.Is(err, engine.ErrInvalid) {
				t.Fatalf("Do = %v, want ErrInvalid", err)
			}
			if strings.Contains(err.Error(), raw) {
				t.Errorf("the error quotes a raw key: %v", err)
			}
		})
	}
	g, err := client.NewGuard(c, client.DefaultGuardConfig())
	if err != nil {
		t.Fatal(err)
	}
	_, err = g.Hit(ctxT(t), "p", 1, win("login:"+raw), win("login:"+raw))
	if !errors.Is(err, engine.ErrInvalid) || strings.Contains(err.Error(), raw) {
		t.Errorf("Guard.Hit = %v, want ErrInvalid without the raw key", err)
	}
	if n := h.rpcs.Load(); n != 0 {
		t.Errorf("%d RPCs sent for refused requests", n)
	}
}
