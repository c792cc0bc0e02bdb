package rpcbench

import (
	"bytes"
	"context"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestSmoke sends a few hundred calls through every configuration and
// checks that each succeeded with every decision present. It asserts
// nothing about speed: it keeps the harness compiling and its systems
// starting.
func TestSmoke(t *testing.T) {
	const calls = 300
	for _, c := range Configs() {
		t.Run(c.Name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			r, err := Measure(ctx, c, Options{Clients: 8, Calls: calls, Keys: 1000, Dir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			if r.Errors != 0 || r.Calls != calls {
				t.Fatalf("%d calls succeeded and %d failed, want %d and 0; first error: %v", r.Calls, r.Errors, calls, r.FirstErr)
			}
			if r.Denied != 0 {
				t.Errorf("%d of %d decisions denied, want every hit admitted", r.Denied, calls*c.PerCall)
			}
			if r.P50 <= 0 || r.P99 < r.P50 {
				t.Errorf("latency p50 %v p99 %v", r.P50, r.P99)
			}
		})
	}
}

// TestHexNames checks that Options.HexNames reaches Sluice's client: the
// same calls log longer names (64 hex digits rather than 22 characters),
// and so more bytes per decision, under a pepper of the hex form.
func TestHexNames(t *testing.T) {
	cfgs, err := Select("sluice-32")
	if err != nil {
		t.Fatal(err)
	}
	perDecision := map[bool]float64{}
	for _, hex := range []bool{false, true} {
		r, err := Measure(t.Context(), cfgs[0], Options{Clients: 4, Calls: 200, Keys: 1000, Dir: t.TempDir(), HexNames: hex})
		if err != nil || r.Errors != 0 {
			t.Fatalf("hex names %v: %v, %d errors (first %v)", hex, err, r.Errors, r.FirstErr)
		}
		perDecision[hex] = r.WALBytesPerDecision()
	}
	t.Logf("log bytes per decision: %.1f with hex names, %.1f without", perDecision[true], perDecision[false])
	// Every hit logs at least its key's name, 42 bytes longer in hex.
	if perDecision[true] < perDecision[false]+30 {
		t.Errorf("log bytes per decision: %.1f with hex names, %.1f without; want at least 30 more with", perDecision[true], perDecision[false])
	}
}

// TestSwitchesCounted checks that a measurement counts the process's
// context switches: calls of a durable store wait for its log's fsyncs,
// so its threads block, and every block is a switch.
func TestSwitchesCounted(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skipf("context switches are counted on Linux; this is %s", runtime.GOOS)
	}
	cfgs, err := Select("sluice-1")
	if err != nil {
		t.Fatal(err)
	}
	r, err := Measure(t.Context(), cfgs[0], Options{Clients: 4, Calls: 200, Keys: 1000, Dir: t.TempDir()})
	if err != nil || r.Errors != 0 {
		t.Fatalf("%v, %d errors (first %v)", err, r.Errors, r.FirstErr)
	}
	if r.Switches == 0 || r.SwitchesPerCall() != float64(r.Switches)/float64(r.Calls) {
		t.Fatalf("%d context switches over %d calls (%.2f a call, %d fsyncs), want some", r.Switches, r.Calls, r.SwitchesPerCall(), r.WALSyncs)
	}
	t.Logf("%d context switches over %d calls and %d fsyncs", r.Switches, r.Calls, r.WALSyncs)
}

// TestSelect checks configuration selection by name and by group.
func TestSelect(t *testing.T) {
	all, err := Select("")
	if err != nil || len(all) != len(Configs())-9 {
		t.Fatalf("Select(\"\") = %d configurations, %v; want all but the 9 of the admission group", len(all), err)
	}
	for _, c := range all {
		if c.Group != "" {
			t.Errorf("Select(\"\") chose %s of group %s", c.Name, c.Group)
		}
	}
	adm, err := Select(Admission + "," + HTTPFloor)
	if err != nil || len(adm) != 10 || adm[0].Name != HTTPFloor || adm[1].Name != AdmOff || adm[9].Name != AdmMemFair {
		t.Fatalf("Select(admission, http-floor) = %v, %v; want the floor and the group, in run order", adm, err)
	}
	got, err := Select(Sluice32 + ", " + HTTPFloor)
	if err != nil || len(got) != 2 || got[0].Name != HTTPFloor || got[1].Name != Sluice32 {
		t.Fatalf("Select = %v, %v; want the two in run order", got, err)
	}
	if _, err := Select("nope"); err == nil {
		t.Fatal("Select(nope) succeeded")
	}
}

// TestReport checks that the tables name every measured configuration and
// judge every aim whose two sides were measured.
func TestReport(t *testing.T) {
	s := &Summary{Configs: Configs()}
	for round := range 3 {
		for _, c := range Configs() {
			calls := uint64(1000 * (round + 1))
			s.Add(round, Result{Config: c.Name, PerCall: c.PerCall, Calls: calls, Elapsed: time.Second, CPU: time.Second, P50: time.Millisecond, P99: 2 * time.Millisecond})
		}
	}
	var b strings.Builder
	s.WriteTable(&b)
	s.WriteAims(&b)
	out := b.String()
	for _, c := range Configs() {
		if !strings.Contains(out, "| "+c.Name+" |") {
			t.Errorf("table lacks %s:\n%s", c.Name, out)
		}
	}
	for _, a := range Aims {
		if !strings.Contains(out, a.Text) {
			t.Errorf("aims lack %q:\n%s", a.Text, out)
		}
	}
	if got, ok := s.Median(Sluice32, Decisions); !ok || got != 64_000 {
		t.Errorf("median sluice-32 decisions/s = %v, %v; want 64000", got, ok)
	}
	// Each round ran 1,000 × (round + 1) calls on one CPU-second.
	if got, ok := s.Median(Sluice32, DecisionsPerCPU); !ok || got != 64_000 {
		t.Errorf("median sluice-32 decisions per CPU-second = %v, %v; want 64000", got, ok)
	}
}

// countingSystem is a system under test whose every call is one write-ahead
// log fsync. Its first reading of the fsync count waits, up to a bound, for
// a call to be made: a reading the callers overtake.
type countingSystem struct {
	calls atomic.Uint64
	first sync.Once
}

func (c *countingSystem) call(context.Context, *caller) (int, error) {
	c.calls.Add(1)
	return 0, nil
}

func (c *countingSystem) walCounts() walCounts {
	c.first.Do(func() {
		for deadline := time.Now().Add(200 * time.Millisecond); c.calls.Load() == 0 && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
	})
	return walCounts{syncs: c.calls.Load()}
}

func (c *countingSystem) close() error { return nil }

// TestCountedWindow checks that a counted measurement reads the process's
// counters (CPU time, fsyncs) over the same calls it counts: from before
// the first call starts to after the last one ends.
func TestCountedWindow(t *testing.T) {
	const calls = 1000
	cfg := Config{Name: "counting", PerCall: 1, start: func(context.Context, Options) (instance, error) { return &countingSystem{}, nil }}
	r, err := Measure(t.Context(), cfg, Options{Clients: 4, Calls: calls})
	if err != nil {
		t.Fatal(err)
	}
	if r.Calls != calls || r.WALSyncs != calls {
		t.Fatalf("%d calls counted over %d fsyncs, want %d over %d", r.Calls, r.WALSyncs, calls, calls)
	}
}

// TestAllocationProfiles checks that a timed measurement with AllocsBase
// and Allocs set writes an allocation profile (gzipped protocol buffers)
// to each.
func TestAllocationProfiles(t *testing.T) {
	cfg := Config{Name: "counting", PerCall: 1, start: func(context.Context, Options) (instance, error) { return &countingSystem{}, nil }}
	var base, end bytes.Buffer
	if _, err := Measure(t.Context(), cfg, Options{Clients: 2, Warmup: time.Millisecond, Duration: 10 * time.Millisecond, AllocsBase: &base, Allocs: &end}); err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"base": base.Bytes(), "end": end.Bytes()} {
		if len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
			t.Errorf("%s profile: %d bytes, not gzipped", name, len(b))
		}
	}
}

// TestSluiceProcs checks that Options.SluiceProcs sets GOMAXPROCS for
// Sluice's configurations alone, from their start to the end of their
// measurement, and gives the process's back after; and that exactly
// Sluice's configurations are marked as such.
func TestSluiceProcs(t *testing.T) {
	procs := runtime.GOMAXPROCS(0)
	want := procs + 1
	for _, sluice := range []bool{true, false} {
		var atStart int
		cfg := Config{Name: "counting", PerCall: 1, sluice: sluice, start: func(context.Context, Options) (instance, error) {
			atStart = runtime.GOMAXPROCS(0)
			return &countingSystem{}, nil
		}}
		r, err := Measure(t.Context(), cfg, Options{Clients: 2, Calls: 10, SluiceProcs: want})
		if err != nil {
			t.Fatal(err)
		}
		expect := procs
		if sluice {
			expect = want
		}
		if atStart != expect || r.Procs != expect {
			t.Errorf("sluice %v: GOMAXPROCS %d at the start and %d at the end of the measurement, want %d", sluice, atStart, r.Procs, expect)
		}
		if got := runtime.GOMAXPROCS(0); got != procs {
			t.Fatalf("GOMAXPROCS %d after the measurement, want the process's %d back", got, procs)
		}
	}
	for _, c := range Configs() {
		if own := strings.HasPrefix(c.Name, "sluice-") || strings.HasPrefix(c.Name, "adm-"); c.sluice != own {
			t.Errorf("%s: marked as Sluice's %v, want %v", c.Name, c.sluice, own)
		}
	}
}
