package client_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/wire"
)

func TestLimitersConfigValidate(t *testing.T) {
	key := strings.Repeat("k", 32)
	for _, c := range []struct {
		cfg  client.LimitersConfig
		want string
	}{
		{client.LimitersConfig{URL: "http://sluice.example:7420", Key: key}, "plain http on a non-loopback host"},
		{client.LimitersConfig{URL: "https://sluice.example/v1", Key: key}, "must be an origin"},
		{client.LimitersConfig{URL: "https://sluice.example", Key: "short"}, "5 characters (minimum 32)"},
		{client.LimitersConfig{URL: "https://sluice.example", Key: key, Timeout: -1}, "negative"},
	} {
		if _, err := client.NewLimiters(c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.cfg, err, c.want)
		}
	}
	if _, err := client.NewLimiters(client.LimitersConfig{URL: "https://sluice.example", Key: key}); err != nil {
		t.Error(err)
	}
}

// TestLimitersErrors checks that refusals come back as *wire.Error and
// failures to get an answer as ErrUnavailable, and that the bearer key is
// not sent after a redirect.
func TestLimitersErrors(t *testing.T) {
	key := strings.Repeat("k", 32)
	var redirected bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case wire.PathLimiters + "/gone":
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusNotFound)
			w.Write([]byte(`{"type":"about:blank","title":"Not Found","status":404,"code":"no_such_limiter","reason":"no limiter \"gone\""}`))
		case wire.PathLimiters + "/moved":
			http.Redirect(w, r, "/elsewhere", http.StatusTemporaryRedirect)
		case "/elsewhere":
			redirected = true
		default:
			w.Write([]byte("not json"))
		}
	}))
	defer srv.Close()
	l, err := client.NewLimiters(client.LimitersConfig{URL: srv.URL, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := l.Get(ctx, "gone"); !errors.Is(err, wire.ErrNoSuchLimiter) {
		t.Errorf("a 404 no_such_limiter: %v", err)
	}
	if _, err := l.Get(ctx, "moved"); !errors.Is(err, client.ErrUnavailable) || redirected {
		t.Errorf("a redirect: %v (followed: %v), want ErrUnavailable, not followed", err, redirected)
	}
	if _, err := l.List(ctx); !errors.Is(err, client.ErrUnavailable) {
		t.Errorf("an undecodable answer: %v, want ErrUnavailable", err)
	}
	srv.Close()
	if _, err := l.List(ctx); !errors.Is(err, client.ErrUnavailable) {
		t.Errorf("no server: %v, want ErrUnavailable", err)
	}
}

// TestLimiterAndPolicyNamesCheckedBeforeSending calls every method naming
// a limiter or a policy with names no limiter or policy can have, against
// a real server: each fails with wire.ErrInvalid, as the server refuses a
// bad name, and sends nothing. "." and ".." would otherwise reach the
// server as a path it cleans and redirects, read as unavailability, and
// "" as the list's path.
func TestLimiterAndPolicyNamesCheckedBeforeSending(t *testing.T) {
	h := newHarness(t)
	var sent atomic.Int64
	h.before = func(w http.ResponseWriter, r *http.Request) bool {
		sent.Add(1)
		return false
	}
	cfg := client.LimitersConfig{URL: h.srv.URL, Key: testToken}
	l, err := client.NewLimiters(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p, err := client.NewPolicies(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	for _, name := range []string{"", ".", "..", "a/b", strings.Repeat("n", wire.MaxLimiterName+1)} {
		calls := map[string]func() error{
			"Limiters.Get":         func() error { _, err := l.Get(ctx, name); return err },
			"Limiters.Configure":   func() error { _, err := l.Configure(ctx, name, wire.LimiterConfig{}); return err },
			"Limiters.Reconfigure": func() error { _, err := l.Reconfigure(ctx, name, map[string]any{"concurrency": 1}); return err },
			"Policies.Get":         func() error { _, err := p.Get(ctx, name); return err },
			"Policies.Set":         func() error { _, err := p.Set(ctx, name, wire.PolicyConfig{}); return err },
			"Policies.Delete":      func() error { return p.Delete(ctx, name) },
		}
		for method, call := range calls {
			if err := call(); !errors.Is(err, wire.ErrInvalid) || errors.Is(err, client.ErrUnavailable) {
				t.Errorf("%s(%q): %v, want wire.ErrInvalid", method, name, err)
			}
		}
	}
	if n := sent.Load(); n != 0 {
		t.Errorf("%d requests sent for names no limiter or policy can have, want none", n)
	}
}

// TestLimitersServerFailureIsUnavailable answers 503 guard_unavailable, the
// server's store failing under a configuration call: the outcome is
// unknown, as after a timeout, so the error wraps ErrUnavailable as every
// other failure does, with the server's problem as its cause. A refusal
// (404 no_such_limiter) stays a refusal.
func TestLimitersServerFailureIsUnavailable(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.Header().Set("Retry-After", "30")
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write([]byte(`{"type":"about:blank","title":"Service Unavailable","status":503,"code":"guard_unavailable","reason":"store unavailable"}`))
	}))
	defer srv.Close()
	l, err := client.NewLimiters(client.LimitersConfig{URL: srv.URL, Key: strings.Repeat("k", 32)})
	if err != nil {
		t.Fatal(err)
	}
	_, err = l.Configure(context.Background(), "billing-api", wire.LimiterConfig{})
	if !errors.Is(err, client.ErrUnavailable) || !errors.Is(err, wire.ErrUnavailable) {
		t.Errorf("a 503 guard_unavailable: %v, want ErrUnavailable with the server's problem", err)
	}
	if errors.Is(err, wire.ErrInvalid) || errors.Is(err, wire.ErrNoSuchLimiter) {
		t.Errorf("a 503 guard_unavailable: %v, matches a refusal", err)
	}
}
