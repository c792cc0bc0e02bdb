package redisbench

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"testing"
	"time"
)

// startServer starts a redis-server for the test. Without one it skips
// loudly, or fails under CI=true.
func startServer(t *testing.T) *Server {
	t.Helper()
	srv, err := StartServer(t.Context())
	if errors.Is(err, ErrNoRedis) {
		if os.Getenv("CI") == "true" {
			t.Fatalf("redis-server is required under CI=true: %v", err)
		}
		t.Skipf("SKIPPED: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	return srv
}

// TestSmoke sends a few hundred calls through every configuration against
// one server and checks that each succeeded and admitted, and that the
// server's counters saw them. It asserts nothing about speed.
func TestSmoke(t *testing.T) {
	const calls = 300
	srv := startServer(t)
	for _, c := range Configs() {
		t.Run(c.Name, func(t *testing.T) {
			if c.External {
				if _, err := exec.LookPath("redis-benchmark"); err != nil {
					if os.Getenv("CI") == "true" {
						t.Fatalf("redis-benchmark is required under CI=true: %v", err)
					}
					t.Skipf("SKIPPED: redis-benchmark is not installed: %v", err)
				}
			}
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			r, err := Measure(ctx, srv, c, Options{Clients: 8, Calls: calls, Keys: 1000})
			if err != nil {
				t.Fatal(err)
			}
			if r.Errors != 0 || r.Calls != calls {
				t.Fatalf("%d calls succeeded and %d failed, want %d and 0; first error: %v", r.Calls, r.Errors, calls, r.FirstErr)
			}
			if r.Denied != 0 {
				t.Errorf("%d decisions denied, want every one admitted", r.Denied)
			}
			if r.ScriptCalls < calls || r.ScriptUsec <= 0 {
				t.Errorf("the server counted %d script calls (%.0f µs), want at least %d", r.ScriptCalls, r.ScriptUsec, calls)
			}
			if !c.External && (r.P50 <= 0 || r.P99 < r.P50) {
				t.Errorf("latency p50 %v p99 %v", r.P50, r.P99)
			}
		})
	}
}

func TestSelect(t *testing.T) {
	all, err := Select("")
	if err != nil || len(all) != len(Configs()) {
		t.Fatalf("Select(\"\") = %d configurations, %v", len(all), err)
	}
	got, err := Select(RedisRate + "," + Sluice1)
	if err != nil || len(got) != 2 || got[0].Name != Sluice1 || got[1].Name != RedisRate {
		t.Fatalf("Select = %v, %v; want the two in run order", got, err)
	}
	if _, err := Select("nope"); err == nil {
		t.Fatal("Select(nope) succeeded")
	}
}

func TestParseBenchmarkCSV(t *testing.T) {
	out := []byte("\"test\",\"rps\",\"avg_latency_ms\"\n\"EVALSHA abc\",\"45123.50\",\"1.2\"\n")
	if rps, err := parseBenchmarkCSV(out); err != nil || rps != 45123.5 {
		t.Errorf("rate %v, %v", rps, err)
	}
	if _, err := parseBenchmarkCSV([]byte("garbage")); err == nil {
		t.Error("garbage parsed")
	}
}
