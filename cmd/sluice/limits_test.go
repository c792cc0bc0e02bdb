package main

import (
	"bufio"
	"bytes"
	"context"
	"maps"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tailscale/hujson"

	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/server"
	"github.com/sluicehq/sluice/store/memstore"
	"github.com/sluicehq/sluice/wire"
)

var testLimitsKey = strings.Repeat("k", 40)

// newLimitsServer runs a server with the limiters endpoints on a memory
// store.
func newLimitsServer(t *testing.T) *httptest.Server {
	t.Helper()
	st, err := memstore.New(memstore.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	cfg := server.DefaultConfig()
	cfg.Secrets, cfg.OperatorToken, cfg.Pepper, cfg.LimitsKey = []string{testSecret}, testToken, testPepper, testLimitsKey
	hs := httptest.NewServer(server.New(engine.New(st), cfg))
	t.Cleanup(func() {
		hs.Close()
		st.Close()
	})
	return hs
}

// runLimits runs the command tree with args and env, standard input not a
// terminal, in dir.
func runLimits(t *testing.T, dir string, env map[string]string, args ...string) (string, error) {
	t.Helper()
	t.Chdir(dir)
	root := newRootCmd(mapEnv(env))
	var out bytes.Buffer
	root.SetIn(strings.NewReader(""))
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	err := root.ExecuteContext(context.Background())
	return out.String(), err
}

func serverLimiters(t *testing.T, hs *httptest.Server) limits {
	t.Helper()
	lc, err := client.NewLimiters(client.LimitersConfig{URL: hs.URL, Key: testToken})
	if err != nil {
		t.Fatal(err)
	}
	list, err := lc.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	l := limits{}
	for _, e := range list {
		l[e.Name] = e.Config
	}
	return l
}

func TestParseLimits(t *testing.T) {
	entry := func(body string) string { return "limiters:\n  api:\n" + body }
	for _, c := range []struct {
		name, file string
		format     limitsFormat
		want       wire.LimiterConfig
		err        []string // each must appear in the error
	}{
		{
			name: "defaults", file: entry("    limitPerWindow: 100\n    windowMs: 60000\n"),
			want: wire.LimiterConfig{LimitPerWindow: 100, WindowMs: 60000, LeaseTTLMs: 30000, RefillFraction: 0.5, MaxWaitMs: 300000, StartToleranceMs: 100},
		},
		{
			name: "every field", file: entry("    limitPerWindow: 1\n    windowMs: 2\n    concurrency: 3\n    leaseTtlMs: 1000\n    refillFraction: 1\n    maxWaitMs: 0\n    startToleranceMs: 0\n    retry: {attempts: 2, floorMs: 10, ceilingMs: 20, factor: 1.5}\n"),
			want: wire.LimiterConfig{LimitPerWindow: 1, WindowMs: 2, Concurrency: 3, LeaseTTLMs: 1000, RefillFraction: 1, Retry: wire.LimiterRetry{Attempts: 2, FloorMs: 10, CeilingMs: 20, Factor: 1.5}},
		},
		{name: "required", file: entry("    concurrency: 1\n"), err: []string{`limiter "api"`, "limitPerWindow is required", "windowMs is required"}},
		{name: "fraction", file: entry("    limitPerWindow: 1.5\n    windowMs: 1000\n"), err: []string{`limiter "api": limitPerWindow 1.5 is not a whole number`}},
		{name: "quoted number", file: entry("    limitPerWindow: \"5\"\n    windowMs: 1000\n"), err: []string{`limitPerWindow "5" is not a whole number`}},
		{name: "quoted fraction", file: entry("    limitPerWindow: 5\n    windowMs: 1000\n    refillFraction: \"0.5\"\n"), err: []string{`refillFraction "0.5" is not a number`}},
		{name: "out of bounds", file: entry("    limitPerWindow: 5000\n    windowMs: 1000\n    retry: {factor: 0.5}\n"), err: []string{`limiter "api"`, "limitPerWindow 5000 outside 1…4096", "retry.factor 0.5 outside"}},
		{name: "unknown field", file: entry("    limitPerWindow: 5\n    windowMs: 1000\n    burst: 3\n"), err: []string{`[5:5] unknown field "burst"`}},
		{name: "duplicate name", file: "limiters:\n  api: {limitPerWindow: 1, windowMs: 1}\n  api: {limitPerWindow: 2, windowMs: 1}\n", err: []string{`mapping key "api" already defined`}},
		{name: "number as a name", file: "limiters:\n  1.0: {limitPerWindow: 1, windowMs: 1}\n", err: []string{"limiter name 1 is read as a float64, not a name: quote it"}},
		{name: "bad name", file: "limiters:\n  \"a b\": {limitPerWindow: 1, windowMs: 1}\n", err: []string{`limiter "a b": limiter name "a b": only letters`}},
		{name: "no limiters", file: "limits: {}\n", err: []string{`unknown field "limits"`}},
		{name: "null limiters", file: "limiters:\n", err: []string{`no "limiters"`}},
		{
			name: "every entry's problems", file: "limiters:\n  b: {windowMs: 1}\n  a: {limitPerWindow: 1}\n",
			err: []string{`limiter "a": windowMs is required`, `limiter "b": limitPerWindow is required`},
		},
		{
			name: "jsonc", format: formatJSONC, file: "{\n  // comment\n  \"limiters\": {\"api\": {\"limitPerWindow\": 100, \"windowMs\": 60000, /* c */ \"maxWaitMs\": 0,},},\n}\n",
			want: wire.LimiterConfig{LimitPerWindow: 100, WindowMs: 60000, LeaseTTLMs: 30000, RefillFraction: 0.5, StartToleranceMs: 100},
		},
		{name: "jsonc fraction", format: formatJSONC, file: `{"limiters": {"api": {"limitPerWindow": 1e2, "windowMs": 1}}}`, err: []string{"limitPerWindow 100 is not a whole number"}},
		{name: "jsonc unknown field", format: formatJSONC, file: `{"limiters": {"api": {"limitPerWindow": 1, "windowMs": 1, "burst": 1}}}`, err: []string{`unknown field "burst"`}},
		{name: "jsonc duplicate name", format: formatJSONC, file: "{\"limiters\": {\n\"api\": {},\n\"api\": {}}}", err: []string{`line 3: "api" is named twice`}},
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
			if got := p.limits["api"]; len(p.limits) != 1 || got != c.want {
				t.Errorf("limits %+v, want api: %+v", p.limits, c.want)
			}
		})
	}
}

// TestSamplesAreCanonical checks that both samples are valid and already in
// the layout sluice writes, so that rewriting them changes nothing but what
// the server changed.
func TestSamplesAreCanonical(t *testing.T) {
	for _, c := range []struct {
		format limitsFormat
		sample string
	}{{formatYAML, sampleYAML}, {formatJSONC, sampleJSONC}} {
		p, err := parseLimits(c.format, []byte(c.sample))
		if err != nil {
			t.Fatalf("the sample does not read: %v", err)
		}
		if len(p.limits) != 2 || p.limits["billing-api"].Concurrency != 10 || p.limits["geocoder"].RefillFraction != 0.25 {
			t.Errorf("the sample reads as %+v", p.limits)
		}
		var again []byte
		if c.format == formatYAML {
			again, err = render(c.format, p, p.limits, p.routes) // not the shortcut for an unchanged file
		} else {
			again, err = hujson.Format([]byte(c.sample))
		}
		if err != nil {
			t.Fatal(err)
		}
		if string(again) != c.sample {
			t.Errorf("the sample is not in the canonical layout; rendered:\n%s", again)
		}
	}
}

// TestRenderKeepsComments rewrites commented files for a changed state: one
// field changed, one limiter gone, one new.
func TestRenderKeepsComments(t *testing.T) {
	for _, c := range []struct {
		format   limitsFormat
		file     string
		comments []string
		gone     string
	}{
		{formatYAML, sampleYAML, []string{"# Paced-call limits of this fleet", "# The billing API allows", "#   retry "}, "# The geocoder"},
		{formatJSONC, sampleJSONC, []string{"// Paced-call limits of this fleet", "// The billing API allows", "//   retry "}, "\"geocoder\""},
	} {
		old, err := parseLimits(c.format, []byte(c.file))
		if err != nil {
			t.Fatal(err)
		}
		state := maps.Clone(old.limits)
		delete(state, "geocoder")
		b := state["billing-api"]
		b.Concurrency = 3
		state["billing-api"] = b
		state["aaa-new"] = wire.LimiterConfig{LimitPerWindow: 7, WindowMs: 1000, RefillFraction: 1}
		out, err := renderLimits(c.format, old, state, old.routes)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range c.comments {
			if !strings.Contains(string(out), want) {
				t.Errorf("%q was lost:\n%s", want, out)
			}
		}
		if strings.Contains(string(out), c.gone) {
			t.Errorf("%q stayed:\n%s", c.gone, out)
		}
		back, err := parseLimits(c.format, out)
		if err != nil || !maps.Equal(back.limits, state) {
			t.Errorf("the rewritten file reads as %+v, %v; want %+v", back.limits, err, state)
		}
		// An unchanged state leaves the file as it is, byte for byte.
		if same, err := renderLimits(c.format, old, old.limits, old.routes); err != nil || string(same) != c.file {
			t.Errorf("an unchanged state rewrote the file: %v\n%s", err, same)
		}
	}
}

// Every name the server accepts is written so that it reads back as the
// same name, in a new file and in a rewritten one, in both formats:
// those YAML would read as a number, a boolean, null, a document marker or
// a sequence are quoted.
func TestRenderQuotesNamesYAMLWouldMisread(t *testing.T) {
	cfg := wire.LimiterConfig{LimitPerWindow: 1, WindowMs: 1000, LeaseTTLMs: 30000, RefillFraction: 0.5}
	state, rts := limits{}, routes{}
	for _, name := range []string{".inf", ".Inf", "-.inf", ".nan", ".NaN", "...", "---", "-", "1.0", "123", "true", "null", "0x10", "billing-api"} {
		if err := wire.ValidateLimiterName(name); err != nil {
			t.Fatal(err)
		}
		state[name] = cfg
		rts[name] = wire.PolicyConfig{Limit: 1, WindowMs: 1000, Kind: "fixed"}
	}
	for _, format := range []limitsFormat{formatYAML, formatJSONC} {
		old, err := parseLimits(format, []byte(map[limitsFormat]string{formatYAML: sampleYAML, formatJSONC: sampleJSONC}[format]))
		if err != nil {
			t.Fatal(err)
		}
		for _, old := range []*parsedLimits{nil, old} {
			out, err := renderLimits(format, old, state, rts)
			if err != nil {
				t.Errorf("format %d, rewriting %t: %v", format, old != nil, err)
				continue
			}
			back, err := parseLimits(format, out)
			if err != nil || !maps.Equal(back.limits, state) || !maps.Equal(back.routes, rts) {
				t.Errorf("format %d, rewriting %t: the file reads as %v, %v, %v", format, old != nil, back.limits, back.routes, err)
			}
		}
	}
}

func TestLimitsApplyAndStats(t *testing.T) {
	hs := newLimitsServer(t)
	dir := t.TempDir()
	env := map[string]string{"SLUICE_URL": hs.URL, "SLUICE_LIMITS_KEY": testLimitsKey}
	for _, file := range []string{"sluice-limits.yaml", "limits.jsonc"} {
		if _, err := runLimits(t, dir, env, "limits", "sample", "-f", file); err != nil {
			t.Fatal(err)
		}
		if _, err := runLimits(t, dir, env, "limits", "sample", "-f", file); err == nil || !strings.Contains(err.Error(), "pass --force") {
			t.Errorf("sample over an existing file: %v, want a refusal naming --force", err)
		}
	}
	sample, err := os.ReadFile(filepath.Join(dir, "sluice-limits.yaml"))
	if err != nil {
		t.Fatal(err)
	}

	// A bad entry: nothing is sent.
	bad := strings.Replace(string(sample), "limitPerWindow: 5\n", "limitPerWindow: 0\n", 1)
	if err := os.WriteFile(filepath.Join(dir, "bad.yaml"), []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := runLimits(t, dir, env, "limits", "apply", "-f", "bad.yaml"); err == nil || !strings.Contains(err.Error(), `nothing was applied: bad.yaml: limiter "geocoder": limitPerWindow 0 outside 1…4096`) {
		t.Errorf("apply of a bad file: %v", err)
	}
	if got := serverLimiters(t, hs); len(got) != 0 {
		t.Errorf("a bad file configured %v", got)
	}

	out, err := runLimits(t, dir, env, "limits", "apply", "--dry-run")
	if err != nil || !strings.Contains(out, "create   billing-api") || !strings.Contains(out, "2 to create or change") {
		t.Errorf("dry run: %v\n%s", err, out)
	}
	if got := serverLimiters(t, hs); len(got) != 0 {
		t.Errorf("a dry run configured %v", got)
	}
	out, err = runLimits(t, dir, env, "limits", "apply")
	if err != nil || !strings.Contains(out, "created  billing-api") || !strings.Contains(out, "created  geocoder") {
		t.Fatalf("apply: %v\n%s", err, out)
	}
	file, err := readLimitsFile(filepath.Join(dir, "sluice-limits.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if got := serverLimiters(t, hs); !maps.Equal(got, file.limits) {
		t.Errorf("the server holds %+v, want the file's %+v", got, file.limits)
	}
	// Again: nothing to do, so no waiting call is disturbed.
	if out, err = runLimits(t, dir, env, "limits", "apply"); err != nil || !strings.Contains(out, "0 created or changed, 2 unchanged") {
		t.Errorf("a second apply: %v\n%s", err, out)
	}

	// stats --save round-trips the file unchanged.
	out, err = runLimits(t, dir, env, "limits", "stats", "--save")
	if err != nil || !strings.Contains(out, "billing-api  100 per 1m0s  10") || !strings.Contains(out, "left as it is") {
		t.Errorf("stats --save: %v\n%s", err, out)
	}
	if now, _ := os.ReadFile(filepath.Join(dir, "sluice-limits.yaml")); !bytes.Equal(now, sample) {
		t.Errorf("stats --save changed the applied file:\n%s", now)
	}

	// A change on the server shows in apply and in --save.
	lc, err := client.NewLimiters(client.LimitersConfig{URL: hs.URL, Key: testLimitsKey})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lc.Reconfigure(context.Background(), "geocoder", map[string]any{"concurrency": 2}); err != nil {
		t.Fatal(err)
	}
	if _, err := lc.Configure(context.Background(), "other", file.limits["geocoder"]); err != nil {
		t.Fatal(err)
	}
	out, err = runLimits(t, dir, env, "limits", "apply", "--dry-run")
	if err != nil || !strings.Contains(out, "change (concurrency 2→0) geocoder") || !strings.Contains(out, "kept as they are: other") {
		t.Errorf("dry run after a change: %v\n%s", err, out)
	}
	if _, err = runLimits(t, dir, env, "limits", "stats", "--save", "-f", "limits.jsonc"); err != nil {
		t.Fatal(err)
	}
	saved, err := readLimitsFile(filepath.Join(dir, "limits.jsonc"))
	if err != nil || !maps.Equal(saved.limits, serverLimiters(t, hs)) || !strings.Contains(string(saved.raw), "// The billing API allows") {
		t.Errorf("stats --save of a JSONC file: %v\n%s", err, saved.raw)
	}
}

// TestLimitsWithoutATerminal checks that a setting left out fails at once,
// naming the flags and variables that would have given it.
func TestLimitsWithoutATerminal(t *testing.T) {
	hs := newLimitsServer(t)
	dir := t.TempDir()
	if _, err := runLimits(t, dir, nil, "limits", "sample"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		env  map[string]string
		want []string
	}{
		{"nothing", nil, []string{"standard input is not a terminal", "--url", "$SLUICE_URL", "--limits-key", "$SLUICE_LIMITS_KEY", "--operator-token"}},
		{"no key", map[string]string{"SLUICE_URL": hs.URL}, []string{"--limits-key", "$SLUICE_LIMITS_KEY"}},
		{"no url", map[string]string{"SLUICE_LIMITS_KEY": testLimitsKey}, []string{"--url", "$SLUICE_URL"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, cmd := range []string{"apply", "stats"} {
				_, err := runLimits(t, dir, c.env, "limits", cmd)
				if err == nil {
					t.Fatalf("%s succeeded", cmd)
				}
				for _, want := range c.want {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("%s: %q does not name %q", cmd, err, want)
					}
				}
			}
		})
	}
	if got := serverLimiters(t, hs); len(got) != 0 {
		t.Errorf("a failed run configured %v", got)
	}
	// With both from the environment, it runs.
	env := map[string]string{"SLUICE_URL": hs.URL, "SLUICE_OPERATOR_TOKEN": testToken}
	if _, err := runLimits(t, dir, env, "limits", "apply"); err != nil {
		t.Fatal(err)
	}
}

// TestLimitsAskOnATerminal answers the questions a terminal is asked.
func TestLimitsAskOnATerminal(t *testing.T) {
	hs := newLimitsServer(t)
	var prompts bytes.Buffer
	con := &console{in: bufio.NewReader(strings.NewReader(hs.URL + "\n" + testLimitsKey + "\n")), out: &prompts, ask: true}
	o := &limitsRemote{remote: remote{DataDir: t.TempDir(), Timeout: client.DefaultLimitersTimeout}}
	var out bytes.Buffer
	if err := runLimitsStats(context.Background(), o, con, false, &out); err != nil {
		t.Fatal(err)
	}
	if p := prompts.String(); !strings.Contains(p, "Server URL [http://127.0.0.1:7420]: ") || !strings.Contains(p, "Limits key or operator token: ") {
		t.Errorf("prompts %q", p)
	}
	if !strings.Contains(out.String(), "no limiters configured") {
		t.Errorf("stats: %q", out.String())
	}
}
