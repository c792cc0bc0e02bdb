package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/metricstest"
	"github.com/sluicehq/sluice/server"
	"github.com/sluicehq/sluice/store/memstore"
	"github.com/sluicehq/sluice/wire"
)

// newMetricsHarness runs a server over memstore, with default admission,
// whose metrics go to the registry returned, which it serves.
func newMetricsHarness(t *testing.T) (*admHarness, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	h := newAdmHarnessWith(t, func(*admission.Config) {}, func(cfg *server.Config) {
		cfg.Registerer, cfg.Gatherer = reg, reg
	})
	return h, reg
}

// metric returns the value of the series of name whose labels are labels
// ("k=v" each), or of a histogram's count; 0 if the registry has none.
func metric(t *testing.T, reg prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	var pairs []string
	for _, kv := range labels {
		k, v, _ := strings.Cut(kv, "=")
		pairs = append(pairs, k, v)
	}
	v, _ := metricstest.Value(metricstest.Gather(t, reg), name, pairs...)
	return v
}

// hitOnce is one request hitting key under a window of limit.
func hitOnce(key string, limit int64) wire.Request {
	return wire.Request{Family: admission.DefaultFamily, Steps: []engine.Step{{Partition: "p", Commands: []engine.Command{
		engine.Hit(1, engine.Window{Key: key, Kind: algo.KindFixed, Limit: limit, WindowMs: 60_000}),
	}}}}
}

// TestMetricsCountCallsRequestsAndCommands sends RPCs of every outcome,
// alone and in an envelope, and checks each counter moved by what was sent:
// calls by endpoint and code, authenticated requests by code, commands by
// op and outcome, and the calls' times.
func TestMetricsCountCallsRequestsAndCommands(t *testing.T) {
	h, reg := newMetricsHarness(t)

	// Three hits on a limit of two: two allowed, one denied.
	for range 3 {
		if rec := h.rpc(hitOnce("k", 2)); rec.Code != http.StatusOK {
			t.Fatalf("hit: %d %s", rec.Code, rec.Body)
		}
	}
	// A replay answers from its record.
	replay := incr(admission.DefaultFamily, "", "", "n")
	replay.OperationID = engine.NewOperationID()
	for range 2 {
		if rec := h.rpc(replay); rec.Code != http.StatusOK {
			t.Fatalf("incr: %d %s", rec.Code, rec.Body)
		}
	}
	// A sequential request whose first step is denied skips its second.
	seq := hitOnce("k", 2)
	seq.Steps = append(seq.Steps, engine.Step{Partition: "q", Commands: []engine.Command{engine.Get("x"), engine.Get("y")}})
	if rec := h.rpc(seq); rec.Code != http.StatusOK {
		t.Fatalf("sequential: %d %s", rec.Code, rec.Body)
	}
	// A bad signature, and a signed body that is no request.
	body := []byte(`{"steps":`)
	for _, c := range []struct {
		secret string
		want   int
	}{
		{strings.Repeat("x", wire.MinSecretLen), http.StatusUnauthorized},
		{admSecret, http.StatusBadRequest},
	} {
		req := httptest.NewRequest(http.MethodPost, wire.PathRPC, bytes.NewReader(body))
		ts := time.Now().Unix()
		req.Header.Set(wire.HeaderTimestamp, strconv.FormatInt(ts, 10))
		req.Header.Set(wire.HeaderSignature, wire.Sign([]byte(c.secret), ts, http.MethodPost, wire.PathRPC, body))
		rec := httptest.NewRecorder()
		h.srv.ServeHTTP(rec, req)
		if rec.Code != c.want {
			t.Fatalf("malformed body signed with %.4s…: %d %s, want %d", c.secret, rec.Code, rec.Body, c.want)
		}
	}
	// An envelope of two requests and one out of bounds.
	tooMany := get(admission.DefaultFamily, "z")
	tooMany.Steps = make([]engine.Step, engine.MaxSteps+1)
	for i := range tooMany.Steps {
		tooMany.Steps[i] = engine.Step{Partition: "p", Commands: []engine.Command{engine.Get("z")}}
	}
	answers := h.envelope(get(admission.DefaultFamily, "a"), tooMany, hitOnce("e", 5))
	if got := []wire.Code{answerCode(answers[0]), answerCode(answers[1]), answerCode(answers[2])}; got[0] != "" || got[1] != wire.CodeInvalid || got[2] != "" {
		t.Fatalf("envelope answered %v", got)
	}

	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"sluice_rpc_calls_total", []string{"endpoint=rpc", "code=ok"}, 6},
		{"sluice_rpc_calls_total", []string{"endpoint=rpc", "code=unauthorized"}, 1},
		{"sluice_rpc_calls_total", []string{"endpoint=rpc", "code=invalid"}, 1},
		{"sluice_rpc_calls_total", []string{"endpoint=rpcs", "code=ok"}, 1},
		{"sluice_rpc_call_duration_seconds", []string{"endpoint=rpc"}, 8},
		{"sluice_rpc_call_duration_seconds", []string{"endpoint=rpcs"}, 1},
		{"sluice_rpc_requests_total", []string{"code=ok"}, 8},
		{"sluice_rpc_requests_total", []string{"code=invalid"}, 2},
		{"sluice_rpc_requests_total", []string{"code=unauthorized"}, 0},
		{"sluice_commands_total", []string{"op=win.hit", "outcome=allowed"}, 3},
		{"sluice_commands_total", []string{"op=win.hit", "outcome=denied"}, 2},
		{"sluice_commands_total", []string{"op=kv.incr", "outcome=allowed"}, 1},
		{"sluice_commands_total", []string{"op=kv.incr", "outcome=replayed"}, 1},
		{"sluice_commands_total", []string{"op=kv.get", "outcome=skipped"}, 2},
		{"sluice_commands_total", []string{"op=kv.get", "outcome=allowed"}, 1},
		{"sluice_stopped", nil, 0},
	} {
		if got := metric(t, reg, c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
}

// TestMetricsStopFenceAndFamilies checks sluice_stopped through a stop
// and a resume, the refused RPC counted as guard_stopped, and each
// family's budget as GET /control/state reports it.
func TestMetricsStopFenceAndFamilies(t *testing.T) {
	h, reg := newMetricsHarness(t)
	if rec := h.rpc(hitOnce("k", 5)); rec.Code != http.StatusOK {
		t.Fatalf("hit: %d %s", rec.Code, rec.Body)
	}
	st := h.state()
	if len(st.Families) == 0 {
		t.Fatal("no family in the state")
	}
	for _, f := range st.Families {
		if got := metric(t, reg, "sluice_family_allowance", "family="+f.Family); got != float64(f.Allowance) || got == 0 {
			t.Errorf("allowance of %s = %v, the state says %d", f.Family, got, f.Allowance)
		}
		if got := metric(t, reg, "sluice_family_used", "family="+f.Family); got != float64(f.Used) {
			t.Errorf("used of %s = %v, the state says %d", f.Family, got, f.Used)
		}
	}
	if got := metric(t, reg, "sluice_family_used", "family="+admission.DefaultFamily); got == 0 {
		t.Errorf("the default family used nothing after an admitted RPC")
	}

	if rec := h.operator(http.MethodPost, wire.PathStop, `{"reason":"test"}`); rec.Code != http.StatusOK {
		t.Fatalf("stop: %d %s", rec.Code, rec.Body)
	}
	if got := metric(t, reg, "sluice_stopped"); got != 1 {
		t.Errorf("sluice_stopped = %v while stopped, want 1", got)
	}
	if rec := h.rpc(hitOnce("k", 5)); code(t, rec) != wire.CodeStopped {
		t.Fatalf("hit while stopped: %d %s", rec.Code, rec.Body)
	}
	if got := metric(t, reg, "sluice_rpc_requests_total", "code=guard_stopped"); got != 1 {
		t.Errorf("requests answered guard_stopped = %v, want 1", got)
	}
	if rec := h.operator(http.MethodPost, wire.PathResume, ""); rec.Code != http.StatusOK {
		t.Fatalf("resume: %d %s", rec.Code, rec.Body)
	}
	if got := metric(t, reg, "sluice_stopped"); got != 0 {
		t.Errorf("sluice_stopped = %v after resume, want 0", got)
	}
}

// TestMetricsEndpoint checks GET /metrics: the operator token required,
// the text format served, and no endpoint without a Gatherer.
func TestMetricsEndpoint(t *testing.T) {
	h, _ := newMetricsHarness(t)
	h.rpc(hitOnce("k", 5))

	req := httptest.NewRequest(http.MethodGet, wire.PathMetrics, nil)
	rec := httptest.NewRecorder()
	h.srv.ServeHTTP(rec, req)
	if code(t, rec) != wire.CodeUnauthorized {
		t.Fatalf("no token: %d %s", rec.Code, rec.Body)
	}
	req.Header.Set("Authorization", "Bearer "+strings.Repeat("w", wire.MinSecretLen))
	rec = httptest.NewRecorder()
	h.srv.ServeHTTP(rec, req)
	if code(t, rec) != wire.CodeUnauthorized {
		t.Fatalf("wrong token: %d %s", rec.Code, rec.Body)
	}

	rec = h.operator(http.MethodGet, wire.PathMetrics, "")
	if rec.Code != http.StatusOK {
		t.Fatalf("with the token: %d %s", rec.Code, rec.Body)
	}
	if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Errorf("Content-Type %q, want the text format", ct)
	}
	fams := metricstest.Parse(t, rec.Body)
	var calls *dto.MetricFamily
	for _, f := range fams {
		if f.GetName() == "sluice_rpc_calls_total" {
			calls = f
		}
	}
	if calls == nil || calls.GetType() != dto.MetricType_COUNTER {
		t.Fatalf("no counter sluice_rpc_calls_total in %d families", len(fams))
	}
	for _, m := range calls.GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() != "endpoint" && l.GetName() != "code" {
				t.Errorf("label %s on sluice_rpc_calls_total", l.GetName())
			}
		}
	}
	if rec := h.operator(http.MethodPost, wire.PathMetrics, ""); code(t, rec) != wire.CodeMethod {
		t.Errorf("POST /metrics: %d %s", rec.Code, rec.Body)
	}

	plain := newAdmHarness(t, func(*admission.Config) {})
	if rec := plain.operator(http.MethodGet, wire.PathMetrics, ""); code(t, rec) != wire.CodeNotFound {
		t.Errorf("without a Gatherer: %d %s", rec.Code, rec.Body)
	}
}

// TestMetricsRegisteredTwice checks that a second server registering on
// the same registry refuses every RPC with the reason, and that the first
// goes on counting alone.
func TestMetricsRegisteredTwice(t *testing.T) {
	first, reg := newMetricsHarness(t)
	second := newAdmHarnessWith(t, func(*admission.Config) {}, func(cfg *server.Config) {
		cfg.Registerer, cfg.Gatherer = reg, reg
	})
	rec := second.rpc(hitOnce("k", 5))
	var p wire.Problem
	if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil || p.Code != wire.CodeUnavailable || !strings.Contains(p.Reason, "metrics") {
		t.Fatalf("second server: %d %s, want 503 guard_unavailable naming the metrics", rec.Code, rec.Body)
	}
	if rec := first.rpc(hitOnce("k", 5)); rec.Code != http.StatusOK {
		t.Fatalf("first server: %d %s", rec.Code, rec.Body)
	}
	if got := metric(t, reg, "sluice_rpc_calls_total", "endpoint=rpc", "code=ok"); got != 1 {
		t.Errorf("calls counted = %v, want the first server's 1", got)
	}
}

// failingStore fails every batch while fail is set.
type failingStore struct {
	engine.Store
	fail atomic.Bool
}

func (s *failingStore) Apply(ctx context.Context, b *engine.Batch, out *engine.StepResult) error {
	if s.fail.Load() {
		return errors.New("the disk is on fire")
	}
	return s.Store.Apply(ctx, b, out)
}

// TestMetricsServedWhenTheStoreFails checks that a scrape while the store
// fails still answers 200 with the counters, leaves out the stop fence it
// could not read, and logs why; and that the fence is back once the store
// answers.
func TestMetricsServedWhenTheStoreFails(t *testing.T) {
	mem, err := memstore.New(memstore.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	st := &failingStore{Store: mem}
	logs := &lockedBuffer{}
	reg := prometheus.NewRegistry()
	cfg := server.DefaultConfig()
	cfg.Secrets, cfg.OperatorToken = []string{admSecret}, admToken
	cfg.Logger = slog.New(slog.NewJSONHandler(logs, nil))
	cfg.FenceRefresh = time.Nanosecond // every scrape reads the store
	cfg.Registerer, cfg.Gatherer = reg, reg
	srv := server.New(engine.New(st), cfg)
	scrape := func() string {
		req := httptest.NewRequest(http.MethodGet, wire.PathMetrics, nil)
		req.Header.Set("Authorization", "Bearer "+admToken)
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			t.Fatalf("GET /metrics: %d %s", rec.Code, rec.Body)
		}
		return rec.Body.String()
	}

	st.fail.Store(true)
	body := scrape()
	if strings.Contains(body, "sluice_stopped ") {
		t.Errorf("sluice_stopped reported from a fence that could not be read:\n%s", body)
	}
	if !strings.Contains(body, `sluice_rpc_calls_total{code="ok",endpoint="rpc"} 0`) {
		t.Errorf("the counters are missing:\n%s", body)
	}
	if !strings.Contains(logs.String(), "gathering metrics") || !strings.Contains(logs.String(), "the disk is on fire") {
		t.Errorf("the failure was not logged: %s", logs)
	}

	st.fail.Store(false)
	if body := scrape(); !strings.Contains(body, "sluice_stopped 0") {
		t.Errorf("sluice_stopped missing once the store answers:\n%s", body)
	}
}
