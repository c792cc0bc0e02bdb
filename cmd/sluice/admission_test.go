package main

import (
	"errors"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/server"
	"github.com/sluicehq/sluice/store/memstore"
)

func TestAdmissionFlags(t *testing.T) {
	def := defaultAdmissionFlags().config()
	if err := def.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	if def.Total != admission.DefaultTotal || def.Chunk != admission.DefaultChunk || def.QuotaChunk != admission.DefaultQuotaChunk || def.Families != nil || def.Fair != nil {
		t.Fatalf("defaults: %+v", def)
	}

	good := admissionFlags{
		DailyBudget:   "1000000",
		Families:      "offline, replay,proxy,password",
		FamilyBudgets: "offline=600000,replay=100000",
		FairFamilies:  "replay,password",
		Shares:        "source=20,principal=20,v4/24=5,v6/56=10,v6/48=5",
		FamilyShares:  "replay.source=10,replay.principal=40",
		Chunk:         "500",
		QuotaChunk:    "0",
	}
	cfg := good.config()
	got, err := cfg.Allowances()
	if err != nil {
		t.Fatal(err)
	}
	if got["offline"] != 600000 || got["replay"] != 100000 || got["proxy"] != 150000 || got["password"] != 150000 {
		t.Errorf("allowances %v", got)
	}
	if cfg.Chunk != 500 || cfg.QuotaChunk != 0 || strings.Join(cfg.Fair, ",") != "replay,password" || cfg.Shares.V6Slash56 != 10 || cfg.FamilyShares["replay"].Principal != 40 {
		t.Errorf("config %+v", cfg)
	}

	for _, tc := range []struct {
		name   string
		modify func(*admissionFlags)
		want   string
	}{
		{"budget not a number", func(a *admissionFlags) { a.DailyBudget = "lots" }, `daily budget (--daily-budget) "lots"`},
		{"budget with separators", func(a *admissionFlags) { a.DailyBudget = "1,000,000" }, "daily budget"},
		{"budget empty", func(a *admissionFlags) { a.DailyBudget = "" }, "daily budget"},
		{"budget zero", func(a *admissionFlags) { a.DailyBudget = "0" }, "daily budget"},
		{"budget negative", func(a *admissionFlags) { a.DailyBudget = "-5" }, "daily budget"},
		{"chunk not a number", func(a *admissionFlags) { a.Chunk = "big" }, "admission chunk"},
		{"quota chunk negative", func(a *admissionFlags) { a.QuotaChunk = "-1" }, `quota chunk (--quota-chunk) "-1" is not a whole number of at least 0`},
		{"unknown family in a budget", func(a *admissionFlags) { a.FamilyBudgets = "ofline=5" }, `unknown family "ofline"`},
		{"two budgets for one family", func(a *admissionFlags) { a.FamilyBudgets = "replay=5,replay=6" }, "two budgets"},
		{"malformed family budget", func(a *admissionFlags) { a.FamilyBudgets = "replay=many" }, "not a non-negative integer"},
		{"family budget without a count", func(a *admissionFlags) { a.FamilyBudgets = "replay" }, "want name=count"},
		{"parts above the total", func(a *admissionFlags) { a.FamilyBudgets = "offline=900000,replay=200000" }, "above the daily total"},
		{"parts whose sum overflows", func(a *admissionFlags) { a.FamilyBudgets = "offline=9223372036854775807,replay=1" }, "above the daily total"},
		{"duplicate family", func(a *admissionFlags) { a.Families = "replay,offline,replay" }, `family "replay" listed twice`},
		{"empty family", func(a *admissionFlags) { a.Families = "replay,,offline" }, "family name"},
		{"wrong-case family", func(a *admissionFlags) { a.FairFamilies = "Replay" }, `fair family "Replay" is not a configured family`},
		{"duplicate fair family", func(a *admissionFlags) { a.FairFamilies = "replay,replay" }, "listed twice"},
		{"bad share", func(a *admissionFlags) { a.Shares = "source=0" }, "--shares"},
		{"unknown share axis", func(a *admissionFlags) { a.Shares = "ip=20" }, "unknown share axis"},
		{"bad family share", func(a *admissionFlags) { a.FamilyShares = "replay.source=x" }, "--family-shares"},
		{"family share of an unknown family", func(a *admissionFlags) { a.FamilyShares = "web.source=10" }, `shares for unknown family "web"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := good
			tc.modify(&a)
			err := a.config().Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one about %q", err, tc.want)
			}
		})
	}
}

// newAdmissionServer runs a server with admission on a memory store.
func newAdmissionServer(t *testing.T, flags admissionFlags) *httptest.Server {
	t.Helper()
	st, err := memstore.New(memstore.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	eng := engine.New(st)
	cfg := server.DefaultConfig()
	cfg.Secrets, cfg.OperatorToken = []string{testSecret}, testToken
	cfg.Admission = admission.New(eng, flags.config())
	hs := httptest.NewServer(server.New(eng, cfg))
	t.Cleanup(func() {
		hs.Close()
		st.Close()
	})
	return hs
}

func TestControlFamilyStopAndState(t *testing.T) {
	flags := defaultAdmissionFlags()
	flags.DailyBudget, flags.Families = "1000", "a,b"
	hs := newAdmissionServer(t, flags)
	env := map[string]string{"SLUICE_URL": hs.URL, "SLUICE_OPERATOR_TOKEN": testToken, "SLUICE_SECRET": testSecret, "SLUICE_PEPPER": testPepper}

	out, err := runSluice(t, env, "control", "stop", "--family", "a", "--reason", "maintenance")
	if err != nil || !strings.HasPrefix(out, "running\n") {
		t.Fatalf("stop --family a: %v, %q", err, out)
	}
	for _, want := range []string{"FAMILY", "a  ", "stopped by the operator until resumed: maintenance", "500"} {
		if !strings.Contains(out, want) {
			t.Errorf("stop output lacks %q:\n%s", want, out)
		}
	}
	hit := []string{"hit", "--partition", "p", "--limit", "10", "--window", "1h"}
	if out, err := runSluice(t, env, append(hit, "--family", "a")...); err == nil || !strings.Contains(out, "guard_stopped") {
		t.Errorf("hit of the stopped family: %v, %q", err, out)
	}
	if out, err := runSluice(t, env, append(hit, "--family", "b")...); err != nil {
		t.Errorf("hit of the other family: %v, %q", err, out)
	}
	out, err = runSluice(t, env, "control", "state")
	if err != nil || !strings.Contains(out, "maintenance") || strings.Count(out, "running") != 2 {
		t.Errorf("state: %v\n%s", err, out)
	}
	out, err = runSluice(t, env, "control", "resume", "--family", "a", "--reason", "done")
	if err != nil || strings.Contains(out, "stopped") {
		t.Errorf("resume --family a: %v\n%s", err, out)
	}
	if out, err := runSluice(t, env, append(hit, "--family", "a")...); err != nil {
		t.Errorf("hit after the resume: %v, %q", err, out)
	}
	if _, err := runSluice(t, env, "control", "stop", "--family", "nope"); err == nil || !strings.Contains(err.Error(), `unknown family "nope"`) {
		t.Errorf("stop of an unknown family: %v", err)
	}
}

// A hit refused by admission exits 2, as a denied one does, however many
// hits are asked for, and says which refusal it met; a request the server
// finds invalid is a failure, exit status 1.
func TestHitRefusedExitsAsDenied(t *testing.T) {
	flags := defaultAdmissionFlags()
	flags.DailyBudget, flags.Families = "1000", "a,b"
	hs := newAdmissionServer(t, flags)
	env := map[string]string{"SLUICE_URL": hs.URL, "SLUICE_OPERATOR_TOKEN": testToken, "SLUICE_SECRET": testSecret, "SLUICE_PEPPER": testPepper}
	if out, err := runSluice(t, env, "control", "stop", "--family", "a", "--reason", "maintenance"); err != nil {
		t.Fatalf("stop --family a: %v, %q", err, out)
	}
	hit := []string{"hit", "--partition", "p", "--limit", "10", "--window", "1h", "--family", "a"}
	for _, count := range []string{"1", "2"} {
		out, err := runSluice(t, env, append(hit, "--count", count)...)
		var exit exitError
		if !errors.As(err, &exit) || exit.code != exitDenied || !strings.Contains(out, "guard_stopped") {
			t.Errorf("hit --count %s of the stopped family: %v, %q; want exit status %d naming guard_stopped", count, err, out, exitDenied)
		}
	}
	out, err := runSluice(t, env, "hit", "--partition", "p", "--limit", "10", "--window", "1h", "--family", "nope")
	var exit exitError
	if err == nil || errors.As(err, &exit) || !strings.Contains(err.Error(), `unknown family "nope"`) {
		t.Errorf("hit of an unknown family: %v, %q; want a failure naming the family", err, out)
	}
}

// A failure ends sluice hit --count at once: the output counts the hits
// made, the failed one among them, not the hits asked for.
func TestHitCountStopsAtAFailure(t *testing.T) {
	hs := newAdmissionServer(t, defaultAdmissionFlags())
	env := map[string]string{"SLUICE_URL": hs.URL, "SLUICE_SECRET": testSecret, "SLUICE_PEPPER": testPepper}
	out, err := runSluice(t, env, "hit", "--partition", "p", "--limit", "10", "--window", "1h", "--family", "nope", "--count", "3")
	if err == nil || !strings.Contains(err.Error(), `unknown family "nope"`) {
		t.Errorf("hit --count 3 of an unknown family: %v; want a failure naming the family", err)
	}
	for _, want := range []string{"hits         1 of 3\n", "admitted     0\n", "failed       1\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// An empty --family (an unset shell variable, say) is refused: it never
// becomes the global stop or resume that leaving the flag out asks for.
func TestControlRefusesAnEmptyFamily(t *testing.T) {
	flags := defaultAdmissionFlags()
	flags.DailyBudget, flags.Families = "1000", "a,b"
	hs := newAdmissionServer(t, flags)
	env := map[string]string{"SLUICE_URL": hs.URL, "SLUICE_OPERATOR_TOKEN": testToken}
	for _, args := range [][]string{
		{"control", "stop", "--family", "", "--reason", "one family"},
		{"control", "stop", "--family", " "},
		{"control", "resume", "--family", ""},
	} {
		if out, err := runSluice(t, env, args...); err == nil || !strings.Contains(err.Error(), "--family") {
			t.Errorf("%q: %v, %q; want a refusal naming --family", args, err, out)
		}
	}
	if out, err := runSluice(t, env, "control", "state"); err != nil || !strings.HasPrefix(out, "running\n") || strings.Contains(out, "stopped") {
		t.Errorf("state after the refusals: %v\n%s", err, out)
	}
}

// TestHitCountAndFairnessReset spends one source's share with sluice hit,
// resets it with sluice control fairness-reset, and spends it again: the
// command-line tools hash identities alike.
func TestHitCountAndFairnessReset(t *testing.T) {
	flags := defaultAdmissionFlags()
	flags.DailyBudget, flags.FairFamilies = "2000", admission.DefaultFamily // a source may spend 100
	hs := newAdmissionServer(t, flags)
	env := map[string]string{"SLUICE_URL": hs.URL, "SLUICE_OPERATOR_TOKEN": testToken, "SLUICE_SECRET": testSecret, "SLUICE_PEPPER": testPepper}
	hit := []string{"hit", "--partition", "p", "--limit", "1000", "--window", "1h", "--source", "2001:db8:1:2::7", "--principal", "user:1"}

	out, err := runSluice(t, env, append(hit, "--count", "120")...)
	var exit exitError
	if !errors.As(err, &exit) || exit.code != exitDenied {
		t.Errorf("120 hits: %v, want exit status %d", err, exitDenied)
	}
	for _, want := range []string{"hits         120", "admitted     100", "allowed      100", "refused      20 (first: guard_limited)"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}

	// Resetting the source alone leaves the principal spent.
	reset := []string{"control", "fairness-reset", "--family", admission.DefaultFamily, "--actor", "tester", "--reason", "drill"}
	out, err = runSluice(t, env, append(reset, "--source", "2001:DB8:1:2::1")...)
	if err != nil || !strings.Contains(out, "by           tester") || !strings.Contains(out, "2001:db8:1:2::/64") || !strings.Contains(out, "2001:db8:1::/48") {
		t.Fatalf("reset of the source: %v\n%s", err, out)
	}
	if out, _ := runSluice(t, env, append(hit, "--count", "2")...); !strings.Contains(out, "admitted     0") {
		t.Errorf("after the source reset the spent principal was admitted:\n%s", out)
	}
	if _, err := runSluice(t, env, append(reset, "--principal", "user:1")...); err != nil {
		t.Fatal(err)
	}
	out, err = runSluice(t, env, append(hit, "--count", "10")...)
	if err != nil || !strings.Contains(out, "admitted     10") {
		t.Errorf("after both resets: %v\n%s", err, out)
	}

	// Both resets are in the audit trail, newest first.
	out, err = runSluice(t, env, "control", "audit")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if err != nil || len(lines) != 3 || !strings.HasPrefix(lines[0], "SEQ ") ||
		!strings.HasPrefix(lines[1], "2 ") || !strings.Contains(lines[1], "principal") || strings.Contains(lines[1], "source") ||
		!strings.HasPrefix(lines[2], "1 ") || !strings.Contains(lines[2], "source (v6/48, v6/56)") || !strings.Contains(lines[2], "tester from ") || !strings.Contains(lines[2], "drill") {
		t.Errorf("audit: %v\n%s", err, out)
	}
	out, err = runSluice(t, env, "control", "audit", "--limit", "1")
	if err != nil || !strings.Contains(out, "\n2 ") || strings.Contains(out, "\n1 ") || !strings.HasSuffix(out, "older: sluice control audit --before 2\n") {
		t.Errorf("audit --limit 1: %v\n%s", err, out)
	}
	out, err = runSluice(t, env, "control", "audit", "--limit", "1", "--before", "2")
	if err != nil || !strings.Contains(out, "\n1 ") || strings.Contains(out, "older") {
		t.Errorf("audit --before 2: %v\n%s", err, out)
	}
	if _, err := runSluice(t, env, "control", "audit", "--limit", "5000"); err == nil || !strings.Contains(err.Error(), "limit 5000 above 1000") {
		t.Errorf("audit --limit 5000: %v", err)
	}
	// A zero given is sent and refused, never read as "not given".
	for _, bad := range [][]string{{"--limit", "0"}, {"--before", "0"}, {"--limit", "-1"}} {
		if out, err := runSluice(t, env, append([]string{"control", "audit"}, bad...)...); err == nil || !strings.Contains(err.Error(), "at least 1") {
			t.Errorf("audit %q: %v\n%s", bad, err, out)
		}
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"control", "fairness-reset", "--family", "default", "--actor", "x"}, "--source, a --principal"},
		{[]string{"control", "fairness-reset", "--family", "default", "--source", "1.2.3.4"}, "actor"},
		{[]string{"control", "fairness-reset", "--family", "default", "--source", "1.2.3.4", "--actor", "x", "--pepper", "short"}, "pepper is 5 characters"},
		{[]string{"control", "fairness-reset", "--family", "web", "--source", "1.2.3.4", "--actor", "x"}, `unknown family "web"`},
		{append(hit, "--count", "0"), "--count 0"},
	} {
		if _, err := runSluice(t, env, tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error about %q", tc.args, err, tc.want)
		}
	}
}
