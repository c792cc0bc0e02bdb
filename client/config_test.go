package client_test

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/internal/logtest"
)

var (
	goodSecret = strings.Repeat("s", 32)
	goodPepper = strings.Repeat("p", 32)
)

func TestConfigValidate(t *testing.T) {
	valid := func() client.Config {
		c := client.DefaultConfig()
		c.URL, c.Secret, c.Pepper = "https://sluice.example", goodSecret, goodPepper
		return c
	}
	ok := map[string]func(*client.Config){
		"https":                 func(c *client.Config) {},
		"https with port":       func(c *client.Config) { c.URL = "https://sluice.example:8443/" },
		"http on 127.0.0.1":     func(c *client.Config) { c.URL = "http://127.0.0.1:7070" },
		"http on 127.9.9.9":     func(c *client.Config) { c.URL = "http://127.9.9.9" },
		"http on localhost":     func(c *client.Config) { c.URL = "http://localhost:7070" },
		"http on ::1":           func(c *client.Config) { c.URL = "http://[::1]:7070" },
		"off needs no server":   func(c *client.Config) { *c = client.DefaultConfig(); c.Off = true },
		"families":              func(c *client.Config) { c.Families = []string{"proxy", "replay"} },
		"empty family: default": func(c *client.Config) { c.Family = "" },
		"HTTP/2":                func(c *client.Config) { c.HTTPVersion = client.HTTP2 },
		"HTTP/1.1":              func(c *client.Config) { c.HTTPVersion = client.HTTP1 },
		"coalescing off":        func(c *client.Config) { c.Coalesce = client.CoalesceOff },
		"coalescing at most":    func(c *client.Config) { c.Coalesce = client.MaxCoalesce },
	}
	for name, mutate := range ok {
		t.Run(name, func(t *testing.T) {
			c := valid()
			mutate(&c)
			if err := c.Validate(); err != nil {
				t.Fatal(err)
			}
		})
	}
	bad := map[string]struct {
		mutate func(*client.Config)
		reason string
	}{
		"no URL":            {func(c *client.Config) { c.URL = "" }, "no server URL"},
		"http remote":       {func(c *client.Config) { c.URL = "http://sluice.example" }, "plain http"},
		"http private":      {func(c *client.Config) { c.URL = "http://10.0.0.1" }, "plain http"},
		"ftp":               {func(c *client.Config) { c.URL = "ftp://sluice.example" }, "scheme"},
		"no scheme":         {func(c *client.Config) { c.URL = "sluice.example" }, "no host"},
		"path":              {func(c *client.Config) { c.URL = "https://sluice.example/api" }, "origin"},
		"query":             {func(c *client.Config) { c.URL = "https://sluice.example?x=1" }, "origin"},
		"port, no host":     {func(c *client.Config) { c.URL = "https://:8443" }, "no host"},
		"empty fragment":    {func(c *client.Config) { c.URL = "https://sluice.example#" }, "origin"},
		"credentials":       {func(c *client.Config) { c.URL = "https://u:p@sluice.example" }, "credentials"},
		"short secret":      {func(c *client.Config) { c.Secret = goodSecret[:31] }, "signing secret is 31"},
		"no secret":         {func(c *client.Config) { c.Secret = "" }, "signing secret is 0"},
		"short pepper":      {func(c *client.Config) { c.Pepper = goodPepper[:31] }, "key pepper is 31"},
		"pepper is secret":  {func(c *client.Config) { c.Pepper = c.Secret }, "equals the signing secret"},
		"bad family":        {func(c *client.Config) { c.Family = "a b" }, "only letters"},
		"long family":       {func(c *client.Config) { c.Family = strings.Repeat("f", 65) }, "family name of 65"},
		"bad assigned":      {func(c *client.Config) { c.Families = []string{"ok", "no,comma"} }, "assigned family"},
		"off, bad families": {func(c *client.Config) { c.Off = true; c.Families = []string{""} }, "assigned family"},
		"HTTP/3":            {func(c *client.Config) { c.HTTPVersion = "3" }, `HTTP version "3"`},
		"coalesce -2":       {func(c *client.Config) { c.Coalesce = -2 }, "coalesce -2"},
		"coalesce too many": {func(c *client.Config) { c.Coalesce = client.MaxCoalesce + 1 }, "coalesce 1025"},
	}
	for name, tc := range bad {
		t.Run(name, func(t *testing.T) {
			c := valid()
			tc.mutate(&c)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.reason) {
				t.Fatalf("Validate() = %v, want a reason containing %q", err, tc.reason)
			}
			off := client.New(c).Err()
			if !errors.Is(off, client.ErrUnavailable) || !strings.Contains(off.Error(), tc.reason) {
				t.Fatalf("client Err() = %v, want off with the reason", off)
			}
		})
	}
	// Every reason is reported at once.
	err := client.DefaultConfig().Validate()
	for _, want := range []string{"no server URL", "signing secret", "key pepper"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("Validate() = %v, want every reason including %q", err, want)
		}
	}
}

// setEnv sets every SLUICE_* variable, unset ones to empty.
func setEnv(t *testing.T, vars map[string]string) {
	for _, name := range []string{client.EnvURL, client.EnvSecret, client.EnvPepper, client.EnvTimeoutMs, client.EnvFamily, client.EnvFamilies, client.EnvBackend, client.EnvHTTPVersion, client.EnvCoalesce} {
		t.Setenv(name, vars[name])
	}
}

func TestConfigFromEnv(t *testing.T) {
	setEnv(t, map[string]string{
		client.EnvURL:         "https://sluice.internal:7443",
		client.EnvSecret:      goodSecret,
		client.EnvPepper:      goodPepper,
		client.EnvTimeoutMs:   "1200",
		client.EnvFamily:      "proxy",
		client.EnvFamilies:    " proxy, replay ,,password",
		client.EnvHTTPVersion: "1.1",
		client.EnvCoalesce:    " 16 ",
	})
	cfg, err := client.ConfigFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Coalesce != 16 {
		t.Fatalf("coalesce %d, want 16", cfg.Coalesce)
	}
	if cfg.URL != "https://sluice.internal:7443" || cfg.Secret != goodSecret || cfg.Pepper != goodPepper {
		t.Fatalf("connection settings: %+v", cfg)
	}
	if cfg.Timeout != 1200*time.Millisecond || cfg.Family != "proxy" || cfg.Off || cfg.HTTPVersion != client.HTTP1 {
		t.Fatalf("timeout %v family %q off %v HTTP version %q", cfg.Timeout, cfg.Family, cfg.Off, cfg.HTTPVersion)
	}
	if !slices.Equal(cfg.Families, []string{"proxy", "replay", "password"}) {
		t.Fatalf("families %q", cfg.Families)
	}
	c := client.New(cfg)
	if c.Err() != nil || c.Family() != "proxy" || !c.Assigned("replay") || c.Assigned("offline") || c.Assigned("Replay") {
		t.Fatalf("client: err %v family %q", c.Err(), c.Family())
	}
}

func TestConfigFromEnvDefaultsAndClamping(t *testing.T) {
	cases := map[string]time.Duration{
		"":                      client.DefaultTimeout,
		"750":                   750 * time.Millisecond,
		"100":                   100 * time.Millisecond,
		"99":                    client.MinTimeout,
		"0":                     client.MinTimeout,
		"-5":                    client.MinTimeout,
		"2000":                  2 * time.Second,
		"2001":                  client.MaxTimeout,
		"9223372036854775807":   client.MaxTimeout, // would overflow a Duration
		"-9223372036854775808":  client.MinTimeout,
		"99999999999999999999":  client.MaxTimeout, // beyond int64: a whole number still
		"-99999999999999999999": client.MinTimeout,
	}
	for v, want := range cases {
		setEnv(t, map[string]string{client.EnvURL: "https://s.example", client.EnvSecret: goodSecret, client.EnvPepper: goodPepper, client.EnvTimeoutMs: v})
		cfg, err := client.ConfigFromEnv()
		if err != nil {
			t.Fatalf("%s=%q: %v", client.EnvTimeoutMs, v, err)
		}
		if cfg.Timeout != want {
			t.Errorf("%s=%q: timeout %v, want %v", client.EnvTimeoutMs, v, cfg.Timeout, want)
		}
		if cfg.Family != client.DefaultFamily || len(cfg.Families) != 0 || cfg.Off || cfg.HTTPVersion != "" || cfg.Coalesce != 0 {
			t.Errorf("defaults: family %q families %q off %v HTTP version %q", cfg.Family, cfg.Families, cfg.Off, cfg.HTTPVersion)
		}
	}
}

func TestConfigFromEnvProblemsTurnTheClientOff(t *testing.T) {
	cases := map[string]struct {
		vars   map[string]string
		reason string
	}{
		"nothing set": {map[string]string{}, "no server URL"},
		"malformed timeout": {map[string]string{client.EnvURL: "https://s.example", client.EnvSecret: goodSecret, client.EnvPepper: goodPepper,
			client.EnvTimeoutMs: "fast"}, client.EnvTimeoutMs},
		"unknown backend": {map[string]string{client.EnvURL: "https://s.example", client.EnvSecret: goodSecret, client.EnvPepper: goodPepper,
			client.EnvBackend: "redis"}, client.EnvBackend},
		"cleartext URL": {map[string]string{client.EnvURL: "http://s.example", client.EnvSecret: goodSecret, client.EnvPepper: goodPepper}, "plain http"},
		"short pepper":  {map[string]string{client.EnvURL: "https://s.example", client.EnvSecret: goodSecret, client.EnvPepper: "pepper"}, "key pepper is 6"},
		"unknown HTTP version": {map[string]string{client.EnvURL: "https://s.example", client.EnvSecret: goodSecret, client.EnvPepper: goodPepper,
			client.EnvHTTPVersion: "h2c"}, "HTTP version"},
		"malformed coalesce": {map[string]string{client.EnvURL: "https://s.example", client.EnvSecret: goodSecret, client.EnvPepper: goodPepper,
			client.EnvCoalesce: "0"}, client.EnvCoalesce},
		"coalesce too many": {map[string]string{client.EnvURL: "https://s.example", client.EnvSecret: goodSecret, client.EnvPepper: goodPepper,
			client.EnvCoalesce: "5000"}, "coalesce 5000"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			setEnv(t, tc.vars)
			cfg, err := client.ConfigFromEnv()
			if err == nil || !strings.Contains(err.Error(), tc.reason) {
				t.Fatalf("ConfigFromEnv error %v, want one naming %q", err, tc.reason)
			}
			// Ignoring the error does not yield a working client.
			if off := client.New(cfg).Err(); !errors.Is(off, client.ErrUnavailable) || !strings.Contains(off.Error(), tc.reason) {
				t.Fatalf("client Err() = %v, want off naming %q", off, tc.reason)
			}
		})
	}
}

func TestConfigFromEnvBackendOff(t *testing.T) {
	setEnv(t, map[string]string{client.EnvBackend: "off", client.EnvFamilies: "proxy"})
	cfg, err := client.ConfigFromEnv()
	if err != nil {
		t.Fatalf("backend off needs no connection settings: %v", err)
	}
	c := client.New(cfg)
	if !cfg.Off || !errors.Is(c.Err(), client.ErrUnavailable) || !strings.Contains(c.Err().Error(), "backend set to off") {
		t.Fatalf("off %v, Err() %v", cfg.Off, c.Err())
	}
	if !c.Assigned("proxy") {
		t.Fatal("an off client still reports its assigned families")
	}
}

func TestConfigFromEnvCoalesceOff(t *testing.T) {
	setEnv(t, map[string]string{client.EnvURL: "https://s.example", client.EnvSecret: goodSecret, client.EnvPepper: goodPepper, client.EnvCoalesce: "off"})
	cfg, err := client.ConfigFromEnv()
	if err != nil || cfg.Coalesce != client.CoalesceOff {
		t.Fatalf("coalesce %d, %v; want %d", cfg.Coalesce, err, client.CoalesceOff)
	}
}

// A server URL that carries a password is refused, and the password appears
// in no error the client returns or logs, whatever else is wrong with the
// URL.
func TestConfigURLPasswordNeverQuoted(t *testing.T) {
	const password = "hunter2-url-password"
	for _, raw := range []string{
		"https://user:" + password + "@/",
		"https://user:" + password + "@",
		"https://user:" + password + "@ho st",
		"https://user:" + password + "@[::1",
		"https://user:" + password + "@example.com:99999",
		"https://user:" + password + "@example.com/path",
		"ftp://user:" + password + "@example.com",
		"https://user:" + password + "@example.com",
		// A credential may as well travel in the path, query or fragment.
		"https://example.com/?access_token=" + password,
		"https://example.com/" + password,
		"https://example.com/#" + password,
		"http://example.com/?key=" + password,
		"ftp://example.com/?key=" + password,
	} {
		t.Run(raw, func(t *testing.T) {
			cfg := client.DefaultConfig()
			cfg.URL, cfg.Secret, cfg.Pepper = raw, goodSecret, goodPepper
			err := cfg.Validate()
			if err == nil {
				t.Fatal("valid, want an error")
			}
			if strings.Contains(err.Error(), password) {
				t.Errorf("Validate quotes the password: %v", err)
			}
			logs := &logtest.Recorder{}
			cfg.Logger = slog.New(logs)
			c := client.New(cfg)
			defer c.Close()
			if err := c.Err(); err == nil || strings.Contains(err.Error(), password) {
				t.Errorf("Err = %v, want an error that does not quote the password", err)
			}
			if logs.Len() == 0 {
				t.Fatal("the invalid configuration was not logged")
			}
			for _, rec := range logs.Records() {
				if s := recordText(rec); strings.Contains(s, password) {
					t.Errorf("logged the password: %s", s)
				}
			}
			lc := client.LimitersConfig{URL: raw, Key: goodSecret}
			if err := lc.Validate(); err == nil || strings.Contains(err.Error(), password) {
				t.Errorf("LimitersConfig.Validate = %v, want an error that does not quote the password", err)
			}
		})
	}
}

// recordText is a log record's message and every attribute, as text.
func recordText(rec slog.Record) string {
	var b strings.Builder
	b.WriteString(rec.Message)
	rec.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%s", a.Key, a.Value)
		return true
	})
	return b.String()
}
