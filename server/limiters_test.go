package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/testclock"
	"github.com/sluicehq/sluice/pace"
	"github.com/sluicehq/sluice/server"
	"github.com/sluicehq/sluice/store/memstore"
	"github.com/sluicehq/sluice/wire"
)

const (
	limSecret = "limiters-signing-secret-0123456789abcdef"
	limToken  = "limiters-operator-token-0123456789abcdef"
	limPepper = "limiters-key-pepper-0123456789abcdefghij"
	limKey    = "limiters-limits-key-0123456789abcdefghij"
)

// limHarness is a server with the limiters endpoints over memstore, behind
// an httptest server.
type limHarness struct {
	t     *testing.T
	url   string
	store engine.Store
}

func newLimHarness(t *testing.T, modify func(*server.Config)) *limHarness {
	t.Helper()
	mem, err := memstore.New(memstore.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mem.Close() })
	cfg := server.DefaultConfig()
	cfg.Secrets, cfg.OperatorToken, cfg.Pepper, cfg.LimitsKey = []string{limSecret}, limToken, limPepper, limKey
	if modify != nil {
		modify(&cfg)
	}
	ts := httptest.NewServer(server.New(engine.New(mem), cfg))
	t.Cleanup(ts.Close)
	return &limHarness{t: t, url: ts.URL, store: mem}
}

// admin returns a Limiters client authenticated with key.
func (h *limHarness) admin(key string) *client.Limiters {
	h.t.Helper()
	l, err := client.NewLimiters(client.LimitersConfig{URL: h.url, Key: key})
	if err != nil {
		h.t.Fatal(err)
	}
	return l
}

// worker returns a pace.Registry over a client of the server hashing with
// pepper, as a worker process builds it.
func (h *limHarness) worker(pepper string) *pace.Registry {
	h.t.Helper()
	c := client.New(client.Config{URL: h.url, Secret: limSecret, Pepper: pepper, Timeout: client.MaxTimeout})
	if err := c.Err(); err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { c.Close() })
	return pace.NewRegistry(c)
}

// send sends a raw request with the bearer key and returns the status and
// the decoded problem, if any.
func (h *limHarness) send(method, path, key, body string) (int, wire.Problem, http.Header) {
	h.t.Helper()
	req, err := http.NewRequest(method, h.url+path, strings.NewReader(body))
	if err != nil {
		h.t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	var p wire.Problem
	if resp.StatusCode != http.StatusOK {
		if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
			h.t.Errorf("%s %s: %d answered as %q", method, path, resp.StatusCode, ct)
		}
		_ = json.NewDecoder(resp.Body).Decode(&p)
	}
	return resp.StatusCode, p, resp.Header
}

func billingConfig() wire.LimiterConfig {
	return wire.LimiterConfig{
		LimitPerWindow: 3, WindowMs: 60_000, Concurrency: 2, LeaseTTLMs: 30_000,
		RefillFraction: 0.5, MaxWaitMs: 0, Retry: wire.LimiterRetry{Attempts: 2},
	}
}

// TestLimitersReachTheWorkersLimiters is the point of the endpoints: a
// limiter configured through /v1/limiters is the one workers calling
// through the client package (which hashes every name with its pepper)
// find, count against and report on — and a mistyped name is not.
func TestLimitersReachTheWorkersLimiters(t *testing.T) {
	ctx := context.Background()
	h := newLimHarness(t, nil)
	admin := h.admin(limKey)
	if _, err := admin.Configure(ctx, "billing-api", billingConfig()); err != nil {
		t.Fatal(err)
	}

	reg := h.worker(limPepper)
	names, err := reg.List(ctx)
	if err != nil || len(names) != 1 || names[0] != "billing-api" {
		t.Fatalf("the worker's List = %v, %v; want [billing-api]", names, err)
	}
	st, err := reg.Stats(ctx, "billing-api")
	if err != nil {
		t.Fatal(err)
	}
	if st.Config.Limit != 3 || st.Config.Window != time.Minute || st.Config.Concurrency != 2 || st.Remaining != 3 {
		t.Errorf("the worker's Stats = %+v, want the configured limiter, rested", st)
	}
	got, err := pace.Call(ctx, pace.Define("billing-api").Bind(reg), func(context.Context) (string, error) { return "ran", nil })
	if err != nil || got != "ran" {
		t.Fatalf("a call through the worker's registry: %q, %v", got, err)
	}
	// The call's grant is in the limiter the server reports on.
	status, err := admin.Get(ctx, "billing-api")
	if err != nil {
		t.Fatal(err)
	}
	if status.Stats.Remaining != 2 || status.Stats.InFlight != 0 || status.Stats.ResetAt <= status.Stats.At {
		t.Errorf("the server's stats after one call: %+v, want 2 remaining and a reset ahead", status.Stats)
	}

	_, err = pace.Call(ctx, pace.Define("biling-api").Bind(reg), func(context.Context) (string, error) { return "ran", nil })
	if !errors.Is(err, pace.ErrNoSuchLimiter) {
		t.Errorf("a call through a mistyped name: %v, want ErrNoSuchLimiter", err)
	}
	// Another pepper names other partitions: its workers see no limiter.
	if _, err := h.worker(strings.Replace(limPepper, "key", "KEY", 1)).Stats(ctx, "billing-api"); !errors.Is(err, pace.ErrNoSuchLimiter) {
		t.Errorf("Stats under another pepper: %v, want ErrNoSuchLimiter", err)
	}
	// And nothing was written under the raw name.
	raw := pace.NewRegistry(h.store)
	if names, err := raw.List(ctx); err != nil || len(names) != 0 {
		t.Errorf("the store's unhashed registry lists %v, %v; want nothing", names, err)
	}
}

// TestLimitersSeeWhatWorkersConfigure checks the other direction: a limiter
// a process configured through the client is listed and reported by the
// server.
func TestLimitersSeeWhatWorkersConfigure(t *testing.T) {
	ctx := context.Background()
	h := newLimHarness(t, nil)
	cfg := pace.DefaultConfig()
	cfg.Limit, cfg.Window = 10, time.Second
	if err := h.worker(limPepper).Configure(ctx, "geo", cfg); err != nil {
		t.Fatal(err)
	}
	list, err := h.admin(limToken).List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := wire.LimiterConfig{LimitPerWindow: 10, WindowMs: 1000, LeaseTTLMs: 30_000, RefillFraction: 0.5, MaxWaitMs: 300_000, StartToleranceMs: 100}
	if len(list) != 1 || list[0].Name != "geo" || list[0].Config != want {
		t.Errorf("List = %+v, want geo with %+v", list, want)
	}
}

// TestLimitersReadBackWhatWorkersConfigure checks that every limiter a
// worker can configure is one the endpoints can read back: a name a URL
// path cannot carry as a segment ("." or "..") is refused by pace too,
// rather than listed by GET /v1/limiters and unreadable through GET
// /v1/limiters/{name}, where it made "sluice limits stats" fail for every
// limiter.
func TestLimitersReadBackWhatWorkersConfigure(t *testing.T) {
	ctx := context.Background()
	h := newLimHarness(t, nil)
	reg := h.worker(limPepper)
	cfg := pace.DefaultConfig()
	cfg.Limit, cfg.Window = 10, time.Second
	for _, name := range []string{"geo", ".", ".."} {
		if err := reg.Configure(ctx, name, cfg); err != nil && !errors.Is(err, pace.ErrInvalidConfig) {
			t.Fatalf("configuring %q: %v", name, err)
		}
	}
	admin := h.admin(limToken)
	list, err := admin.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, l := range list {
		names = append(names, l.Name)
		if _, err := admin.Get(ctx, l.Name); err != nil {
			t.Errorf("%q is listed, but reading it fails: %v", l.Name, err)
		}
	}
	if len(names) != 1 || names[0] != "geo" {
		t.Errorf("listed %q, want only geo", names)
	}
}

// TestListsSkipNamesNoLongerTaken checks that an index holding a name
// written before "." and ".." were refused (no path reaches them) still
// lists every other limiter and policy, rather than failing whole.
func TestListsSkipNamesNoLongerTaken(t *testing.T) {
	ctx := context.Background()
	h := newLimHarness(t, nil)
	cfg := pace.DefaultConfig()
	cfg.Limit, cfg.Window = 10, time.Second
	if err := h.worker(limPepper).Configure(ctx, "geo", cfg); err != nil {
		t.Fatal(err)
	}
	c, pols := h.service(limPepper, testclock.New(time.Unix(1_800_000_000, 0)))
	if err := pols.Set(ctx, "search", httplimit.Quota{Limit: 100, Window: time.Hour}); err != nil {
		t.Fatal(err)
	}
	// Add "." to the index shard that holds it, as an older release did.
	eng := engine.New(c)
	for _, part := range []string{"pace:registry", httplimit.PolicyPartition} {
		sum := fnv.New32a()
		sum.Write([]byte("."))
		key := fmt.Sprintf("names/%d", sum.Sum32()%8)
		var out engine.StepResult
		if err := eng.Apply(ctx, part, &out, engine.Get(key)); err != nil {
			t.Fatal(err)
		}
		names := "."
		if v := out.Results[0].Value; v != "" {
			names += "\n" + v
		}
		if err := eng.Apply(ctx, part, &out, engine.Set(key, names, engine.MaxTTLMs)); err != nil {
			t.Fatal(err)
		}
	}
	lims, err := h.admin(limToken).List(ctx)
	if err != nil || len(lims) != 1 || lims[0].Name != "geo" {
		t.Errorf("limiters: %+v, %v; want geo", lims, err)
	}
	list, err := h.policyAdmin(limToken).List(ctx)
	if err != nil || len(list) != 1 || list[0].Name != "search" {
		t.Errorf("policies: %+v, %v; want search", list, err)
	}
}

func TestLimitersPutPatchGet(t *testing.T) {
	ctx := context.Background()
	h := newLimHarness(t, nil)
	admin := h.admin(limToken)

	if _, err := admin.Get(ctx, "billing-api"); !errors.Is(err, wire.ErrNoSuchLimiter) {
		t.Errorf("Get of an unconfigured limiter: %v, want no_such_limiter", err)
	}
	if _, err := admin.Reconfigure(ctx, "billing-api", map[string]any{"concurrency": 4}); !errors.Is(err, wire.ErrNoSuchLimiter) {
		t.Errorf("PATCH of an unconfigured limiter: %v, want no_such_limiter", err)
	}
	if list, err := admin.List(ctx); err != nil || list == nil || len(list) != 0 {
		t.Errorf("List of none = %#v, %v; want an empty list", list, err)
	}

	put, err := admin.Configure(ctx, "billing-api", billingConfig())
	if err != nil || put.Name != "billing-api" || put.Config != billingConfig() {
		t.Fatalf("PUT = %+v, %v", put, err)
	}
	// A merge patch: a number replaces, an object merges, null removes
	// (a retry field then takes its default).
	got, err := admin.Reconfigure(ctx, "billing-api", map[string]any{
		"concurrency": 4,
		"retry":       map[string]any{"factor": 3, "attempts": nil},
	})
	want := billingConfig()
	want.Concurrency, want.Retry = 4, wire.LimiterRetry{Factor: 3}
	if err != nil || got.Config != want {
		t.Fatalf("PATCH = %+v, %v; want %+v", got, err, want)
	}
	st, err := admin.Get(ctx, "billing-api")
	if err != nil || st.Name != "billing-api" || st.Config != want || st.Stats.Remaining != 3 || st.Stats.At == 0 {
		t.Errorf("GET = %+v, %v; want the patched configuration, rested", st, err)
	}
	// Replacing with PUT takes the whole configuration as given.
	if _, err := admin.Configure(ctx, "billing-api", billingConfig()); err != nil {
		t.Fatal(err)
	}
	list, err := admin.List(ctx)
	if err != nil || len(list) != 1 || list[0].Config != billingConfig() {
		t.Errorf("List = %+v, %v; want the replaced configuration", list, err)
	}
}

// TestLimitersRefuseBadInput checks that every refusal names what is wrong
// and changes nothing.
func TestLimitersRefuseBadInput(t *testing.T) {
	ctx := context.Background()
	h := newLimHarness(t, nil)
	admin := h.admin(limKey)
	if _, err := admin.Configure(ctx, "billing-api", billingConfig()); err != nil {
		t.Fatal(err)
	}
	complete := `{"limitPerWindow":3,"windowMs":60000,"concurrency":2,"leaseTtlMs":30000,"refillFraction":0.5,"maxWaitMs":0,"retry":{"attempts":2}}`
	for _, c := range []struct {
		name, method, path, body string
		status                   int
		code                     wire.Code
		reason                   string
	}{
		{"incomplete", "PUT", "/v1/limiters/new", `{"limitPerWindow":3,"windowMs":60000}`, 400, wire.CodeInvalid, "lacks concurrency, leaseTtlMs, refillFraction, maxWaitMs"},
		{"null member", "PUT", "/v1/limiters/new", strings.Replace(complete, `"maxWaitMs":0`, `"maxWaitMs":null`, 1), 400, wire.CodeInvalid, "lacks maxWaitMs"},
		{"unknown field", "PUT", "/v1/limiters/new", strings.Replace(complete, `{`, `{"limit":3,`, 1), 400, wire.CodeInvalid, `unknown field "limit"`},
		{"out of bounds", "PUT", "/v1/limiters/new", strings.Replace(complete, `"limitPerWindow":3`, `"limitPerWindow":0`, 1), 400, wire.CodeInvalid, "limitPerWindow 0 outside 1…4096"},
		{"every problem", "PUT", "/v1/limiters/new", strings.Replace(strings.Replace(complete, `"windowMs":60000`, `"windowMs":-1`, 1), `"refillFraction":0.5`, `"refillFraction":0.0005`, 1), 400, wire.CodeInvalid, "windowMs -1 outside 1…10368000000 (120 days); refillFraction 0.0005 is finer than thousandths"},
		{"data after", "PUT", "/v1/limiters/new", complete + `{}`, 400, wire.CodeInvalid, "data after the object"},
		{"member in another case", "PUT", "/v1/limiters/new", strings.Replace(complete, `}}`, `},"MaxWaitMs":5000}`, 1), 400, wire.CodeInvalid, `unknown field "MaxWaitMs"`},
		{"member twice", "PUT", "/v1/limiters/new", strings.Replace(complete, `}}`, `},"maxWaitMs":5000}`, 1), 400, wire.CodeInvalid, `"maxWaitMs" given twice`},
		{"patch member in another case", "PATCH", "/v1/limiters/billing-api", `{"Concurrency":1}`, 400, wire.CodeInvalid, `unknown field "Concurrency"`},
		{"bad name", "PUT", "/v1/limiters/has%20space", complete, 400, wire.CodeInvalid, "only letters, digits"},
		{"too large", "PUT", "/v1/limiters/new", strings.Repeat(" ", 5000) + complete, 413, wire.CodeTooLarge, "over 4 KiB"},
		{"patch not an object", "PATCH", "/v1/limiters/billing-api", `[1]`, 400, wire.CodeInvalid, "a merge patch is a JSON object"},
		{"patch removes a required field", "PATCH", "/v1/limiters/billing-api", `{"windowMs":null}`, 400, wire.CodeInvalid, "lacks windowMs"},
		{"patch out of bounds", "PATCH", "/v1/limiters/billing-api", `{"concurrency":2000}`, 400, wire.CodeInvalid, "concurrency 2000 outside 0…1024"},
		{"patch unknown field", "PATCH", "/v1/limiters/billing-api", `{"retry":{"jitter":1}}`, 400, wire.CodeInvalid, `unknown field "jitter"`},
		{"method", "DELETE", "/v1/limiters/billing-api", "", 405, wire.CodeMethod, "DELETE is not allowed"},
		{"list method", "POST", "/v1/limiters", "", 405, wire.CodeMethod, "POST is not allowed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			status, p, hdr := h.send(c.method, c.path, limKey, c.body)
			if status != c.status || p.Code != c.code || !strings.Contains(p.Reason, c.reason) {
				t.Errorf("%d %s %q; want %d %s containing %q", status, p.Code, p.Reason, c.status, c.code, c.reason)
			}
			allow := "GET, HEAD, PUT, PATCH"
			if c.path == "/v1/limiters" {
				allow = "GET, HEAD"
			}
			checkAllow(t, status, hdr, allow)
		})
	}
	list, err := admin.List(ctx)
	if err != nil || len(list) != 1 || list[0].Config != billingConfig() {
		t.Errorf("after the refusals: %+v, %v; want billing-api unchanged and nothing else", list, err)
	}
}

func TestLimitersAuthentication(t *testing.T) {
	h := newLimHarness(t, nil)
	for _, c := range []struct {
		name, method, path, key string
		status                  int
	}{
		{"no token", "GET", "/v1/limiters", "", 401},
		{"wrong token", "GET", "/v1/limiters", strings.Repeat("x", 40), 401},
		{"the signing secret", "GET", "/v1/limiters", limSecret, 401},
		{"the pepper", "GET", "/v1/limiters", limPepper, 401},
		{"operator token", "GET", "/v1/limiters", limToken, 200},
		{"limits key", "GET", "/v1/limiters", limKey, 200},
		{"limits key on one limiter", "GET", "/v1/limiters/x", limKey, 404},
		{"limits key on the operator API", "GET", "/control/state", limKey, 401},
		{"limits key on a stop", "POST", "/control/stop", limKey, 401},
	} {
		t.Run(c.name, func(t *testing.T) {
			if status, p, _ := h.send(c.method, c.path, c.key, ""); status != c.status {
				t.Errorf("%s %s: %d %s %q, want %d", c.method, c.path, status, p.Code, p.Reason, c.status)
			}
		})
	}
	// Without a limits key only the operator token opens the endpoints.
	h = newLimHarness(t, func(c *server.Config) { c.LimitsKey = "" })
	if status, _, _ := h.send("GET", "/v1/limiters", limKey, ""); status != 401 {
		t.Errorf("a limits key on a server without one: %d, want 401", status)
	}
	if status, _, _ := h.send("GET", "/v1/limiters", limToken, ""); status != 200 {
		t.Errorf("the operator token on a server without a limits key: %d, want 200", status)
	}
}

func TestLimitersConfiguration(t *testing.T) {
	// Without a pepper the server cannot name the clients' limiters.
	h := newLimHarness(t, func(c *server.Config) { c.Pepper = "" })
	if status, p, _ := h.send("GET", "/v1/limiters", limToken, ""); status != 503 || !strings.Contains(p.Reason, "no key pepper") {
		t.Errorf("without a pepper: %d %q, want 503 naming the pepper", status, p.Reason)
	}
	for _, c := range []struct {
		name   string
		modify func(*server.Config)
		reason string
	}{
		{"short pepper", func(c *server.Config) { c.Pepper = "short" }, "key pepper is 5 characters"},
		{"pepper is a secret", func(c *server.Config) { c.Pepper = limSecret }, "key pepper equals a signing secret"},
		// Every client holds the pepper: as the operator token it would
		// let any of them stop the fleet.
		{"pepper is the operator token", func(c *server.Config) { c.Pepper = limToken }, "key pepper equals the operator token"},
		{"short limits key", func(c *server.Config) { c.LimitsKey = "short" }, "limits key is 5 characters"},
		{"limits key is the operator token", func(c *server.Config) { c.LimitsKey = limToken }, "limits key equals the operator token"},
		{"limits key is a secret", func(c *server.Config) { c.LimitsKey = limSecret }, "limits key equals a signing secret"},
		{"limits key is the pepper", func(c *server.Config) { c.LimitsKey = limPepper }, "limits key equals the key pepper"},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newLimHarness(t, c.modify)
			status, p, _ := h.send("GET", "/v1/limiters", limToken, "")
			if status != 503 || !strings.Contains(p.Reason, c.reason) {
				t.Errorf("%d %q, want 503 containing %q", status, p.Reason, c.reason)
			}
		})
	}
}

// A problem met while building the configuration, such as a malformed
// credential file, makes every call answer 503 with the reason.
func TestConfigProblemRefusesEverything(t *testing.T) {
	h := newLimHarness(t, func(c *server.Config) { c.AddProblem(errors.New("the pepper file is empty")) })
	status, p, _ := h.send("GET", "/v1/limiters", limToken, "")
	if status != 503 || !strings.Contains(p.Reason, "the pepper file is empty") {
		t.Errorf("%d %q, want 503 with the problem", status, p.Reason)
	}
}

func TestPingReportsTheLimitersFeature(t *testing.T) {
	for _, c := range []struct {
		pepper string
		want   []string
	}{{limPepper, []string{wire.FeatureRPCs, wire.FeatureLimiters, wire.FeaturePolicies}}, {"", []string{wire.FeatureRPCs}}} {
		h := newLimHarness(t, func(cfg *server.Config) { cfg.Pepper = c.pepper })
		resp, err := http.Get(h.url + wire.PathPing)
		if err != nil {
			t.Fatal(err)
		}
		var p wire.Ping
		err = json.NewDecoder(resp.Body).Decode(&p)
		resp.Body.Close()
		if err != nil || p.Protocol != wire.ProtocolVersion || strings.Join(p.Features, ",") != strings.Join(c.want, ",") {
			t.Errorf("pepper %q: ping %+v, %v; want features %v", c.pepper, p, err, c.want)
		}
	}
}

// TestLimitsBodyOverBoundClosesTheConnection: a limiter or policy body over
// 4 KiB answers 413 and closes the HTTP/1.1 connection, as every 413 does,
// rather than leaving net/http to drain up to 256 KiB more of it first.
func TestLimitsBodyOverBoundClosesTheConnection(t *testing.T) {
	h := newLimHarness(t, nil)
	huge := `{"limit":1,"pad":"` + strings.Repeat("x", 5<<10) + `"}`
	for _, c := range []struct{ method, path string }{
		{http.MethodPut, "/v1/limiters/big"},
		{http.MethodPatch, "/v1/limiters/big"},
		{http.MethodPut, "/v1/policies/big"},
	} {
		req, err := http.NewRequest(c.method, h.url+c.path, strings.NewReader(huge))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+limKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestEntityTooLarge {
			t.Errorf("%s %s: %d, want 413", c.method, c.path, resp.StatusCode)
		}
		if resp.ProtoMajor != 1 || !resp.Close {
			t.Errorf("%s %s: HTTP/%d answer keeps the connection, want it closed", c.method, c.path, resp.ProtoMajor)
		}
	}
}

// checkAllow requires a 405 answer to name the methods its path takes,
// allow, in its Allow header.
func checkAllow(t *testing.T, status int, hdr http.Header, allow string) {
	t.Helper()
	if got := hdr.Get("Allow"); status == http.StatusMethodNotAllowed && got != allow {
		t.Errorf("405 with Allow %q, want %q", got, allow)
	}
}
