package server_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/wire"
)

// rawRPC sends body, signed, to /v1/rpc.
func (h *admHarness) rawRPC(body string) *httptest.ResponseRecorder {
	h.t.Helper()
	req := httptest.NewRequest(http.MethodPost, wire.PathRPC, bytes.NewReader([]byte(body)))
	ts := time.Now().Unix()
	req.Header.Set(wire.HeaderTimestamp, strconv.FormatInt(ts, 10))
	req.Header.Set(wire.HeaderSignature, wire.Sign([]byte(admSecret), ts, http.MethodPost, wire.PathRPC, []byte(body)))
	rec := httptest.NewRecorder()
	h.srv.ServeHTTP(rec, req)
	return rec
}

// TestRPCMemberNamesAndStringsAreExact sends bodies that encoding/json
// would decode by bending them — a member named in another case, a member
// given twice, strings that are not UTF-8 or escape half a surrogate pair
// — and checks each is answered 400 invalid with no subject batch run.
func TestRPCMemberNamesAndStringsAreExact(t *testing.T) {
	h := newAdmHarness(t, func(*admission.Config) {})
	const steps = `"steps":[{"partition":"p","commands":[{"op":"kv.incr","key":"n","delta":1,"ttlMs":60000}]}]`
	for name, body := range map[string]string{
		"operationId in capitals":   `{"OPERATIONID":"a1","family":"default",` + steps + `}`,
		"partition in capitals":     `{"operationId":"a2","family":"default","steps":[{"Partition":"p","commands":[{"op":"kv.incr","key":"n","delta":1,"ttlMs":60000}]}]}`,
		"delta in another case":     `{"operationId":"a3","family":"default","steps":[{"partition":"p","commands":[{"op":"kv.incr","key":"n","Delta":1,"ttlMs":60000}]}]}`,
		"family twice":              `{"operationId":"a4","family":"nosuch","family":"default",` + steps + `}`,
		"delta twice":               `{"operationId":"a5","family":"default","steps":[{"partition":"p","commands":[{"op":"kv.incr","key":"n","delta":1000,"delta":1,"ttlMs":60000}]}]}`,
		"tier twice":                `{"operationId":"a6","family":"default","source":"s","sourceTiers":{"v4/24":"x","v4/24":"y"},` + steps + `}`,
		"operation id not UTF-8":    "{\"operationId\":\"a7\xff\",\"family\":\"default\"," + steps + "}",
		"partition not UTF-8":       "{\"operationId\":\"a8\",\"family\":\"default\",\"steps\":[{\"partition\":\"p\xfe\",\"commands\":[{\"op\":\"kv.incr\",\"key\":\"n\",\"delta\":1,\"ttlMs\":60000}]}]}",
		"key a lone high surrogate": `{"operationId":"a9","family":"default","steps":[{"partition":"p","commands":[{"op":"kv.incr","key":"n\ud800","delta":1,"ttlMs":60000}]}]}`,
		"key a lone low surrogate":  `{"operationId":"a10","family":"default","steps":[{"partition":"p","commands":[{"op":"kv.incr","key":"n\udc00","delta":1,"ttlMs":60000}]}]}`,
	} {
		rec := h.rawRPC(body)
		if c := code(t, rec); c != wire.CodeInvalid {
			t.Errorf("%s: %d %s, want 400 invalid", name, rec.Code, rec.Body)
		}
	}
	if n := h.store.subject.Load(); n != 0 {
		t.Errorf("refused bodies ran %d subject batches", n)
	}
	// What JSON allows in other spellings is taken as it means.
	for name, body := range map[string]string{
		"escaped member name": `{"\u006fperationId":"b1","family":"default",` + steps + `}`,
		"surrogate pair":      `{"operationId":"b2\ud83d\ude00","family":"default",` + steps + `}`,
		"null optional":       `{"operationId":"b3","family":"default","sourceTiers":null,"mode":null,` + steps + `}`,
	} {
		if rec := h.rawRPC(body); rec.Code != http.StatusOK {
			t.Errorf("%s: %d %s, want 200", name, rec.Code, rec.Body)
		}
	}
}

// TestRPCInvalidUTF8OperationIDsDoNotCollide sends two requests whose
// operation ids differ only in bytes that are not UTF-8, with other
// commands: neither may be taken for a replay of the other.
func TestRPCInvalidUTF8OperationIDsDoNotCollide(t *testing.T) {
	h := newAdmHarness(t, func(*admission.Config) {})
	body := func(id, delta string) string {
		return "{\"operationId\":\"" + id + "\",\"family\":\"default\",\"steps\":[{\"partition\":\"p\",\"commands\":[{\"op\":\"kv.incr\",\"key\":\"n\",\"delta\":" + delta + ",\"ttlMs\":60000}]}]}"
	}
	first, second := h.rawRPC(body("op\xff", "1")), h.rawRPC(body("op\xfe", "2"))
	for i, rec := range []*httptest.ResponseRecorder{first, second} {
		if c := code(t, rec); c != wire.CodeInvalid {
			t.Errorf("request %d: %d %s, want 400 invalid", i, rec.Code, rec.Body)
		}
	}
}

// TestEnvelopeMemberNamesAreExact sends envelopes whose own member is
// named in another case or given twice: 400 invalid, nothing run.
func TestEnvelopeMemberNamesAreExact(t *testing.T) {
	h := newAdmHarness(t, func(*admission.Config) {})
	one := envelopeBody(t, incr(admission.DefaultFamily, "", "", "k"))
	inner := one[len(`{"requests":[`) : len(one)-len(`]}`)]
	for name, body := range map[string][]byte{
		"Requests":       append(append([]byte(`{"Requests":[`), inner...), `]}`...),
		"requests twice": append(append([]byte(`{"requests":[{}],"requests":[`), inner...), `]}`...),
	} {
		rec := httptest.NewRecorder()
		h.srv.ServeHTTP(rec, signedEnvelope(body, body, wire.PathRPCs))
		if c := code(t, rec); c != wire.CodeInvalid {
			t.Errorf("%s: %d %s, want 400 invalid", name, rec.Code, rec.Body)
		}
	}
	if n := h.store.subject.Load(); n != 0 {
		t.Errorf("refused envelopes ran %d subject batches", n)
	}
}
