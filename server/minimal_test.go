package server_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/wire"
)

// minimalRequest is a request whose answer has every kind of result the
// minimal form treats apart: hits and a reserve of one window or budget
// (their lists left out), a hit of two windows (kept) and a counter
// (none); the first hit's limit of 1 denies it from the second run on.
func minimalRequest(id string) wire.Request {
	w := func(key string, limit int64) engine.Window {
		return engine.Window{Key: key, Kind: algo.KindSliding, Limit: limit, WindowMs: 60_000}
	}
	return wire.Request{OperationID: id, Family: admission.DefaultFamily, Mode: engine.All, Steps: []engine.Step{{
		Partition: "p",
		Commands: []engine.Command{
			engine.Hit(1, w("one", 1)),
			engine.Hit(1, w("two-a", 5), w("two-b", 10)),
			engine.Reserve("receipt-"+id, 2, engine.Budget{Key: "budget", Limit: 100, WindowMs: 60_000, Refundable: true}),
			engine.Incr("n", 1, 60_000),
		},
	}}}
}

// send posts body to path, signed, with a Prefer header of prefer unless
// it is empty, and returns the answer.
func (h *admHarness) send(path string, body []byte, prefer string) *httptest.ResponseRecorder {
	h.t.Helper()
	req := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
	ts := time.Now().Unix()
	req.Header.Set(wire.HeaderTimestamp, strconv.FormatInt(ts, 10))
	req.Header.Set(wire.HeaderSignature, wire.Sign([]byte(admSecret), ts, http.MethodPost, path, body))
	if prefer != "" {
		req.Header.Set(wire.HeaderPrefer, prefer)
	}
	rec := httptest.NewRecorder()
	h.srv.ServeHTTP(rec, req)
	return rec
}

// sendOK is send, failing unless the answer is a 200.
func (h *admHarness) sendOK(path string, body []byte, prefer string) *httptest.ResponseRecorder {
	h.t.Helper()
	rec := h.send(path, body, prefer)
	if rec.Code != http.StatusOK {
		h.t.Fatalf("%s: %d %s", path, rec.Code, rec.Body)
	}
	return rec
}

// TestMinimalAnswers sends each request twice under one operation id, first
// in full and then, replayed, asking for a minimal answer: the second says
// Preference-Applied, leaves out exactly the one-window lists, and restores
// (engine.Response.RestoreWindows) to the first — on /v1/rpc and in an
// envelope, for an allowed and a denied hit.
func TestMinimalAnswers(t *testing.T) {
	for _, path := range []string{wire.PathRPC, wire.PathRPCs} {
		h := newAdmHarness(t, func(*admission.Config) {})
		for _, run := range []string{"allowed", "denied"} {
			t.Run(path+"/"+run, func(t *testing.T) {
				h.t = t
				req := minimalRequest(engine.NewOperationID())
				body, err := json.Marshal(req)
				if err != nil {
					t.Fatal(err)
				}
				if path == wire.PathRPCs {
					body = wire.AppendEnvelope(nil, body)
				}
				decode := func(rec *httptest.ResponseRecorder) *engine.Response {
					t.Helper()
					if path == wire.PathRPC {
						var r engine.Response
						if err := json.Unmarshal(rec.Body.Bytes(), &r); err != nil {
							t.Fatal(err)
						}
						return &r
					}
					var e wire.EnvelopeResponse
					if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || len(e.Answers) != 1 || e.Answers[0].Response == nil {
						t.Fatalf("envelope answer %s: %v", rec.Body, err)
					}
					return e.Answers[0].Response
				}

				full := h.sendOK(path, body, "")
				if v := full.Header().Values(wire.HeaderPreferenceApplied); v != nil {
					t.Errorf("a full answer says Preference-Applied: %q", v)
				}
				want := decode(full)
				if got := want.Steps[0].Results[0].Allowed; got != (run == "allowed") {
					t.Fatalf("the limit-1 hit allowed %v on the %s run", got, run)
				}

				minimal := h.sendOK(path, body, "wait=1, return=minimal")
				if v := minimal.Header().Values(wire.HeaderPreferenceApplied); len(v) != 1 || v[0] != wire.PreferMinimal {
					t.Errorf("Preference-Applied %q, want %q", v, wire.PreferMinimal)
				}
				if n := strings.Count(minimal.Body.String(), `"windows"`); n != 1 {
					t.Errorf("the minimal answer holds %d window lists, want the two-window hit's: %s", n, minimal.Body)
				}
				if len(minimal.Body.Bytes()) >= len(full.Body.Bytes()) {
					t.Errorf("the minimal answer is %d bytes, the full one %d", minimal.Body.Len(), full.Body.Len())
				}
				got := decode(minimal)
				if !got.Steps[0].Replayed {
					t.Fatalf("the second answer was not replayed: %s", minimal.Body)
				}
				got.Steps[0].Replayed = false
				got.RestoreWindows(req.Steps)
				g, _ := json.Marshal(got)
				w, _ := json.Marshal(want)
				if !bytes.Equal(g, w) {
					t.Errorf("restored %s\nwant     %s", g, w)
				}
			})
		}
	}
}

// TestMinimalAnswersOnlyForA200 asks for a minimal answer to a request the
// server refuses: a problem has no minimal form, and says nothing of one.
func TestMinimalAnswersOnlyForA200(t *testing.T) {
	h := newAdmHarness(t, func(*admission.Config) {})
	body, _ := json.Marshal(wire.Request{OperationID: engine.NewOperationID(), Steps: minimalRequest("x").Steps}) // no family
	rec := h.send(wire.PathRPC, body, wire.PreferMinimal)
	if code(t, rec) != wire.CodeInvalid {
		t.Fatalf("%d %s, want 400 invalid", rec.Code, rec.Body)
	}
	if v := rec.Header().Values(wire.HeaderPreferenceApplied); v != nil {
		t.Errorf("a problem says Preference-Applied: %q", v)
	}
}
