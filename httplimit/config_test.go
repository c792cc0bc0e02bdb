package httplimit_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/clientip"
	"github.com/sluicehq/sluice/httplimit"
)

func TestConfigValidate(t *testing.T) {
	valid := func() httplimit.Config {
		cfg := httplimit.DefaultConfig()
		cfg.Routes = []string{"/login", "/device/*", "/*"}
		cfg.Prefix = "login"
		cfg.Quota.Limit = 10
		return cfg
	}
	if err := valid().Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	cases := map[string]struct {
		edit func(*httplimit.Config)
		want string // in the error
	}{
		"DefaultConfig alone": {func(c *httplimit.Config) { *c = httplimit.DefaultConfig() }, "no Routes"},
		"no routes":           {func(c *httplimit.Config) { c.Routes = nil }, "no Routes"},
		"relative route":      {func(c *httplimit.Config) { c.Routes = []string{"login"} }, "does not start with /"},
		"inner wildcard":      {func(c *httplimit.Config) { c.Routes = []string{"/a/*/b"} }, "final /* segment"},
		"glob suffix":         {func(c *httplimit.Config) { c.Routes = []string{"/a*"} }, "final /* segment"},
		"two wildcards":       {func(c *httplimit.Config) { c.Routes = []string{"/*/*"} }, "final /* segment"},
		"no prefix":           {func(c *httplimit.Config) { c.Prefix = "" }, "Prefix is empty"},
		"long prefix":         {func(c *httplimit.Config) { c.Prefix = strings.Repeat("p", httplimit.MaxPrefixLen+1) }, "Prefix is 257 bytes"},
		"control in prefix":   {func(c *httplimit.Config) { c.Prefix = "a\x00b" }, "control character"},
		"invalid UTF-8":       {func(c *httplimit.Config) { c.Prefix = "a\xffb" }, "not valid UTF-8"},
		"zero limit":          {func(c *httplimit.Config) { c.Quota.Limit = 0 }, "limit 0"},
		"negative limit":      {func(c *httplimit.Config) { c.Quota.Limit = -1 }, "limit -1"},
		"huge limit":          {func(c *httplimit.Config) { c.Quota.Limit = algo.MaxLimit + 1 }, "limit"},
		"log limit":           {func(c *httplimit.Config) { c.Quota.Kind, c.Quota.Limit = algo.KindLog, algo.MaxLogLimit+1 }, "log limit"},
		"unknown kind":        {func(c *httplimit.Config) { c.Quota.Kind = 9 }, "window kind"},
		"zero window":         {func(c *httplimit.Config) { c.Quota.Window = 0 }, "outside 1s"},
		"sub-second window":   {func(c *httplimit.Config) { c.Quota.Window = 500 * time.Millisecond }, "outside 1s"},
		"fractional window":   {func(c *httplimit.Config) { c.Quota.Window = 1500 * time.Millisecond }, "whole number of seconds"},
		"long window":         {func(c *httplimit.Config) { c.Quota.Window = httplimit.MaxWindow + time.Second }, "outside 1s"},
		"non-ASCII name":      {func(c *httplimit.Config) { c.Quota.Name = "quotà" }, "printable ASCII"},
		"long name":           {func(c *httplimit.Config) { c.Quota.Name = strings.Repeat("n", 65) }, "maximum 64"},
		"short pepper":        {func(c *httplimit.Config) { c.Pepper = "short" }, "Pepper is 5 characters"},
		"unknown headers":     {func(c *httplimit.Config) { c.Headers = 1 << 5 }, "unknown Headers"},
		"client IP prefix":    {func(c *httplimit.Config) { c.ClientIP.IPv6Prefix = 129 }, "IPv6Prefix"},
		"client IP zero":      {func(c *httplimit.Config) { c.ClientIP = clientip.Config{} }, "Header is empty"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			cfg := valid()
			tc.edit(&cfg)
			err := cfg.Validate()
			if err == nil || !errors.Is(err, httplimit.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate() = %v, want an ErrInvalidConfig mentioning %q", err, tc.want)
			}
			if _, err := httplimit.New(cfg); !errors.Is(err, httplimit.ErrInvalidConfig) {
				t.Fatalf("New() = %v, want ErrInvalidConfig", err)
			}
		})
	}
}

// Validate reports every problem at once.
func TestConfigValidateReportsEveryProblem(t *testing.T) {
	err := httplimit.DefaultConfig().Validate()
	for _, want := range []string{"no Routes", "Prefix is empty", "limit 0"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v, want it to mention %q", err, want)
		}
	}
}

// A custom Key makes ClientIP irrelevant; a Policy makes Quota irrelevant.
func TestConfigIgnoredFields(t *testing.T) {
	cfg := httplimit.DefaultConfig()
	cfg.Routes = []string{"/x"}
	cfg.Prefix = "x"
	cfg.Key = func(*http.Request) string { return "" }
	cfg.ClientIP.IPv6Prefix = 500
	cfg.Policy = httplimit.PolicyFunc(func(*http.Request) (httplimit.Quota, error) {
		return httplimit.Quota{Limit: 1, Window: time.Second}, nil
	})
	if err := cfg.Validate(); err != nil {
		t.Fatalf("Validate() = %v", err)
	}
}

// A Quota's zero Kind and Name mean fixed and "default".
func TestQuotaDefaults(t *testing.T) {
	mem, _ := newMem(t, 100)
	cfg := config(mem, 0, "/x")
	cfg.Quota = httplimit.Quota{Limit: 1, Window: time.Minute}
	h, _ := stage(t, cfg)
	serve(h, http.MethodGet, "/x", "192.0.2.1:1")
	rec := serve(h, http.MethodGet, "/x", "192.0.2.1:1")
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "60" || rec.Header().Get(httplimit.FieldPolicy) != `"default";q=1;w=60` {
		t.Fatalf("answered %d, Retry-After %q, policy %q", rec.Code, rec.Header().Get("Retry-After"), rec.Header().Get(httplimit.FieldPolicy))
	}
}
