package main

import (
	"strings"
	"testing"
	"time"
)

func TestServeConfigValidate(t *testing.T) {
	if err := defaultServeConfig().Validate(); err != nil {
		t.Fatalf("default configuration: %v", err)
	}
	for _, tc := range []struct {
		name   string
		modify func(*serveConfig)
		want   string
	}{
		{"address without port", func(c *serveConfig) { c.Addr = "127.0.0.1" }, "address"},
		{"empty data dir", func(c *serveConfig) { c.DataDir = "" }, "data directory"},
		{"unknown store", func(c *serveConfig) { c.Store = "redis" }, "store"},
		{"unknown fsync", func(c *serveConfig) { c.Fsync = "sometimes" }, "fsync"},
		{"zero fsync interval", func(c *serveConfig) { c.FsyncInterval = 0 }, "fsync interval"},
		{"unknown log format", func(c *serveConfig) { c.LogFormat = "xml" }, "log format"},
		{"certificate without key", func(c *serveConfig) { c.TLSCert = "cert.pem" }, "tls"},
		{"zero shutdown timeout", func(c *serveConfig) { c.ShutdownTimeout = 0 }, "shutdown"},
		{"negative state refresh", func(c *serveConfig) { c.StateRefresh = -time.Second }, "state refresh"},
		{"state refresh above a minute", func(c *serveConfig) { c.StateRefresh = time.Hour }, "state refresh"},
		{"unbounded header read", func(c *serveConfig) { c.HTTP.ReadHeaderTimeout = 0 }, "read-header"},
		{"unbounded headers", func(c *serveConfig) { c.HTTP.MaxHeaderBytes = 0 }, "header bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := defaultServeConfig()
			tc.modify(&c)
			err := c.Validate()
			if err == nil || !strings.Contains(strings.ToLower(err.Error()), tc.want) {
				t.Errorf("error %v, want one about %q", err, tc.want)
			}
		})
	}
	c := defaultServeConfig()
	c.Store, c.LogFormat, c.ShutdownTimeout = "x", "y", -time.Second
	if n := strings.Count(c.Validate().Error(), "\n") + 1; n != 3 {
		t.Errorf("%d problems reported, want all 3 at once", n)
	}
}

func TestSplitSecrets(t *testing.T) {
	for in, want := range map[string][]string{
		"":        nil,
		"  ":      nil,
		"a":       {"a"},
		"a, b":    {"a", "b"},
		"a,,b":    {"a", "", "b"}, // the empty one is refused as too short
		" a , b,": {"a", "b", ""},
	} {
		got := splitSecrets(in)
		if strings.Join(got, "|") != strings.Join(want, "|") || len(got) != len(want) {
			t.Errorf("splitSecrets(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestIsLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:7420":  true,
		"127.9.9.9:1":     true,
		"[::1]:7420":      true,
		"localhost:7420":  true,
		":7420":           false,
		"0.0.0.0:7420":    false,
		"10.0.0.1:7420":   false,
		"[::]:7420":       false,
		"example.org:443": false,
	} {
		if got := isLoopback(addr); got != want {
			t.Errorf("isLoopback(%q) = %v, want %v", addr, got, want)
		}
	}
}

// TestServeListensOnLoopbackByDefault: with no --addr and no SLUICE_ADDR,
// sluice serve listens on a loopback address; exposing it takes the flag.
func TestServeListensOnLoopbackByDefault(t *testing.T) {
	f := newServeCmd().Flags().Lookup("addr")
	if f == nil {
		t.Fatal("sluice serve has no --addr flag")
	}
	if !isLoopback(f.DefValue) || f.DefValue != "127.0.0.1:7420" {
		t.Errorf("--addr defaults to %q, want the loopback 127.0.0.1:7420", f.DefValue)
	}
}
