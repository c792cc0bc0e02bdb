package server_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/testclock"
	"github.com/sluicehq/sluice/server"
	"github.com/sluicehq/sluice/wire"
)

// policyAdmin returns a Policies client authenticated with key.
func (h *limHarness) policyAdmin(key string) *client.Policies {
	h.t.Helper()
	p, err := client.NewPolicies(client.LimitersConfig{URL: h.url, Key: key})
	if err != nil {
		h.t.Fatal(err)
	}
	return p
}

// service returns a client of the server hashing with pepper, and the
// httplimit.Policies over it, as a service process builds them.
func (h *limHarness) service(pepper string, clock *testclock.Clock) (*client.Client, *httplimit.Policies) {
	h.t.Helper()
	c := client.New(client.Config{URL: h.url, Secret: limSecret, Pepper: pepper, Timeout: client.MaxTimeout})
	if err := c.Err(); err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { c.Close() })
	cfg := httplimit.DefaultPoliciesConfig()
	cfg.Store, cfg.Clock, cfg.Refresh = c, clock, 10*time.Second
	pols, err := httplimit.NewPolicies(cfg)
	if err != nil {
		h.t.Fatal(err)
	}
	return c, pols
}

// loginStage returns a stage on /login enforcing the policy "login" of
// pols, counting over store.
func loginStage(t *testing.T, c *client.Client, pols *httplimit.Policies) http.Handler {
	t.Helper()
	pol, err := pols.Policy("login")
	if err != nil {
		t.Fatal(err)
	}
	cfg := httplimit.DefaultConfig()
	cfg.Routes, cfg.Prefix, cfg.Store, cfg.Policy = []string{"/login"}, "svc", c, pol
	lim, err := httplimit.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) }))
}

// loginCodes sends n requests of one client to h and returns their statuses.
func loginCodes(h http.Handler, n int) []int {
	var got []int
	for range n {
		req := httptest.NewRequest(http.MethodPost, "/login", nil)
		req.RemoteAddr = "203.0.113.9:1"
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		got = append(got, rec.Code)
	}
	return got
}

// TestPoliciesReachTheServicesStages is the point of the endpoints: a policy
// set through /v1/policies is the one a service's httplimit.Policies over a
// client with the fleet's pepper reads and its stage enforces, a change is
// enforced after the refresh, and a service hashing with another pepper
// does not find it.
func TestPoliciesReachTheServicesStages(t *testing.T) {
	ctx := context.Background()
	h := newLimHarness(t, nil)
	admin := h.policyAdmin(limKey)
	if _, err := admin.Set(ctx, "login", wire.PolicyConfig{Limit: 2, WindowMs: 60_000, Kind: "sliding"}); err != nil {
		t.Fatal(err)
	}

	clock := testclock.New(time.Unix(1_800_000_000, 0))
	c, pols := h.service(limPepper, clock)
	q, err := pols.Get(ctx, "login")
	if err != nil || q.Limit != 2 || q.Window != time.Minute || q.Kind.String() != "sliding" {
		t.Fatalf("the service's Get = %+v, %v; want limit 2 per minute, sliding", q, err)
	}
	if names, err := pols.List(ctx); err != nil || !slices.Equal(names, []string{"login"}) {
		t.Fatalf("the service's List = %q, %v", names, err)
	}
	stage := loginStage(t, c, pols)
	if got := loginCodes(stage, 3); !slices.Equal(got, []int{200, 200, 429}) {
		t.Fatalf("limit 2: %v", got)
	}
	if _, err := admin.Set(ctx, "login", wire.PolicyConfig{Limit: 4, WindowMs: 60_000, Kind: "sliding"}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(10 * time.Second)
	if got := loginCodes(stage, 3); !slices.Equal(got, []int{200, 200, 429}) {
		t.Fatalf("limit 4 after the refresh: %v", got)
	}
	if err := admin.Delete(ctx, "login"); err != nil {
		t.Fatal(err)
	}
	clock.Advance(10 * time.Second)
	if got := loginCodes(stage, 1); !slices.Equal(got, []int{503}) {
		t.Fatalf("after DELETE: %v, want the stage refusing", got)
	}

	// Another pepper hashes the names elsewhere: no policy there.
	if _, err := admin.Set(ctx, "login", wire.PolicyConfig{Limit: 2, WindowMs: 60_000, Kind: "fixed"}); err != nil {
		t.Fatal(err)
	}
	_, other := h.service(strings.Repeat("p", 40), clock)
	if _, err := other.Get(ctx, "login"); !errors.Is(err, httplimit.ErrNoPolicy) {
		t.Errorf("a service with another pepper: %v, want no policy", err)
	}
}

// TestPoliciesSeeWhatServicesSet checks the other direction: a policy a
// process set through httplimit over a client is listed and read by the
// server.
func TestPoliciesSeeWhatServicesSet(t *testing.T) {
	ctx := context.Background()
	h := newLimHarness(t, nil)
	_, pols := h.service(limPepper, testclock.New(time.Unix(1_800_000_000, 0)))
	if err := pols.Set(ctx, "search", httplimit.Quota{Limit: 100, Window: time.Hour}); err != nil {
		t.Fatal(err)
	}
	list, err := h.policyAdmin(limToken).List(ctx)
	want := wire.Policy{Name: "search", Config: wire.PolicyConfig{Limit: 100, WindowMs: 3_600_000, Kind: "fixed"}}
	if err != nil || len(list) != 1 || list[0] != want {
		t.Errorf("List = %+v, %v; want %+v", list, err, want)
	}
}

// TestPoliciesReadBackWhatServicesSet checks that every policy a service
// can set is one the endpoints can read back and the limits file can hold:
// "." and "..", which a URL path cannot carry as a segment, are refused by
// httplimit too.
func TestPoliciesReadBackWhatServicesSet(t *testing.T) {
	ctx := context.Background()
	h := newLimHarness(t, nil)
	_, pols := h.service(limPepper, testclock.New(time.Unix(1_800_000_000, 0)))
	for _, name := range []string{"search", ".", ".."} {
		if err := pols.Set(ctx, name, httplimit.Quota{Limit: 100, Window: time.Hour}); err != nil && !errors.Is(err, httplimit.ErrInvalidConfig) {
			t.Fatalf("setting %q: %v", name, err)
		}
	}
	admin := h.policyAdmin(limToken)
	list, err := admin.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range list {
		names = append(names, p.Name)
		if _, err := admin.Get(ctx, p.Name); err != nil {
			t.Errorf("%q is listed, but reading it fails: %v", p.Name, err)
		}
	}
	if len(names) != 1 || names[0] != "search" {
		t.Errorf("listed %q, want only search", names)
	}
}

func TestPoliciesPutGetDelete(t *testing.T) {
	ctx := context.Background()
	h := newLimHarness(t, nil)
	admin := h.policyAdmin(limToken)
	if _, err := admin.Get(ctx, "login"); !errors.Is(err, wire.ErrNoSuchPolicy) {
		t.Errorf("Get of an unset policy: %v, want no_such_policy", err)
	}
	if list, err := admin.List(ctx); err != nil || list == nil || len(list) != 0 {
		t.Errorf("List of none = %#v, %v; want an empty list", list, err)
	}
	cfg := wire.PolicyConfig{Limit: 10, WindowMs: 60_000, Kind: "gcra"}
	if put, err := admin.Set(ctx, "login", cfg); err != nil || put.Name != "login" || put.Config != cfg {
		t.Fatalf("PUT = %+v, %v", put, err)
	}
	if got, err := admin.Get(ctx, "login"); err != nil || got.Config != cfg {
		t.Errorf("GET = %+v, %v; want %+v", got, err, cfg)
	}
	cfg.Limit = 20
	if _, err := admin.Set(ctx, "login", cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Set(ctx, "api.v2", wire.PolicyConfig{Limit: 5, WindowMs: 1000, Kind: "log"}); err != nil {
		t.Fatal(err)
	}
	list, err := admin.List(ctx)
	if err != nil || len(list) != 2 || list[0].Name != "api.v2" || list[1].Config != cfg {
		t.Errorf("List = %+v, %v; want api.v2 and the replaced login", list, err)
	}
	if err := admin.Delete(ctx, "login"); err != nil {
		t.Fatal(err)
	}
	if err := admin.Delete(ctx, "login"); err != nil {
		t.Errorf("deleting a deleted policy: %v, want no error", err)
	}
	if _, err := admin.Get(ctx, "login"); !errors.Is(err, wire.ErrNoSuchPolicy) {
		t.Errorf("Get after DELETE: %v, want no_such_policy", err)
	}
	if list, err := admin.List(ctx); err != nil || len(list) != 1 || list[0].Name != "api.v2" {
		t.Errorf("List after DELETE = %+v, %v", list, err)
	}
}

// TestPoliciesRefuseBadInput checks that every refusal names what is wrong
// and changes nothing.
func TestPoliciesRefuseBadInput(t *testing.T) {
	ctx := context.Background()
	h := newLimHarness(t, nil)
	admin := h.policyAdmin(limKey)
	want := wire.PolicyConfig{Limit: 3, WindowMs: 60_000, Kind: "fixed"}
	if _, err := admin.Set(ctx, "login", want); err != nil {
		t.Fatal(err)
	}
	complete := `{"limit":5,"windowMs":60000,"kind":"fixed"}`
	for _, c := range []struct {
		name, method, path, body string
		status                   int
		code                     wire.Code
		reason                   string
	}{
		{"incomplete", "PUT", "/v1/policies/login", `{"limit":3}`, 400, wire.CodeInvalid, "lacks windowMs, kind"},
		{"null member", "PUT", "/v1/policies/login", `{"limit":3,"windowMs":60000,"kind":null}`, 400, wire.CodeInvalid, "lacks kind"},
		{"unknown field", "PUT", "/v1/policies/login", strings.Replace(complete, `{`, `{"name":"x",`, 1), 400, wire.CodeInvalid, `unknown field "name"`},
		{"not whole seconds", "PUT", "/v1/policies/login", strings.Replace(complete, `60000`, `1500`, 1), 400, wire.CodeInvalid, "windowMs 1500 is not whole seconds"},
		{"every problem", "PUT", "/v1/policies/login", `{"limit":5000,"windowMs":10,"kind":"log"}`, 400, wire.CodeInvalid, "limit 5000 outside 1…4096; windowMs 10 outside 1000…"},
		{"unknown kind", "PUT", "/v1/policies/login", strings.Replace(complete, `fixed`, `token`, 1), 400, wire.CodeInvalid, `kind "token" is not fixed, sliding, log or gcra`},
		{"data after", "PUT", "/v1/policies/login", complete + `{}`, 400, wire.CodeInvalid, "data after the object"},
		{"member in another case", "PUT", "/v1/policies/login", strings.Replace(complete, `}`, `,"LIMIT":999}`, 1), 400, wire.CodeInvalid, `unknown field "LIMIT"`},
		{"member twice", "PUT", "/v1/policies/login", strings.Replace(complete, `}`, `,"limit":999}`, 1), 400, wire.CodeInvalid, `"limit" given twice`},
		{"bad name", "PUT", "/v1/policies/has%20space", complete, 400, wire.CodeInvalid, "only letters, digits"},
		{"long name", "PUT", "/v1/policies/" + strings.Repeat("a", 65), complete, 400, wire.CodeInvalid, "65 bytes"},
		{"too large", "PUT", "/v1/policies/login", strings.Repeat(" ", 5000) + complete, 413, wire.CodeTooLarge, "over 4 KiB"},
		{"method", "PATCH", "/v1/policies/login", `{"limit":4}`, 405, wire.CodeMethod, "PATCH is not allowed"},
		{"list method", "POST", "/v1/policies", complete, 405, wire.CodeMethod, "POST is not allowed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			status, p, hdr := h.send(c.method, c.path, limKey, c.body)
			if status != c.status || p.Code != c.code || !strings.Contains(p.Reason, c.reason) {
				t.Errorf("%d %s %q; want %d %s containing %q", status, p.Code, p.Reason, c.status, c.code, c.reason)
			}
			allow := "GET, HEAD, PUT, DELETE"
			if c.path == "/v1/policies" {
				allow = "GET, HEAD"
			}
			checkAllow(t, status, hdr, allow)
		})
	}
	list, err := admin.List(ctx)
	if err != nil || len(list) != 1 || list[0].Config != want {
		t.Errorf("after the refusals: %+v, %v; want login unchanged and nothing else", list, err)
	}
}

func TestPoliciesAuthentication(t *testing.T) {
	h := newLimHarness(t, nil)
	for _, c := range []struct {
		name, method, path, key string
		status                  int
	}{
		{"no token", "GET", "/v1/policies", "", 401},
		{"wrong token", "GET", "/v1/policies", strings.Repeat("x", 40), 401},
		{"the signing secret", "GET", "/v1/policies", limSecret, 401},
		{"the pepper", "GET", "/v1/policies", limPepper, 401},
		{"no token on a PUT", "PUT", "/v1/policies/login", "", 401},
		{"no token on a DELETE", "DELETE", "/v1/policies/login", "", 401},
		{"operator token", "GET", "/v1/policies", limToken, 200},
		{"limits key", "GET", "/v1/policies", limKey, 200},
		{"limits key on one policy", "GET", "/v1/policies/x", limKey, 404},
	} {
		t.Run(c.name, func(t *testing.T) {
			if status, p, _ := h.send(c.method, c.path, c.key, ""); status != c.status {
				t.Errorf("%s %s: %d %s %q, want %d", c.method, c.path, status, p.Code, p.Reason, c.status)
			}
		})
	}
	if _, p, _ := h.send("GET", "/v1/policies/x", limKey, ""); p.Code != wire.CodeNoSuchPolicy {
		t.Errorf("an unset policy answered %s, want %s", p.Code, wire.CodeNoSuchPolicy)
	}
	// Without a pepper the server cannot name the services' policies.
	h = newLimHarness(t, func(c *server.Config) { c.Pepper = "" })
	if status, p, _ := h.send("GET", "/v1/policies", limToken, ""); status != 503 || !strings.Contains(p.Reason, "no key pepper") {
		t.Errorf("without a pepper: %d %q, want 503 naming the pepper", status, p.Reason)
	}
}
