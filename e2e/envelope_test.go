package e2e

import (
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/wire"
)

// countingTransport counts the requests of each path it sends, and the
// answers in the minimal form.
type countingTransport struct {
	rpcs, envelopes, minimal atomic.Int64
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	switch r.URL.Path {
	case wire.PathRPC:
		c.rpcs.Add(1)
	case wire.PathRPCs:
		c.envelopes.Add(1)
	}
	resp, err := httpClient.Transport.RoundTrip(r)
	if err == nil && wire.PrefersMinimal(resp.Header.Values(wire.HeaderPreferenceApplied)) {
		c.minimal.Add(1)
	}
	return resp, err
}

// TestCoalescedCallersShareALimit runs 256 concurrent callers of one
// client, coalescing as by default, against sluice serve, on one window of
// 100 per round: exactly 100 are admitted, each with a remaining count of
// its own and its window's result, and the calls travel in fewer HTTP
// requests than there are, every one answered in the minimal form.
func TestCoalescedCallersShareALimit(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverOptions{})
	counts := &countingTransport{}
	cfg := client.DefaultConfig()
	cfg.URL, cfg.Secret, cfg.Pepper, cfg.Timeout = s.URL, s.secret(), readCredential(t, s.DataDir(), "pepper"), client.MaxTimeout
	cfg.HTTPClient = &http.Client{Transport: counts, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	c := client.New(cfg)
	defer c.Close()
	if p, err := c.Ping(t.Context()); err != nil || !slices.Contains(p.Features, wire.FeatureRPCs) {
		t.Fatalf("ping: %+v, %v; want the %s feature", p, err, wire.FeatureRPCs)
	}
	const callers, limit, rounds = 256, 100, 3
	for round := range rounds {
		w := engine.Window{Key: "shared-" + strconv.Itoa(round), Kind: algo.KindFixed, Limit: limit, WindowMs: 3_600_000}
		b := &engine.Batch{Partition: "tenant", Commands: []engine.Command{engine.Hit(1, w)}}
		results, errs := make([]engine.StepResult, callers), make([]error, callers)
		var wg sync.WaitGroup
		for i := range callers {
			wg.Go(func() { errs[i] = c.Apply(t.Context(), b, &results[i]) })
		}
		wg.Wait()
		var remaining []int64
		for i := range callers {
			if errs[i] != nil {
				t.Fatalf("round %d caller %d: %v", round, i, errs[i])
			}
			r := results[i].Results
			if len(r) != 1 || len(r[0].Windows) != 1 || r[0].Windows[0].Remaining != r[0].Remaining || r[0].Windows[0].Allowed != r[0].Allowed {
				t.Fatalf("round %d caller %d: %+v, want one result with its one window's", round, i, r)
			}
			if r[0].Allowed {
				remaining = append(remaining, r[0].Remaining)
			}
		}
		slices.Sort(remaining)
		if len(remaining) != limit {
			t.Fatalf("round %d: %d callers admitted, want exactly %d", round, len(remaining), limit)
		}
		for i, r := range remaining {
			if r != int64(i) {
				t.Fatalf("round %d: remaining counts %v, want each of 0…%d once", round, remaining, limit-1)
			}
		}
	}
	sent := counts.rpcs.Load() + counts.envelopes.Load()
	if sent >= rounds*callers {
		t.Errorf("%d HTTP requests for %d calls: nothing was coalesced", sent, rounds*callers)
	}
	if n := counts.minimal.Load(); n != sent {
		t.Errorf("%d of %d answers in the minimal form, want every one", n, sent)
	}
	t.Logf("%d RPCs and %d envelopes for %d calls", counts.rpcs.Load(), counts.envelopes.Load(), rounds*callers)
}
