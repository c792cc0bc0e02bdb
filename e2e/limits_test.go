package e2e

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/pace"
)

// runCLIEnv runs sluice in dir with env added to a clean environment and
// standard input not a terminal.
func runCLIEnv(t *testing.T, dir string, env []string, args ...string) (stdout, stderr string, status int) {
	t.Helper()
	cmd := exec.Command(sluiceBin, args...)
	cmd.Dir = dir
	cmd.Env = append(cleanEnv(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil && cmd.ProcessState == nil {
		t.Fatalf("running sluice %s: %v", strings.Join(args, " "), err)
	}
	return out.String(), errb.String(), cmd.ProcessState.ExitCode()
}

// firstLine returns the first line of a credential file of s.
func firstLine(t *testing.T, s *server, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(s.DataDir(), name))
	if err != nil {
		t.Fatal(err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	return strings.TrimSpace(line)
}

// TestLimitsFileRoundTrip applies a commented limits file to a real server
// with the limits key from the environment, reads it back with
// stats --save, and finds the file unchanged; then a worker process's
// pace.Registry over the client package finds the limiters and calls
// through one, and an httplimit stage over the client enforces the file's
// route policy.
func TestLimitsFileRoundTrip(t *testing.T) {
	t.Parallel()
	limitsKey := strings.Repeat("L", 48)
	s := startServer(t, serverOptions{Env: []string{"SLUICE_LIMITS_KEY=" + limitsKey}})
	dir := t.TempDir() // beside no data directory: every setting comes from the environment
	env := []string{"SLUICE_URL=" + s.URL, "SLUICE_LIMITS_KEY=" + limitsKey}

	for _, file := range []string{"limits.yaml", "limits.jsonc"} {
		t.Run(file, func(t *testing.T) {
			if _, errOut, status := runCLIEnv(t, dir, env, "limits", "sample", "-f", file); status != 0 {
				t.Fatalf("sample: status %d: %s", status, errOut)
			}
			written, err := os.ReadFile(filepath.Join(dir, file))
			if err != nil {
				t.Fatal(err)
			}
			out, errOut, status := runCLIEnv(t, dir, env, "limits", "apply", "-f", file)
			if status != 0 || !strings.Contains(out, "2 limiter(s) in "+file) || !strings.Contains(out, "1 route policy(ies) in "+file) {
				t.Fatalf("apply: status %d: %s%s", status, out, errOut)
			}
			out, errOut, status = runCLIEnv(t, dir, env, "limits", "stats", "--save", "-f", file)
			if status != 0 || !strings.Contains(out, "billing-api") || !strings.Contains(out, "geocoder") || !strings.Contains(out, "login") {
				t.Fatalf("stats --save: status %d: %s%s", status, out, errOut)
			}
			read, err := os.ReadFile(filepath.Join(dir, file))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(read, written) {
				t.Errorf("apply then stats --save changed %s:\n--- applied\n%s\n--- saved\n%s", file, written, read)
			}
		})
	}

	// A worker hashing with the server's pepper sees what was applied.
	c := client.New(client.Config{URL: s.URL, Secret: firstLine(t, s, "secret"), Pepper: firstLine(t, s, "pepper")})
	defer c.Close()
	reg := pace.NewRegistry(c)
	ctx := context.Background()
	names, err := reg.List(ctx)
	if err != nil || strings.Join(names, ",") != "billing-api,geocoder" {
		t.Fatalf("the worker lists %v, %v", names, err)
	}
	st, err := reg.Stats(ctx, "billing-api")
	if err != nil || st.Config.Limit != 100 || st.Config.Concurrency != 10 {
		t.Fatalf("the worker's stats: %+v, %v", st, err)
	}
	got, err := pace.Call(ctx, pace.Define("geocoder").Bind(reg), func(context.Context) (string, error) { return "ran", nil })
	if err != nil || got != "ran" {
		t.Errorf("a call through the applied limiter: %q, %v", got, err)
	}
	if _, err := pace.Call(ctx, pace.Define("geocodr").Bind(reg), func(context.Context) (string, error) { return "ran", nil }); !errors.Is(err, pace.ErrNoSuchLimiter) {
		t.Errorf("a call through a mistyped name: %v, want ErrNoSuchLimiter", err)
	}
	// A service's stage over the client enforces the applied route policy:
	// 10 requests a minute per client.
	pols, err := httplimit.NewPolicies(httplimit.PoliciesConfig{Store: c})
	if err != nil {
		t.Fatal(err)
	}
	login, err := pols.Policy("login")
	if err != nil {
		t.Fatal(err)
	}
	cfg := httplimit.DefaultConfig()
	cfg.Routes, cfg.Prefix, cfg.Store, cfg.Policy = []string{"/login"}, "e2e", c, login
	lim, err := httplimit.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	stage := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) }))
	var codes []int
	for range 11 {
		req := httptest.NewRequest(http.MethodPost, "/login", nil)
		req.RemoteAddr = "203.0.113.9:1"
		rec := httptest.NewRecorder()
		stage.ServeHTTP(rec, req)
		codes = append(codes, rec.Code)
	}
	if want := append(slices.Repeat([]int{200}, 10), 429); !slices.Equal(codes, want) {
		t.Errorf("the stage of the applied route policy answered %v, want %v", codes, want)
	}

	// A call's grant shows in the server's stats. The call goes through
	// billing-api, whose window is a minute: geocoder's second would pass
	// before the stats are read on a loaded machine.
	if _, err := pace.Call(ctx, pace.Define("billing-api").Bind(reg), func(context.Context) (string, error) { return "ran", nil }); err != nil {
		t.Fatalf("a call through billing-api: %v", err)
	}
	out, errOut, status := runCLIEnv(t, dir, env, "limits", "stats", "-f", "limits.yaml")
	if status != 0 || !strings.Contains(out, "billing-api  100 per 1m0s  10           99") {
		t.Errorf("stats after one call: status %d:\n%s%s", status, out, errOut)
	}
}

// TestLimitsWithoutATerminalFailAtOnce runs the limits commands with no
// terminal and no URL: they fail with the flag and variable to set.
func TestLimitsWithoutATerminalFailAtOnce(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if _, errOut, status := runCLIEnv(t, dir, nil, "limits", "sample"); status != 0 {
		t.Fatalf("sample: status %d: %s", status, errOut)
	}
	for _, args := range [][]string{{"limits", "apply"}, {"limits", "stats", "--save"}} {
		_, errOut, status := runCLIEnv(t, dir, []string{"SLUICE_LIMITS_KEY=" + strings.Repeat("L", 48)}, args...)
		if status != 1 || !strings.Contains(errOut, "standard input is not a terminal") ||
			!strings.Contains(errOut, "--url") || !strings.Contains(errOut, "$SLUICE_URL") {
			t.Errorf("%s: status %d, %q; want 1 naming --url and $SLUICE_URL", strings.Join(args, " "), status, errOut)
		}
	}
}
