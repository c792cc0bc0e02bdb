package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/server"
	"github.com/sluicehq/sluice/store/memstore"
	"github.com/sluicehq/sluice/wire"
)

// envelopeBody encodes reqs, giving each without an operation id a fresh
// one, as the body of POST /v1/rpcs.
func envelopeBody(t *testing.T, reqs ...wire.Request) []byte {
	t.Helper()
	var bodies [][]byte
	for _, r := range reqs {
		if r.OperationID == "" {
			r.OperationID = engine.NewOperationID()
		}
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		bodies = append(bodies, b)
	}
	return wire.AppendEnvelope(nil, bodies...)
}

// signedEnvelope returns POST /v1/rpcs of body, signed over signed for
// path.
func signedEnvelope(body, signed []byte, path string) *http.Request {
	req := httptest.NewRequest(http.MethodPost, wire.PathRPCs, bytes.NewReader(body))
	ts := time.Now().Unix()
	req.Header.Set(wire.HeaderTimestamp, strconv.FormatInt(ts, 10))
	req.Header.Set(wire.HeaderSignature, wire.Sign([]byte(admSecret), ts, http.MethodPost, path, signed))
	return req
}

// envelope sends reqs in one envelope and returns its answers, failing
// unless the envelope itself is answered 200 with one answer per request.
func (h *admHarness) envelope(reqs ...wire.Request) []wire.Answer {
	h.t.Helper()
	body := envelopeBody(h.t, reqs...)
	rec := httptest.NewRecorder()
	h.srv.ServeHTTP(rec, signedEnvelope(body, body, wire.PathRPCs))
	if rec.Code != http.StatusOK {
		h.t.Fatalf("envelope: %d %s", rec.Code, rec.Body)
	}
	var resp wire.EnvelopeResponse
	if err := json.Unmarshal(rec.Body.Bytes(), &resp); err != nil || len(resp.Answers) != len(reqs) {
		h.t.Fatalf("envelope of %d: %v, answer %s", len(reqs), err, rec.Body)
	}
	for i, a := range resp.Answers {
		ok := a.Status == http.StatusOK && a.Response != nil && a.Problem == nil ||
			a.Status != http.StatusOK && a.Response == nil && a.Problem != nil && a.Problem.Status == a.Status && a.Problem.Code.Status() == a.Status
		if !ok {
			h.t.Fatalf("answer %d is neither a response nor a problem of its status: %s", i, rec.Body)
		}
	}
	return resp.Answers
}

func answerCode(a wire.Answer) wire.Code {
	if a.Problem == nil {
		return ""
	}
	return a.Problem.Code
}

// incrWithID is incr of key by one under operation id id.
func incrWithID(id, key string) wire.Request {
	r := incr(admission.DefaultFamily, "", "", key)
	r.OperationID = id
	return r
}

func TestEnvelopeSignature(t *testing.T) {
	h := newAdmHarness(t, func(*admission.Config) {})
	body := envelopeBody(t, incr(admission.DefaultFamily, "", "", "k"))
	unsigned := httptest.NewRequest(http.MethodPost, wire.PathRPCs, bytes.NewReader(body))
	other := append(bytes.Clone(body[:len(body)-2]), `,{}]}`...)
	for name, req := range map[string]*http.Request{
		"unsigned":               unsigned,
		"signed for /v1/rpc":     signedEnvelope(body, body, wire.PathRPC),
		"signed over other body": signedEnvelope(body, other, wire.PathRPCs),
	} {
		rec := httptest.NewRecorder()
		h.srv.ServeHTTP(rec, req)
		if c := code(t, rec); c != wire.CodeUnauthorized {
			t.Errorf("%s: %d %s, want 401 unauthorized", name, rec.Code, rec.Body)
		}
	}
	if n := h.store.subject.Load(); n != 0 {
		t.Errorf("unauthenticated envelopes ran %d subject batches", n)
	}
}

// TestEnvelopeReadsAtMostTheBoundPlusOne sends 100 MB envelopes, chunked
// or declared: 413, after reading at most wire.MaxEnvelopeBody+1 bytes of
// the chunked one and none of the declared one.
func TestEnvelopeReadsAtMostTheBoundPlusOne(t *testing.T) {
	s := newBoundServer(t)
	for _, tc := range []struct {
		name          string
		contentLength int64
		maxRead       int64
	}{
		{"chunked", -1, wire.MaxEnvelopeBody + 1},
		{"lying content-length", 100, wire.MaxEnvelopeBody + 1},
		{"honest content-length", hugeBody, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := &countingBody{left: hugeBody}
			req := signedEnvelope(nil, nil, wire.PathRPCs)
			req.Body, req.ContentLength = body, tc.contentLength
			rec := httptest.NewRecorder()
			s.ServeHTTP(rec, req)
			if rec.Code != http.StatusRequestEntityTooLarge || code(t, rec) != wire.CodeTooLarge {
				t.Fatalf("status %d, want 413; body %s", rec.Code, rec.Body)
			}
			if got := body.read.Load(); got > tc.maxRead {
				t.Errorf("the handler read %d bytes of the body, want at most %d", got, tc.maxRead)
			}
			if got := rec.Header().Get("Connection"); got != "close" {
				t.Errorf("Connection %q, want close", got)
			}
		})
	}
}

func TestMalformedEnvelope(t *testing.T) {
	h := newAdmHarness(t, func(*admission.Config) {})
	many := make([]wire.Request, wire.MaxEnvelope+1)
	for i := range many {
		many[i] = incr(admission.DefaultFamily, "", "", "k")
	}
	for name, body := range map[string][]byte{
		"not JSON":           []byte(`{"requests":[{}]`),
		"no requests":        []byte(`{"requests":[]}`),
		"unknown field":      []byte(`{"requests":[{}],"more":1}`),
		"over the count":     envelopeBody(t, many...),
		"a request, no list": envelopeBody(t, many[0])[len(`{"requests":[`) : len(envelopeBody(t, many[0]))-2],
	} {
		rec := httptest.NewRecorder()
		h.srv.ServeHTTP(rec, signedEnvelope(body, body, wire.PathRPCs))
		if c := code(t, rec); c != wire.CodeInvalid {
			t.Errorf("%s: %d %s, want 400 invalid", name, rec.Code, rec.Body)
		}
	}
	if n := h.store.subject.Load(); n != 0 {
		t.Errorf("malformed envelopes ran %d subject batches", n)
	}
}

// TestEnvelopeAnswersEachRequestOnItsOwn sends good requests beside an
// invalid one and an oversized one: each is answered what /v1/rpc would
// have answered it, and the good ones run.
func TestEnvelopeAnswersEachRequestOnItsOwn(t *testing.T) {
	h := newAdmHarness(t, func(*admission.Config) {})
	noFamily := incr("", "", "", "k")
	huge := incr(admission.DefaultFamily, "", "", "k")
	huge.Steps[0].Partition = strings.Repeat("p", wire.MaxBody)
	answers := h.envelope(incr(admission.DefaultFamily, "", "", "a"), noFamily, huge, incr(admission.DefaultFamily, "", "", "b"))
	for i, want := range []wire.Code{"", wire.CodeInvalid, wire.CodeTooLarge, ""} {
		if got := answerCode(answers[i]); got != want {
			t.Errorf("answer %d: %d %s, want %q", i, answers[i].Status, got, want)
		}
	}
	for _, i := range []int{0, 3} {
		if r := answers[i].Response; len(r.Steps) != 1 || r.Steps[0].Results[0].Int != 1 {
			t.Errorf("answer %d: %+v, want the counter at 1", i, r)
		}
	}
	if n := h.store.subject.Load(); n != 2 {
		t.Errorf("%d subject batches ran, want the 2 good requests'", n)
	}
	// The same requests alone on /v1/rpc are answered alike.
	if c := code(t, h.rpc(noFamily)); c != wire.CodeInvalid {
		t.Errorf("the request without a family alone: %s", c)
	}
}

// TestEnvelopeRequestsOffTheFastPath sends, beside a request as the client
// writes it, one that is valid JSON but not a request, and one that only
// encoding/json reads (an escaped member name): each is answered what
// /v1/rpc would have answered it alone.
func TestEnvelopeRequestsOffTheFastPath(t *testing.T) {
	h := newAdmHarness(t, func(*admission.Config) {})
	plain := envelopeBody(t, incr(admission.DefaultFamily, "", "", "a"))
	escaped := envelopeBody(t, incr(admission.DefaultFamily, "", "", "b"))
	escaped = bytes.Replace(escaped, []byte(`"operationId"`), []byte(`"operation\u0049d"`), 1)
	malformed := []byte(`{"operationId":5}`)
	inner := func(env []byte) []byte { return env[len(`{"requests":[`) : len(env)-2] }
	body := slices.Concat([]byte(`{"requests":[`), inner(plain), []byte(","), malformed, []byte(" , "), inner(escaped), []byte("]}"))

	rec := httptest.NewRecorder()
	h.srv.ServeHTTP(rec, signedEnvelope(body, body, wire.PathRPCs))
	var resp wire.EnvelopeResponse
	if err := json.Unmarshal(rec.Body.Bytes(), &resp); rec.Code != http.StatusOK || err != nil || len(resp.Answers) != 3 {
		t.Fatalf("envelope: %d %s (%v)", rec.Code, rec.Body, err)
	}
	for i, want := range []wire.Code{"", wire.CodeInvalid, ""} {
		if got := answerCode(resp.Answers[i]); got != want {
			t.Errorf("answer %d: %d %s, want %q", i, resp.Answers[i].Status, got, want)
		}
	}
	alone := httptest.NewRecorder()
	lone := signedEnvelope(malformed, malformed, wire.PathRPC)
	lone.URL.Path, lone.RequestURI = wire.PathRPC, wire.PathRPC
	h.srv.ServeHTTP(alone, lone)
	var p wire.Problem
	if err := json.Unmarshal(alone.Body.Bytes(), &p); err != nil || resp.Answers[1].Problem == nil || p.Reason != resp.Answers[1].Problem.Reason {
		t.Errorf("the malformed request alone: %s; in the envelope: %+v", alone.Body, resp.Answers[1].Problem)
	}
	if n := h.store.subject.Load(); n != 2 {
		t.Errorf("%d subject batches ran, want the 2 good requests'", n)
	}
}

// TestEnvelopeReplay resends a request of an envelope by its operation id,
// in another envelope: the recorded answer comes back and nothing is
// charged again; the same id with other commands is a conflict.
func TestEnvelopeReplay(t *testing.T) {
	h := newAdmHarness(t, func(*admission.Config) {})
	id := engine.NewOperationID()
	first := h.envelope(incrWithID(id, "n"), incr(admission.DefaultFamily, "", "", "m"))
	if first[0].Status != http.StatusOK || first[0].Response.Steps[0].Results[0].Int != 1 {
		t.Fatalf("first answer: %+v", first[0])
	}
	again := h.envelope(incr(admission.DefaultFamily, "", "", "m"), incrWithID(id, "n"), incrWithID(id, "other"))
	if a := again[1]; a.Status != http.StatusOK || !a.Response.Steps[0].Replayed || a.Response.Steps[0].Results[0].Int != 1 {
		t.Errorf("replayed answer: %+v", a)
	}
	if a := again[2]; answerCode(a) != wire.CodeConflict || a.Status != http.StatusConflict {
		t.Errorf("reuse with other commands: %d %s, want 409 conflict", a.Status, answerCode(a))
	}
	if a := again[0]; a.Status != http.StatusOK || a.Response.Steps[0].Results[0].Int != 2 {
		t.Errorf("the other request: %+v", a)
	}
	rec := h.rpc(get(admission.DefaultFamily, "n"))
	var resp engine.Response
	if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &resp) != nil || resp.Steps[0].Results[0].Value != "1" {
		t.Errorf("counter after the replay: %d %s, want 1", rec.Code, rec.Body)
	}
}

// TestEnvelopeStopFenceAndAdmission checks that the stop fence answers
// every request of an envelope guard_stopped, and that admission refuses
// the requests of a stopped family alone.
func TestEnvelopeStopFenceAndAdmission(t *testing.T) {
	h := newAdmHarness(t, func(c *admission.Config) { c.Total, c.Families = 1000, []string{"a", "b"} })
	if rec := h.operator(http.MethodPost, wire.PathStop, `{"family":"a"}`); rec.Code != http.StatusOK {
		t.Fatalf("family stop: %d %s", rec.Code, rec.Body)
	}
	answers := h.envelope(incr("b", "", "", "k"), incr("a", "", "", "k"), incr("b", "", "", "j"))
	for i, want := range []wire.Code{"", wire.CodeStopped, ""} {
		if got := answerCode(answers[i]); got != want {
			t.Errorf("family a stopped, answer %d: %d %s, want %q", i, answers[i].Status, got, want)
		}
	}
	if n := h.store.subject.Load(); n != 2 {
		t.Errorf("%d subject batches ran, want family b's 2", n)
	}
	if rec := h.operator(http.MethodPost, wire.PathStop, `{"reason":"drill"}`); rec.Code != http.StatusOK {
		t.Fatalf("stop: %d %s", rec.Code, rec.Body)
	}
	answers = h.envelope(incr("b", "", "", "k"), incr("a", "", "", "k"), incr("b", "", "", "j"))
	for i, a := range answers {
		if answerCode(a) != wire.CodeStopped || a.Status != http.StatusServiceUnavailable {
			t.Errorf("stopped, answer %d: %d %s, want 503 guard_stopped", i, a.Status, answerCode(a))
		}
	}
	if n := h.store.subject.Load(); n != 2 {
		t.Errorf("the stop fence let %d subject batches run", n-2)
	}
}

func TestMisconfiguredServerRefusesEnvelopes(t *testing.T) {
	s := server.New(nil, server.Config{})
	body := envelopeBody(t, incr(admission.DefaultFamily, "", "", "k"))
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, signedEnvelope(body, body, wire.PathRPCs))
	if c := code(t, rec); c != wire.CodeUnavailable {
		t.Errorf("%d %s, want 503 guard_unavailable", rec.Code, rec.Body)
	}
}

// gateStore holds every batch on partition "p" until release is closed,
// counting those it holds.
type gateStore struct {
	engine.Store
	mu      sync.Mutex
	held    int
	release chan struct{}
}

func (s *gateStore) Apply(ctx context.Context, b *engine.Batch, out *engine.StepResult) error {
	if b.Partition == "p" {
		s.mu.Lock()
		s.held++
		s.mu.Unlock()
		<-s.release
	}
	return s.Store.Apply(ctx, b, out)
}

func (s *gateStore) holding() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held
}

// remoteGateStore is a gateStore that says it is reached over the network.
type remoteGateStore struct{ *gateStore }

func (remoteGateStore) Remote() {}

// TestEnvelopeConcurrencyFollowsTheStore sends an envelope of four
// requests to a server whose store holds every subject batch: on a store
// reached over the network all four are held at once, their round trips
// overlapping; on an in-process store one is, the next starting only when
// it is done.
func TestEnvelopeConcurrencyFollowsTheStore(t *testing.T) {
	for _, remote := range []bool{true, false} {
		t.Run(map[bool]string{true: "remote", false: "in-process"}[remote], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				mem, err := memstore.New(memstore.DefaultConfig())
				if err != nil {
					t.Fatal(err)
				}
				defer mem.Close()
				gate := &gateStore{Store: mem, release: make(chan struct{})}
				var st engine.Store = gate
				if remote {
					st = remoteGateStore{gate}
				}
				cfg := server.DefaultConfig()
				cfg.Secrets, cfg.OperatorToken = []string{admSecret}, admToken
				srv := server.New(engine.New(st), cfg)

				const n = 4
				reqs := make([]wire.Request, n)
				for i := range reqs {
					reqs[i] = incr(admission.DefaultFamily, "", "", "k"+strconv.Itoa(i))
				}
				body := envelopeBody(t, reqs...)
				rec := httptest.NewRecorder()
				done := make(chan struct{})
				go func() {
					srv.ServeHTTP(rec, signedEnvelope(body, body, wire.PathRPCs))
					close(done)
				}()
				synctest.Wait()
				want := 1
				if remote {
					want = n
				}
				if got := gate.holding(); got != want {
					t.Errorf("%d subject batches held at once, want %d", got, want)
				}
				close(gate.release)
				<-done
				var answers wire.EnvelopeResponse
				if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &answers) != nil || len(answers.Answers) != n {
					t.Fatalf("envelope: %d %s", rec.Code, rec.Body)
				}
				for i, a := range answers.Answers {
					if a.Status != http.StatusOK {
						t.Errorf("answer %d: %+v", i, a)
					}
				}
			})
		})
	}
}

// TestEnvelopeAnswersNameTheirOperations checks that each answer of an
// envelope names the operation id of the request it answers, whether it
// ran or was refused, and that one that never decoded names none.
func TestEnvelopeAnswersNameTheirOperations(t *testing.T) {
	h := newAdmHarness(t, func(*admission.Config) {})
	ran, refused := incrWithID("op-ran", "k"), incrWithID("op-refused", "k")
	refused.Family = ""
	good := envelopeBody(t, ran, refused)
	body := append(good[:len(good)-2:len(good)-2], `,{"operationId":"op-undecoded","unknown":1}]}`...)
	rec := httptest.NewRecorder()
	h.srv.ServeHTTP(rec, signedEnvelope(body, body, wire.PathRPCs))
	if rec.Code != http.StatusOK {
		t.Fatalf("envelope: %d %s", rec.Code, rec.Body)
	}
	var resp wire.EnvelopeResponse
	if err := wire.DecodeEnvelopeResponse(rec.Body.Bytes(), &resp); err != nil || len(resp.Answers) != 3 {
		t.Fatalf("answer %s: %v", rec.Body, err)
	}
	for i, want := range []struct {
		status int
		id     string
	}{{http.StatusOK, "op-ran"}, {http.StatusBadRequest, "op-refused"}, {http.StatusBadRequest, ""}} {
		if a := resp.Answers[i]; a.Status != want.status || a.OperationID != want.id {
			t.Errorf("answer %d: status %d, operation %q; want %d, %q", i, a.Status, a.OperationID, want.status, want.id)
		}
	}
}
