package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/server"
	"github.com/sluicehq/sluice/store/memstore"
	"github.com/sluicehq/sluice/wire"
)

var (
	testSecret = strings.Repeat("s", 40)
	testPepper = strings.Repeat("p", 40)
	testToken  = strings.Repeat("o", 40)
)

// newTestServer runs a server on a memory store.
func newTestServer(t *testing.T) *httptest.Server {
	t.Helper()
	st, err := memstore.New(memstore.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	cfg := server.DefaultConfig()
	cfg.Secrets, cfg.OperatorToken = []string{testSecret}, testToken
	hs := httptest.NewServer(server.New(engine.New(st), cfg))
	t.Cleanup(func() {
		hs.Close()
		st.Close()
	})
	return hs
}

// runSluice runs the command tree with args and env, and returns its
// standard output and error.
func runSluice(t *testing.T, env map[string]string, args ...string) (string, error) {
	t.Helper()
	root := newRootCmd(mapEnv(env))
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	err := root.ExecuteContext(context.Background())
	return out.String(), err
}

func TestControlCommands(t *testing.T) {
	hs := newTestServer(t)
	env := map[string]string{"SLUICE_URL": hs.URL, "SLUICE_OPERATOR_TOKEN": testToken}

	out, err := runSluice(t, env, "control", "stop", "--reason", "maintenance")
	if err != nil || !strings.HasPrefix(out, "stopped since ") || !strings.Contains(out, "maintenance") {
		t.Fatalf("stop: %v, %q", err, out)
	}
	if out, err := runSluice(t, env, "control", "state"); err != nil || !strings.Contains(out, "maintenance") {
		t.Errorf("state: %v, %q", err, out)
	}
	if out, err := runSluice(t, env, "control", "resume"); err != nil || out != "running\n" {
		t.Errorf("resume: %v, %q", err, out)
	}
	// The flag beats the environment: a wrong token from the flag fails.
	_, err = runSluice(t, env, "control", "state", "--operator-token", "wrong")
	if err == nil || !strings.Contains(err.Error(), "401 unauthorized") {
		t.Errorf("a wrong token: %v", err)
	}
}

func TestControlReadsTheTokenFromTheDataDir(t *testing.T) {
	hs := newTestServer(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, operatorTokenFile), []byte(testToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := runSluice(t, nil, "control", "state", "--url", hs.URL, "--data-dir", dir); err != nil || out != "running\n" {
		t.Errorf("state: %v, %q", err, out)
	}
	_, err := runSluice(t, nil, "control", "state", "--url", hs.URL, "--data-dir", t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "no operator token") {
		t.Errorf("without a token: %v", err)
	}
}

// An empty --data-dir (SLUICE_DATA_DIR=) names no directory: the tools
// refuse it rather than read credentials from the working directory.
func TestToolsRefuseAnEmptyDataDir(t *testing.T) {
	hs := newTestServer(t)
	dir := t.TempDir()
	for name, v := range map[string]string{operatorTokenFile: testToken, secretFile: testSecret, pepperFile: testPepper} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(v+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	t.Chdir(dir)
	env := map[string]string{"SLUICE_URL": hs.URL, "SLUICE_DATA_DIR": ""}
	for _, args := range [][]string{
		{"control", "state"},
		{"hit", "--partition", "p", "--limit", "1", "--window", "1m"},
		{"control", "fairness-reset", "--family", "default", "--principal", "u", "--actor", "a"},
	} {
		if out, err := runSluice(t, env, args...); err == nil || !strings.Contains(err.Error(), "data directory") {
			t.Errorf("%q with SLUICE_DATA_DIR empty: %v, %q; want a refusal naming the data directory", args, err, out)
		}
	}
}

func TestHitCommand(t *testing.T) {
	hs := newTestServer(t)
	env := map[string]string{"SLUICE_URL": hs.URL, "SLUICE_SECRET": testSecret, "SLUICE_PEPPER": testPepper}
	args := []string{"hit", "--partition", "user:7", "--limit", "1", "--window", "1m", "--kind", "gcra"}

	out, err := runSluice(t, env, args...)
	if err != nil || !strings.Contains(out, "allowed      yes") {
		t.Fatalf("first hit: %v, %q", err, out)
	}
	out, err = runSluice(t, env, args...)
	var exit exitError
	if !errors.As(err, &exit) || exit.code != exitDenied || !strings.Contains(out, "allowed      no") {
		t.Errorf("second hit: %v, %q; want a denial with exit status %d", err, out, exitDenied)
	}
	if strings.Contains(out, "retry after  0s") {
		t.Errorf("a denial without a retry-after: %q", out)
	}

	for _, bad := range [][]string{
		{"--kind", "leaky"},
		{"--window", "1500us"},
		{"--cost", "0"},
	} {
		if _, err := runSluice(t, env, append(args, bad...)...); err == nil {
			t.Errorf("hit %v succeeded", bad)
		}
	}
	if _, err := runSluice(t, env, "hit", "--limit", "1", "--window", "1m"); err == nil || !strings.Contains(err.Error(), "partition") {
		t.Errorf("hit without a partition: %v", err)
	}
}

// sluice hit refuses a --timeout the client would replace: zero (its
// default), a negative one or one beyond its bounds (clamped), so the
// call never runs on a timeout other than the one given.
func TestHitRefusesATimeoutItWouldReplace(t *testing.T) {
	hs := newTestServer(t)
	env := map[string]string{"SLUICE_URL": hs.URL, "SLUICE_SECRET": testSecret, "SLUICE_PEPPER": testPepper}
	for i, timeout := range []string{"0", "-1s", "50ms", "5s"} {
		out, err := runSluice(t, env, "hit", "--partition", fmt.Sprint("timeout:", i), "--limit", "10", "--window", "1m", "--timeout", timeout)
		if err == nil || !strings.Contains(err.Error(), "--timeout") {
			t.Errorf("hit --timeout %s: %v, %q; want a refusal naming --timeout", timeout, err, out)
		}
	}
	for _, timeout := range []string{"100ms", "2s"} {
		if out, err := runSluice(t, env, "hit", "--partition", "timeout:ok", "--limit", "10", "--window", "1m", "--timeout", timeout); err != nil {
			t.Errorf("hit --timeout %s: %v, %q", timeout, err, out)
		}
	}
}

func TestPing(t *testing.T) {
	hs := newTestServer(t)
	out, err := runSluice(t, nil, "ping", "--url", hs.URL)
	if err != nil || !strings.Contains(out, "protocol  1") || !strings.Contains(out, "ready     yes") {
		t.Errorf("ping: %v, %q", err, out)
	}
}

// TestPepperCommand prints two peppers: each in the compact form, fresh,
// and accepted by a client, which then names keys by 22 characters.
func TestPepperCommand(t *testing.T) {
	var peppers []string
	for range 2 {
		out, err := runSluice(t, nil, "pepper")
		if err != nil {
			t.Fatal(err)
		}
		p, ok := strings.CutSuffix(out, "\n")
		if !ok || !strings.HasPrefix(p, client.CompactPrefix) || strings.ContainsAny(p, " \n") {
			t.Fatalf("sluice pepper printed %q, want one pepper in the compact form on a line", out)
		}
		cfg := client.DefaultConfig()
		cfg.URL, cfg.Secret, cfg.Pepper = "http://127.0.0.1:7420", testSecret, p
		if err := cfg.Validate(); err != nil {
			t.Fatalf("a client refuses the pepper: %v", err)
		}
		c := client.New(cfg)
		if name := c.Hash(client.PurposeKey, "user:42"); len(name) != 22 {
			t.Errorf("under %q a key is named %q, want 22 characters", p, name)
		}
		c.Close()
		peppers = append(peppers, p)
	}
	if peppers[0] == peppers[1] {
		t.Errorf("two peppers are equal: %q", peppers[0])
	}
}

func TestPingFailsLoudlyOnAProtocolMismatch(t *testing.T) {
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(wire.Ping{Protocol: wire.ProtocolVersion + 1, Version: "future"})
	}))
	defer hs.Close()
	out, err := runSluice(t, nil, "ping", "--url", hs.URL)
	if err == nil || !strings.Contains(err.Error(), "protocol mismatch") {
		t.Errorf("ping of a newer server: %v, %q", err, out)
	}
}

func TestPingReportsAnUnreadyServer(t *testing.T) {
	st, err := memstore.New(memstore.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	cfg := server.DefaultConfig()
	cfg.Secrets, cfg.OperatorToken = []string{"short"}, testToken
	hs := httptest.NewServer(server.New(engine.New(st), cfg))
	defer hs.Close()
	out, err := runSluice(t, nil, "ping", "--url", hs.URL)
	if err == nil || !strings.Contains(err.Error(), "guard_unavailable") || !strings.Contains(out, "ready     no") {
		t.Errorf("ping of a misconfigured server: %v, %q", err, out)
	}
}

func TestServeRefusesAConfigurationItCannotRun(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	_, err := runSluice(t, nil, "serve", "--data-dir", dir, "--fsync", "sometimes", "--addr", "127.0.0.1:0")
	if err == nil || !strings.Contains(err.Error(), "fsync") {
		t.Errorf("serve --fsync sometimes: %v", err)
	}
	_, err = runSluice(t, map[string]string{"SLUICE_LOG_LEVEL": "loud"}, "serve", "--data-dir", dir)
	if err == nil || !strings.Contains(err.Error(), "log level") {
		t.Errorf("SLUICE_LOG_LEVEL=loud: %v", err)
	}
	_, err = runSluice(t, map[string]string{"SLUICE_STATE_REFRESH": "1h"}, "serve", "--data-dir", dir)
	if err == nil || !strings.Contains(err.Error(), "state refresh 1h0m0s outside 0…1m0s") {
		t.Errorf("SLUICE_STATE_REFRESH=1h: %v", err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Error("a refused configuration created the data directory")
	}
}
