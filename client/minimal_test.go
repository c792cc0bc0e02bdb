package client_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"testing"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/wire"
)

// TestMinimalAnswersRestored calls a server that answers in the minimal
// form, one that knows no Prefer header (and answers in full), and the
// first behind a proxy that drops Preference-Applied: the client asks every
// time, and its callers get the same whole results every way, each window
// list in place, for an allowed and a denied run.
func TestMinimalAnswersRestored(t *testing.T) {
	w := func(key string, limit int64) engine.Window {
		return engine.Window{Key: key, Kind: algo.KindFixed, Limit: limit, WindowMs: 60_000}
	}
	req := func() *engine.Request {
		return &engine.Request{Mode: engine.All, Steps: []engine.Step{{Partition: "p", Commands: []engine.Command{
			engine.Hit(1, w("one", 1)),
			engine.Hit(1, w("two-a", 5), w("two-b", 10)),
			engine.Reserve("receipt", 2, engine.Budget{Key: "budget", Limit: 100, WindowMs: 60_000, Refundable: true}),
			engine.Incr("n", 1, 60_000),
		}}}}
	}
	servers := []struct {
		name                      string
		ignorePrefer, dropApplied bool
	}{{"minimal", false, false}, {"full", true, false}, {"minimal, header dropped", false, true}}
	answers := make([][]*engine.Response, len(servers))
	for i, sv := range servers {
		p := newInProcess(t)
		close(p.gate)
		p.ignorePrefer, p.dropApplied = sv.ignorePrefer, sv.dropApplied
		c := p.client(t)
		for range 2 {
			resp, err := c.Do(t.Context(), req())
			if err != nil {
				t.Fatalf("%s: %v", sv.name, err)
			}
			answers[i] = append(answers[i], resp)
		}
		if n := p.rpcs.Load(); p.preferred.Load() != n {
			t.Errorf("%s: %d of %d RPCs asked for a minimal answer", sv.name, p.preferred.Load(), n)
		}
		want := p.rpcs.Load()
		if sv.ignorePrefer {
			want = 0
		}
		if got := p.applied.Load(); got != want {
			t.Errorf("%s: %d minimal answers, want %d", sv.name, got, want)
		}
	}
	for run, allowed := range []bool{true, false} {
		full := answers[1][run]
		rs := full.Steps[0].Results
		if rs[0].Allowed != allowed {
			t.Fatalf("run %d: the limit-1 hit allowed %v", run, rs[0].Allowed)
		}
		for i := range servers {
			rs := answers[i][run].Steps[0].Results
			for j, n := range []int{1, 2, 1, 0} {
				if len(rs[j].Windows) != n {
					t.Fatalf("%s, run %d, result %d: %d windows, want %d", servers[i].name, run, j, len(rs[j].Windows), n)
				}
			}
			if !equalResponses(answers[i][run], full) {
				t.Errorf("%s, run %d: %+v\nfrom a full answer %+v", servers[i].name, run, answers[i][run], full)
			}
		}
	}
}

// equalResponses compares two responses by their JSON, in which a list
// left empty and one never made read alike.
func equalResponses(a, b *engine.Response) bool {
	x, errX := json.Marshal(a)
	y, errY := json.Marshal(b)
	return errX == nil && errY == nil && bytes.Equal(x, y)
}

// TestMinimalAnswerOutOfShape checks that the client restores only the
// lists the minimal form leaves out: an answer without the list of a hit
// of two windows is refused as unavailable, minimal or not.
func TestMinimalAnswerOutOfShape(t *testing.T) {
	const body = `{"steps":[{"results":[{"allowed":true,"remaining":4,"resetAt":1}]}]}`
	srv := startHTTPServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set(wire.HeaderPreferenceApplied, wire.PreferMinimal)
		io.WriteString(w, body)
	}))
	cfg := client.DefaultConfig()
	cfg.URL, cfg.Secret, cfg.Pepper = srv.URL, testSecret, testPepper
	c := client.New(cfg)
	defer c.Close()
	two := engine.Hit(1, fixed("a", 5, 1000), fixed("b", 5, 1000))
	if _, err := c.Do(ctxT(t), &engine.Request{Steps: []engine.Step{{Partition: "p", Commands: []engine.Command{two}}}}); !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("a hit of two windows answered without its list: %v, want ErrUnavailable", err)
	}
	one := engine.Hit(1, fixed("a", 5, 1000))
	resp, err := c.Do(ctxT(t), &engine.Request{Steps: []engine.Step{{Partition: "p", Commands: []engine.Command{one}}}})
	if err != nil {
		t.Fatal(err)
	}
	if ws := resp.Steps[0].Results[0].Windows; len(ws) != 1 || ws[0] != (engine.WindowResult{Allowed: true, Remaining: 4, ResetAt: 1}) {
		t.Fatalf("a hit of one window: windows %+v, want the result's own", ws)
	}
}
