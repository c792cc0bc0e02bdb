package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/server"
	"github.com/sluicehq/sluice/store/memstore"
	"github.com/sluicehq/sluice/wire"
)

var (
	admSecret = strings.Repeat("s", wire.MinSecretLen)
	admToken  = strings.Repeat("o", wire.MinSecretLen)
)

// subjectCounter counts the batches that reach callers' partitions, as
// opposed to the server's reserved ones (stop fence, admission state).
type subjectCounter struct {
	engine.Store
	subject atomic.Int64
}

func (s *subjectCounter) Apply(ctx context.Context, b *engine.Batch, out *engine.StepResult) error {
	if !strings.HasPrefix(b.Partition, "\x00") {
		s.subject.Add(1)
	}
	return s.Store.Apply(ctx, b, out)
}

// lockedBuffer is a log destination safe for concurrent handlers.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

type admHarness struct {
	t     *testing.T
	srv   *server.Server
	store *subjectCounter
	logs  *lockedBuffer
}

// newAdmHarness runs a server over memstore with admission configured by
// cfg (admission.DefaultConfig modified).
func newAdmHarness(t *testing.T, modify func(*admission.Config)) *admHarness {
	t.Helper()
	return newAdmHarnessWith(t, modify, func(*server.Config) {})
}

// newAdmHarnessWith is newAdmHarness with the server's configuration
// modified by modifySrv.
func newAdmHarnessWith(t *testing.T, modify func(*admission.Config), modifySrv func(*server.Config)) *admHarness {
	t.Helper()
	mem, err := memstore.New(memstore.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mem.Close() })
	h := &admHarness{t: t, store: &subjectCounter{Store: mem}, logs: &lockedBuffer{}}
	log := slog.New(slog.NewJSONHandler(h.logs, nil))
	eng := engine.New(h.store)
	acfg := admission.DefaultConfig()
	acfg.Logger = log
	modify(&acfg)
	cfg := server.DefaultConfig()
	cfg.Secrets, cfg.OperatorToken, cfg.Logger = []string{admSecret}, admToken, log
	cfg.Admission = admission.New(eng, acfg)
	modifySrv(&cfg)
	h.srv = server.New(eng, cfg)
	return h
}

// rpc sends r, signed, and returns the recorded answer.
func (h *admHarness) rpc(r wire.Request) *httptest.ResponseRecorder {
	h.t.Helper()
	return h.rpcContext(context.Background(), r)
}

// rpcContext is rpc for a request whose context is ctx.
func (h *admHarness) rpcContext(ctx context.Context, r wire.Request) *httptest.ResponseRecorder {
	h.t.Helper()
	if r.OperationID == "" {
		r.OperationID = engine.NewOperationID()
	}
	body, err := json.Marshal(r)
	if err != nil {
		h.t.Fatal(err)
	}
	req := httptest.NewRequestWithContext(ctx, http.MethodPost, wire.PathRPC, bytes.NewReader(body))
	ts := time.Now().Unix()
	req.Header.Set(wire.HeaderTimestamp, strconv.FormatInt(ts, 10))
	req.Header.Set(wire.HeaderSignature, wire.Sign([]byte(admSecret), ts, http.MethodPost, wire.PathRPC, body))
	rec := httptest.NewRecorder()
	h.srv.ServeHTTP(rec, req)
	return rec
}

// operator calls an operator endpoint with body ("" for none).
func (h *admHarness) operator(method, path, body string) *httptest.ResponseRecorder {
	h.t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+admToken)
	rec := httptest.NewRecorder()
	h.srv.ServeHTTP(rec, req)
	return rec
}

// state reads GET /control/state.
func (h *admHarness) state() server.ControlState {
	h.t.Helper()
	rec := h.operator(http.MethodGet, wire.PathState, "")
	if rec.Code != http.StatusOK {
		h.t.Fatalf("state: %d %s", rec.Code, rec.Body)
	}
	var st server.ControlState
	if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil {
		h.t.Fatal(err)
	}
	return st
}

// spent returns the commands family has admitted today on this server:
// what it leased less what it still holds.
func (h *admHarness) spent(family string) int64 {
	h.t.Helper()
	for _, f := range h.state().Families {
		if f.Family == family {
			return f.Used - f.LeasedLeft
		}
	}
	h.t.Fatalf("no family %q in the state", family)
	return 0
}

func code(t *testing.T, rec *httptest.ResponseRecorder) wire.Code {
	t.Helper()
	if rec.Code == http.StatusOK {
		return ""
	}
	var p wire.Problem
	if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
		t.Fatalf("answer %d is not a problem: %s", rec.Code, rec.Body)
	}
	if p.Status != rec.Code || p.Code.Status() != rec.Code {
		t.Fatalf("problem %+v under status %d", p, rec.Code)
	}
	return p.Code
}

func incr(family, source, principal, key string) wire.Request {
	return wire.Request{Family: family, Source: source, Principal: principal,
		Steps: []engine.Step{{Partition: "p", Commands: []engine.Command{engine.Incr(key, 1, 60_000)}}}}
}

func get(family, key string) wire.Request {
	return wire.Request{Family: family, Steps: []engine.Step{{Partition: "p", Commands: []engine.Command{engine.Get(key)}}}}
}

func fairSmall(cfg *admission.Config) {
	cfg.Total, cfg.Chunk = 2000, 16 // a source or principal may spend 100
	cfg.Fair = []string{admission.DefaultFamily}
}

// TestFairnessDenialSpendsNothingAndReachesNoSubject exhausts a principal,
// then sends it again from a fresh source: 429 guard_limited, no batch on a
// subject partition (no command, no replay record), no family allowance
// spent, and the fresh source keeps its whole quota.
func TestFairnessDenialSpendsNothingAndReachesNoSubject(t *testing.T) {
	h := newAdmHarness(t, fairSmall)
	for i := range 100 {
		if rec := h.rpc(incr(admission.DefaultFamily, "s1", "alice", fmt.Sprint("k", i))); rec.Code != http.StatusOK {
			t.Fatalf("rpc %d: %d %s", i, rec.Code, rec.Body)
		}
	}
	spent, subject := h.spent(admission.DefaultFamily), h.store.subject.Load()
	if spent != 100 || subject != 100 {
		t.Fatalf("after 100 admitted RPCs: spent %d, subject batches %d", spent, subject)
	}
	for i := range 20 {
		rec := h.rpc(incr(admission.DefaultFamily, "s2", "alice", fmt.Sprint("denied", i)))
		if c := code(t, rec); c != wire.CodeLimited || rec.Code != http.StatusTooManyRequests {
			t.Fatalf("denied rpc %d: %d %s", i, rec.Code, rec.Body)
		}
	}
	if got := h.store.subject.Load(); got != subject {
		t.Errorf("fairness denials ran %d subject batches", got-subject)
	}
	if got := h.spent(admission.DefaultFamily); got != spent {
		t.Errorf("fairness denials spent %d of the family allowance", got-spent)
	}
	for i := range 20 {
		rec := h.rpc(get(admission.DefaultFamily, fmt.Sprint("denied", i)))
		var resp engine.Response
		if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &resp) != nil || resp.Steps[0].Results[0].Found {
			t.Fatalf("denied key %d: %d %s", i, rec.Code, rec.Body)
		}
	}
	// s2 was refunded its charge for each denial: it still has 100.
	var admitted int
	for i := range 120 {
		if h.rpc(incr(admission.DefaultFamily, "s2", fmt.Sprint("p", i), "n")).Code == http.StatusOK {
			admitted++
		}
	}
	if admitted != 100 {
		t.Errorf("s2 was admitted %d after alice's denials, want its whole 100", admitted)
	}
}

// TestInvalidAdmissionAnswers503 checks that a malformed admission setting
// flows into the server's refusal: every RPC and operator call answers 503
// guard_unavailable with the reason, and nothing reaches the store.
func TestInvalidAdmissionAnswers503(t *testing.T) {
	for _, tc := range []struct {
		name   string
		modify func(*admission.Config)
		reason string
	}{
		{"unknown family", func(c *admission.Config) { c.Split = "nope=5" }, `unknown family "nope"`},
		{"parts above the total", func(c *admission.Config) { c.Split = "default=2000000" }, "above the daily total"},
		{"duplicate family", func(c *admission.Config) { c.Families = []string{"a", "a"} }, "listed twice"},
		{"malformed flag", func(c *admission.Config) { c.AddProblem(fmt.Errorf(`daily budget "lots"`)) }, `daily budget "lots"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newAdmHarness(t, tc.modify)
			for _, rec := range []*httptest.ResponseRecorder{
				h.rpc(incr(admission.DefaultFamily, "", "", "k")),
				h.rpc(get("a", "k")),
				h.operator(http.MethodGet, wire.PathState, ""),
				h.operator(http.MethodPost, wire.PathStop, `{"family":"default"}`),
				h.operator(http.MethodPost, wire.PathFairnessReset, `{"family":"default","source":"s","actor":"x"}`),
				h.operator(http.MethodGet, wire.PathAudit, ""),
				h.operator(http.MethodGet, wire.PathReadyz, ""),
			} {
				var p wire.Problem
				_ = json.Unmarshal(rec.Body.Bytes(), &p)
				if c := code(t, rec); c != wire.CodeUnavailable || !strings.Contains(p.Reason, tc.reason) || strings.Contains(p.Reason, "sluice: 503") {
					t.Errorf("answer %d %s, want 503 guard_unavailable naming %q", rec.Code, rec.Body, tc.reason)
				}
			}
			if n := h.store.subject.Load(); n != 0 {
				t.Errorf("%d subject batches ran", n)
			}
		})
	}
}

func TestFamilyStopAndResume(t *testing.T) {
	h := newAdmHarness(t, func(c *admission.Config) { c.Total, c.Families = 1000, []string{"a", "b"} })
	rec := h.operator(http.MethodPost, wire.PathStop, `{"family":"a","reason":"maintenance"}`)
	var st server.ControlState
	if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &st) != nil {
		t.Fatalf("stop: %d %s", rec.Code, rec.Body)
	}
	if st.Stopped || len(st.Families) != 2 || !st.Families[0].Stopped || !st.Families[0].OperatorStop || st.Families[0].Reason != "maintenance" || st.Families[1].Stopped {
		t.Fatalf("state after a family stop: %+v", st)
	}
	before := h.store.subject.Load()
	if c := code(t, h.rpc(incr("a", "", "", "k"))); c != wire.CodeStopped {
		t.Errorf("rpc of the stopped family: %s", c)
	}
	if h.store.subject.Load() != before {
		t.Error("an RPC of a stopped family reached a subject")
	}
	if c := code(t, h.rpc(incr("b", "", "", "k"))); c != "" {
		t.Errorf("rpc of the other family: %s", c)
	}
	if rec := h.operator(http.MethodPost, wire.PathResume, `{"family":"a","reason":"done"}`); rec.Code != http.StatusOK {
		t.Fatalf("resume: %d %s", rec.Code, rec.Body)
	}
	if c := code(t, h.rpc(incr("a", "", "", "k"))); c != "" {
		t.Errorf("rpc after the resume: %s", c)
	}
	if !strings.Contains(h.logs.String(), `"msg":"operator family resume","family":"a","reason":"done"`) {
		t.Errorf("the resume and its reason are not logged:\n%s", h.logs)
	}
	for body, want := range map[string]wire.Code{
		`{"family":"nope"}`:   wire.CodeInvalid,
		`{"family":1}`:        wire.CodeInvalid,
		`{"familie":"a"}`:     wire.CodeInvalid,
		`{"family":"a"} tail`: wire.CodeInvalid,
	} {
		if c := code(t, h.operator(http.MethodPost, wire.PathStop, body)); c != want {
			t.Errorf("stop %s: %s, want %s", body, c, want)
		}
	}
	if st := h.state(); st.Families[0].Stopped {
		t.Errorf("a refused stop stopped the family: %+v", st.Families[0])
	}
}

// TestEmptyFamilyIsNotTheGlobalFence: a stop or resume body naming an
// empty family (a script's unset variable) is refused, not read as a body
// without a family: a resume meant for one family must never lift the
// global stop fence, nor a stop meant for one family stop every RPC.
func TestEmptyFamilyIsNotTheGlobalFence(t *testing.T) {
	h := newAdmHarness(t, func(c *admission.Config) { c.Total, c.Families = 1000, []string{"a", "b"} })
	if rec := h.operator(http.MethodPost, wire.PathStop, `{"reason":"incident"}`); rec.Code != http.StatusOK {
		t.Fatalf("global stop: %d %s", rec.Code, rec.Body)
	}
	if c := code(t, h.operator(http.MethodPost, wire.PathResume, `{"family":"","reason":"a fixed"}`)); c != wire.CodeInvalid {
		t.Errorf("resume of family \"\": %q, want %s", c, wire.CodeInvalid)
	}
	if st := h.state(); !st.Stopped {
		t.Fatal("a resume naming an empty family lifted the global stop fence")
	}
	if rec := h.operator(http.MethodPost, wire.PathResume, ``); rec.Code != http.StatusOK {
		t.Fatalf("global resume: %d %s", rec.Code, rec.Body)
	}
	if c := code(t, h.operator(http.MethodPost, wire.PathStop, `{"family":""}`)); c != wire.CodeInvalid {
		t.Errorf("stop of family \"\": %q, want %s", c, wire.CodeInvalid)
	}
	if st := h.state(); st.Stopped {
		t.Fatal("a stop naming an empty family set the global stop fence")
	}
	if c := code(t, h.rpc(incr("b", "", "", "k"))); c != "" {
		t.Errorf("rpc after the refused stops: %s", c)
	}
}

// TestControlBodyIsAnObject: an operator body is a JSON object or nothing;
// a null (a script's serialised nothing) is refused, not read as a body
// without a family, so it neither stops nor resumes the whole server.
func TestControlBodyIsAnObject(t *testing.T) {
	h := newAdmHarness(t, func(c *admission.Config) { c.Total, c.Families = 1000, []string{"a", "b"} })
	for _, body := range []string{`null`, ` null `} {
		if c := code(t, h.operator(http.MethodPost, wire.PathStop, body)); c != wire.CodeInvalid {
			t.Errorf("stop %q: %q, want %s", body, c, wire.CodeInvalid)
		}
		if st := h.state(); st.Stopped {
			t.Fatalf("a stop with the body %q set the global stop fence", body)
		}
	}
	if rec := h.operator(http.MethodPost, wire.PathStop, ``); rec.Code != http.StatusOK {
		t.Fatalf("global stop: %d %s", rec.Code, rec.Body)
	}
	if c := code(t, h.operator(http.MethodPost, wire.PathResume, `null`)); c != wire.CodeInvalid {
		t.Errorf("resume null: %q, want %s", c, wire.CodeInvalid)
	}
	if st := h.state(); !st.Stopped {
		t.Fatal("a resume with the body null lifted the global stop fence")
	}
	if c := code(t, h.operator(http.MethodPost, wire.PathFairnessReset, `null`)); c != wire.CodeInvalid {
		t.Errorf("fairness reset null: %q, want %s", c, wire.CodeInvalid)
	}
}

func TestFairnessResetIsAuditedAndReadmits(t *testing.T) {
	h := newAdmHarness(t, fairSmall)
	tiers := map[string]string{wire.TierV4Slash24: "n24"}
	send := func() int {
		n := 0
		for range 120 {
			r := incr(admission.DefaultFamily, "s1", "", "n")
			r.SourceTiers = tiers
			if h.rpc(r).Code == http.StatusOK {
				n++
			}
		}
		return n
	}
	if got := send(); got != 100 {
		t.Fatalf("s1 admitted %d, want 100", got)
	}
	if c := code(t, h.operator(http.MethodPost, wire.PathFairnessReset, `{"family":"default","source":"s1"}`)); c != wire.CodeInvalid {
		t.Errorf("a reset without an actor: %s", c)
	}
	rec := h.operator(http.MethodPost, wire.PathFairnessReset,
		`{"family":"default","source":"s1","sourceTiers":{"v4/24":"n24"},"actor":"alice","reason":"office NAT"}`)
	var audit admission.AuditRecord
	if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &audit) != nil {
		t.Fatalf("reset: %d %s", rec.Code, rec.Body)
	}
	if !strings.HasPrefix(audit.Actor, "alice from ") || audit.Action != "fairness.reset" || audit.Reset.Source != "s1" || audit.Reset.Reason != "office NAT" {
		t.Errorf("audit record %+v", audit)
	}
	if logs := h.logs.String(); !strings.Contains(logs, `"msg":"fairness quota reset"`) || !strings.Contains(logs, `"actor":"alice from `) {
		t.Errorf("the reset is not in the log:\n%s", logs)
	}
	if got := send(); got != 100 {
		t.Errorf("after the reset s1 admitted %d, want a fresh 100", got)
	}
}

// TestAuditListsFairnessResets resets three identities and lists them with
// GET /control/audit: newest first, in pages following the cursor, behind
// the operator token, with strict query parameters.
func TestAuditListsFairnessResets(t *testing.T) {
	h := newAdmHarness(t, fairSmall)
	for _, who := range []string{"alice", "bob", "carol"} {
		body := fmt.Sprintf(`{"family":"default","principal":"p-%s","actor":%q,"reason":"drill"}`, who, who)
		if rec := h.operator(http.MethodPost, wire.PathFairnessReset, body); rec.Code != http.StatusOK {
			t.Fatalf("reset: %d %s", rec.Code, rec.Body)
		}
	}
	list := func(query string) admission.AuditPage {
		t.Helper()
		rec := h.operator(http.MethodGet, wire.PathAudit+query, "")
		var page admission.AuditPage
		if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &page) != nil {
			t.Fatalf("GET %s: %d %s", query, rec.Code, rec.Body)
		}
		return page
	}
	all := list("")
	if len(all.Records) != 3 || all.Next != 0 {
		t.Fatalf("whole trail: %+v", all)
	}
	for i, who := range []string{"carol", "bob", "alice"} {
		r := all.Records[i]
		if r.Seq != int64(3-i) || !strings.HasPrefix(r.Actor, who+" from ") || r.Reset.Principal != "p-"+who || r.Reset.Reason != "drill" {
			t.Errorf("record %d: %+v", i, r)
		}
	}
	first := list("?limit=2")
	second := list(fmt.Sprintf("?limit=2&before=%d", first.Next))
	if len(first.Records) != 2 || first.Next != 2 || len(second.Records) != 1 || second.Records[0].Seq != 1 || second.Next != 0 {
		t.Errorf("pages of 2: %+v then %+v", first, second)
	}
	for _, query := range []string{"?limit=0", "?limit=1001", "?limit=x", "?before=-1", "?limit=1&limit=2", "?page=2", "?limit=2;before=3", "?limit=%zz", "?before=2&limit=%"} {
		if c := code(t, h.operator(http.MethodGet, wire.PathAudit+query, "")); c != wire.CodeInvalid {
			t.Errorf("GET %s: %s, want invalid", query, c)
		}
	}
	req := httptest.NewRequest(http.MethodGet, wire.PathAudit, nil)
	rec := httptest.NewRecorder()
	h.srv.ServeHTTP(rec, req)
	if c := code(t, rec); c != wire.CodeUnauthorized {
		t.Errorf("without the token: %s", c)
	}
	if c := code(t, h.operator(http.MethodPost, wire.PathAudit, "")); c != wire.CodeMethod {
		t.Errorf("POST: %s", c)
	}

	// A server without admission has no trail to list.
	req = httptest.NewRequest(http.MethodGet, wire.PathAudit, nil)
	req.Header.Set("Authorization", "Bearer "+admToken)
	rec = httptest.NewRecorder()
	newBoundServer(t).ServeHTTP(rec, req)
	if c := code(t, rec); c != wire.CodeInvalid || !strings.Contains(rec.Body.String(), "admission is not enabled") {
		t.Errorf("without admission: %d %s", rec.Code, rec.Body)
	}
}
