package main

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/wire"
)

func serverPolicies(t *testing.T, hs *httptest.Server) routes {
	t.Helper()
	pc, err := client.NewPolicies(client.LimitersConfig{URL: hs.URL, Key: testToken})
	if err != nil {
		t.Fatal(err)
	}
	list, err := pc.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	r := routes{}
	for _, p := range list {
		r[p.Name] = p.Config
	}
	return r
}

func TestParseRoutes(t *testing.T) {
	route := func(body string) string { return "routes:\n  login:\n" + body }
	for _, c := range []struct {
		name, file string
		format     limitsFormat
		want       wire.PolicyConfig
		err        []string // each must appear in the error
	}{
		{name: "kind defaults to fixed", file: route("    limit: 10\n    windowMs: 60000\n"), want: wire.PolicyConfig{Limit: 10, WindowMs: 60000, Kind: "fixed"}},
		{name: "every field", file: route("    limit: 4096\n    windowMs: 1000\n    kind: log\n"), want: wire.PolicyConfig{Limit: 4096, WindowMs: 1000, Kind: "log"}},
		{name: "beside limiters", file: "limiters: {}\n" + route("    limit: 1\n    windowMs: 3600000\n    kind: gcra\n"), want: wire.PolicyConfig{Limit: 1, WindowMs: 3600000, Kind: "gcra"}},
		{name: "required", file: route("    kind: fixed\n"), err: []string{`route "login"`, "limit is required", "windowMs is required"}},
		{name: "not whole seconds", file: route("    limit: 10\n    windowMs: 1500\n"), err: []string{`route "login": windowMs 1500 is not whole seconds`}},
		{name: "out of bounds", file: route("    limit: 5000\n    windowMs: 10\n    kind: log\n"), err: []string{"limit 5000 outside 1…4096", "windowMs 10 outside 1000…"}},
		{name: "unknown kind", file: route("    limit: 10\n    windowMs: 1000\n    kind: token\n"), err: []string{`kind "token" is not fixed, sliding, log or gcra`}},
		{name: "kind not a name", file: route("    limit: 10\n    windowMs: 1000\n    kind: 3\n"), err: []string{`kind 3 is not fixed, sliding, log or gcra`}},
		{name: "quoted number", file: route("    limit: \"10\"\n    windowMs: 1000\n"), err: []string{`limit "10" is not a whole number`}},
		{name: "unknown field", file: route("    limit: 10\n    windowMs: 1000\n    name: x\n"), err: []string{`unknown field "name"`}},
		{name: "bad name", file: "routes:\n  \"a/b\": {limit: 1, windowMs: 1000}\n", err: []string{`route "a/b": policy name "a/b": only letters`}},
		{name: "every entry's problems", file: "limiters:\n  a: {limitPerWindow: 1}\nroutes:\n  b: {windowMs: 1000}\n", err: []string{`limiter "a": windowMs is required`, `route "b": limit is required`}},
		{name: "jsonc", format: formatJSONC, file: "{\n  // c\n  \"routes\": {\"login\": {\"limit\": 10, \"windowMs\": 60000, \"kind\": \"sliding\",},},\n}\n", want: wire.PolicyConfig{Limit: 10, WindowMs: 60000, Kind: "sliding"}},
		{name: "jsonc fraction", format: formatJSONC, file: `{"routes": {"login": {"limit": 1e1, "windowMs": 1000}}}`, err: []string{"limit 10 is not a whole number"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, err := parseLimits(c.format, []byte(c.file))
			if len(c.err) > 0 {
				if err == nil {
					t.Fatalf("no error; want one containing %q", c.err)
				}
				for _, want := range c.err {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("error %q does not contain %q", err, want)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := p.routes["login"]; len(p.routes) != 1 || got != c.want {
				t.Errorf("routes %+v, want login: %+v", p.routes, c.want)
			}
		})
	}
}

// TestRenderRoutes rewrites files for changed route policies: the comments
// stay, a file without routes gains them, and what is written reads back.
func TestRenderRoutes(t *testing.T) {
	for _, c := range []struct {
		format limitsFormat
		file   string
		kept   []string
	}{
		{formatYAML, sampleYAML, []string{"# The billing API allows", "# Sign-in: 10 attempts"}},
		{formatJSONC, sampleJSONC, []string{"// The billing API allows", "// Sign-in: 10 attempts"}},
		{formatYAML, "# mine\nlimiters: {}\n", []string{"# mine"}},
		{formatJSONC, "{\n\t// mine\n\t\"limiters\": {},\n}\n", []string{"// mine"}},
		{formatJSONC, "{\n\t// only routes\n\t\"routes\": {\"old\": {\"limit\": 1, \"windowMs\": 1000}},\n}\n", []string{"// only routes"}},
	} {
		old, err := parseLimits(c.format, []byte(c.file))
		if err != nil {
			t.Fatal(err)
		}
		state := maps.Clone(old.limits)
		state["new-limiter"] = wire.LimiterConfig{LimitPerWindow: 7, WindowMs: 1000, RefillFraction: 1}
		rts := maps.Clone(old.routes)
		delete(rts, "old")
		if l, ok := rts["login"]; ok {
			l.Limit, l.Kind = 20, "gcra"
			rts["login"] = l
		}
		rts["search"] = wire.PolicyConfig{Limit: 100, WindowMs: 60000, Kind: "fixed"}
		out, err := renderLimits(c.format, old, state, rts)
		if err != nil {
			t.Fatalf("%s: %v", c.file, err)
		}
		for _, want := range c.kept {
			if !strings.Contains(string(out), want) {
				t.Errorf("%q was lost:\n%s", want, out)
			}
		}
		back, err := parseLimits(c.format, out)
		if err != nil || !maps.Equal(back.routes, rts) || !maps.Equal(back.limits, state) {
			t.Errorf("the rewritten file reads as %+v %+v, %v; want %+v %+v\n%s", back.limits, back.routes, err, state, rts, out)
		}
		if same, err := renderLimits(c.format, old, old.limits, old.routes); err != nil || string(same) != c.file {
			t.Errorf("an unchanged state rewrote the file: %v\n%s", err, same)
		}
	}
}

// TestLimitsApplyAndStatsRoutes applies the sample's route policy, finds
// the server holding it, shows a change made on the server, and saves it.
func TestLimitsApplyAndStatsRoutes(t *testing.T) {
	hs := newLimitsServer(t)
	dir := t.TempDir()
	env := map[string]string{"SLUICE_URL": hs.URL, "SLUICE_LIMITS_KEY": testLimitsKey}
	if _, err := runLimits(t, dir, env, "limits", "sample"); err != nil {
		t.Fatal(err)
	}
	sample, err := os.ReadFile(filepath.Join(dir, "sluice-limits.yaml"))
	if err != nil {
		t.Fatal(err)
	}

	// A bad route: nothing is sent, not even the limiters.
	bad := strings.Replace(string(sample), "windowMs: 60000\n    kind: sliding", "windowMs: 60500\n    kind: sliding", 1)
	if err := os.WriteFile(filepath.Join(dir, "bad.yaml"), []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := runLimits(t, dir, env, "limits", "apply", "-f", "bad.yaml"); err == nil || !strings.Contains(err.Error(), `nothing was applied: bad.yaml: route "login": windowMs 60500 is not whole seconds`) {
		t.Errorf("apply of a bad file: %v", err)
	}
	if got, lim := serverPolicies(t, hs), serverLimiters(t, hs); len(got) != 0 || len(lim) != 0 {
		t.Errorf("a bad file set %v and %v", got, lim)
	}

	out, err := runLimits(t, dir, env, "limits", "apply", "--dry-run")
	if err != nil || !strings.Contains(out, "create   route login") || !strings.Contains(out, "1 route policy(ies) in sluice-limits.yaml: 1 to create or change, 0 unchanged") {
		t.Errorf("dry run: %v\n%s", err, out)
	}
	if got := serverPolicies(t, hs); len(got) != 0 {
		t.Errorf("a dry run set %v", got)
	}
	out, err = runLimits(t, dir, env, "limits", "apply")
	if err != nil || !strings.Contains(out, "created  route login") {
		t.Fatalf("apply: %v\n%s", err, out)
	}
	want := routes{"login": {Limit: 10, WindowMs: 60000, Kind: "sliding"}}
	if got := serverPolicies(t, hs); !maps.Equal(got, want) {
		t.Errorf("the server holds %+v, want %+v", got, want)
	}
	if out, err = runLimits(t, dir, env, "limits", "apply"); err != nil || !strings.Contains(out, "1 route policy(ies) in sluice-limits.yaml: 0 created or changed, 1 unchanged") {
		t.Errorf("a second apply: %v\n%s", err, out)
	}
	out, err = runLimits(t, dir, env, "limits", "stats", "--save")
	if err != nil || !strings.Contains(out, "login         10 per 1m0s  sliding") || !strings.Contains(out, "left as it is") {
		t.Errorf("stats --save: %v\n%s", err, out)
	}
	if now, _ := os.ReadFile(filepath.Join(dir, "sluice-limits.yaml")); !bytes.Equal(now, sample) {
		t.Errorf("stats --save changed the applied file:\n%s", now)
	}

	// A change on the server shows in apply and in --save.
	pc, err := client.NewPolicies(client.LimitersConfig{URL: hs.URL, Key: testLimitsKey})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pc.Set(context.Background(), "login", wire.PolicyConfig{Limit: 5, WindowMs: 60000, Kind: "fixed"}); err != nil {
		t.Fatal(err)
	}
	if _, err := pc.Set(context.Background(), "search", wire.PolicyConfig{Limit: 100, WindowMs: 1000, Kind: "gcra"}); err != nil {
		t.Fatal(err)
	}
	out, err = runLimits(t, dir, env, "limits", "apply", "--dry-run")
	if err != nil || !strings.Contains(out, "change (limit 5→10, kind fixed→sliding) route login") || !strings.Contains(out, "kept as they are: search") {
		t.Errorf("dry run after a change: %v\n%s", err, out)
	}
	if _, err = runLimits(t, dir, env, "limits", "stats", "--save"); err != nil {
		t.Fatal(err)
	}
	saved, err := readLimitsFile(filepath.Join(dir, "sluice-limits.yaml"))
	if err != nil || !maps.Equal(saved.routes, serverPolicies(t, hs)) || !strings.Contains(string(saved.raw), "# Sign-in: 10 attempts") {
		t.Errorf("stats --save: %v\n%s", err, saved.raw)
	}
}

// TestLimitsAgainstAServerWithoutPolicies runs the commands against a
// server answering /v1/policies 404 not_found, as one from before the
// endpoints: a file without routes applies and saves as before; one with
// routes is refused before anything is written.
func TestLimitsAgainstAServerWithoutPolicies(t *testing.T) {
	hs := newLimitsServer(t)
	backend, err := url.Parse(hs.URL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(backend)
	old := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, wire.PathPolicies) {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusNotFound)
			_ = json.NewEncoder(w).Encode(wire.NewProblem(wire.CodeNotFound, "no such endpoint"))
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(old.Close)
	dir := t.TempDir()
	env := map[string]string{"SLUICE_URL": old.URL, "SLUICE_LIMITS_KEY": testLimitsKey}
	if _, err := runLimits(t, dir, env, "limits", "sample"); err != nil {
		t.Fatal(err)
	}
	if _, err := runLimits(t, dir, env, "limits", "apply"); err == nil || !strings.Contains(err.Error(), "nothing was applied: reading the route policies") {
		t.Errorf("apply of routes to a server without policies: %v", err)
	}
	if got := serverLimiters(t, hs); len(got) != 0 {
		t.Errorf("a refused file configured %v", got)
	}
	sample, err := os.ReadFile(filepath.Join(dir, "sluice-limits.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	limitersOnly, _, _ := strings.Cut(string(sample), "# Route quotas")
	if err := os.WriteFile(filepath.Join(dir, "sluice-limits.yaml"), []byte(limitersOnly), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := runLimits(t, dir, env, "limits", "apply"); err != nil || !strings.Contains(out, "2 created or changed") {
		t.Fatalf("apply of limiters alone: %v\n%s", err, out)
	}
	if out, err := runLimits(t, dir, env, "limits", "stats", "--save"); err != nil || !strings.Contains(out, "left as it is") {
		t.Errorf("stats --save of limiters alone: %v\n%s", err, out)
	}
}
