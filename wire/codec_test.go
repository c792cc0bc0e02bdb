package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/engine"
)

// referenceDecodeRequest is the server's decoder before DecodeRequest: strict
// encoding/json, then CheckStrict. DecodeRequest must agree with it on
// every input.
func referenceDecodeRequest(body []byte) (*Request, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	var r Request
	if err := dec.Decode(&r); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("data after the object")
	}
	if err := CheckStrict(body, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// fastRequest runs the fast path alone and reports whether it took the
// body.
func fastRequest(body []byte) (*Request, bool) {
	var r Request
	s := scanner{data: body}
	ok := s.request(&r) && s.end()
	return &r, ok
}

func fastResponse(body []byte) (*Response, bool) {
	var r Response
	s := scanner{data: body}
	ok := s.response(&r) && s.end()
	return &r, ok
}

// checkRequestDecoders checks DecodeRequest and its fast path against the
// reference on body.
func checkRequestDecoders(t testing.TB, body []byte) {
	want, wantErr := referenceDecodeRequest(body)
	var got Request
	err := DecodeRequest(body, &got)
	if (err != nil) != (wantErr != nil) {
		t.Fatalf("DecodeRequest(%q): error %v, reference error %v", body, err, wantErr)
	}
	if err == nil && !reflect.DeepEqual(&got, want) {
		t.Fatalf("DecodeRequest(%q)\n= %#v\nreference %#v", body, got, *want)
	}
	if fast, ok := fastRequest(body); ok {
		if wantErr != nil {
			t.Fatalf("the fast path took %q, which the reference refuses: %v", body, wantErr)
		}
		if !reflect.DeepEqual(fast, want) {
			t.Fatalf("fast path on %q\n= %#v\nreference %#v", body, *fast, *want)
		}
	}
}

func checkResponseDecoders(t testing.TB, body []byte) {
	var want Response
	wantErr := json.Unmarshal(body, &want)
	var got Response
	err := DecodeResponse(body, &got)
	if (err != nil) != (wantErr != nil) {
		t.Fatalf("DecodeResponse(%q): error %v, json.Unmarshal error %v", body, err, wantErr)
	}
	if err == nil && !reflect.DeepEqual(got, want) {
		t.Fatalf("DecodeResponse(%q)\n= %#v\njson.Unmarshal %#v", body, got, want)
	}
	if fast, ok := fastResponse(body); ok {
		if wantErr != nil {
			t.Fatalf("the fast path took %q, which json.Unmarshal refuses: %v", body, wantErr)
		}
		if !reflect.DeepEqual(*fast, want) {
			t.Fatalf("fast path on %q\n= %#v\njson.Unmarshal %#v", body, *fast, want)
		}
	}
}

var requestSeeds = []string{
	`{"operationId":"7c0e1f4d2a9b4c3e8f6a5b4c3d2e1f00","family":"api","steps":[{"partition":"user:42","commands":[{"op":"win.hit","windows":[{"key":"per-minute","kind":"sliding","limit":100,"windowMs":60000}],"cost":1}]}]}`,
	`{"operationId":"o","family":"f","source":"3f2a","principal":"9c41","sourceTiers":{"v6/48":"b07c","v6/56":"8d1e"},"mode":"all","steps":[{"partition":"p","commands":[{"op":"res.reserve","budgets":[{"key":"a","limit":20,"windowMs":900000},{"key":"b","limit":5,"windowMs":900000,"refundable":true}],"receipt":"r","cost":1}]}]}`,
	`{"operationId":"o","family":"f","steps":[{"partition":"p","commands":[{"op":"kv.set","key":"k","value":"a \"quoted\" \u00e9\\n\u2028 <b>&amp;","mode":"nx","keepTtl":true,"ttlMs":1000},{"op":"kv.incr","key":"n","delta":-9223372036854775808,"ttlMs":1000}]}]}`,
	`{"operationId":"o","family":"f","steps":[{"partition":"p","commands":[{"op":"pace.claim","key":"up","limit":5,"windowMs":1000,"refillPermille":0,"maxWaitMs":5000,"at":1767225602000,"cost":2},{"op":"gate.acquire","key":"g","lease":"w1","limit":1,"ttlMs":30000},{"op":"pace.penalize","key":"up","limit":5,"windowMs":1000,"delayMs":2000}]}]}`,
	` { "operationId" : "o" , "family":"f", "steps" : [ ] } ` + "\n",
	`{}`, `{"steps":[{}]}`, `{"steps":[{"commands":[{}]}]}`, `{"sourceTiers":{}}`,
	// What the fast path leaves to encoding/json, which accepts or refuses.
	`{"OperationID":"o"}`, `{"operationid":"o"}`, `{"\u006fperationId":"o"}`, `{"operationId":"o","operationId":"p"}`,
	`{"operationId":null}`, `{"steps":null}`, `{"steps":[{"commands":null}]}`, `{"sourceTiers":{"a":"1","a":"2"}}`,
	`{"operationId":"\ud83d\ude00"}`, `{"operationId":"\ud800"}`, "{\"operationId\":\"\xff\"}", "{\"family\":\"a\xc3\"}",
	`{"steps":[{"commands":[{"cost":1.0}]}]}`, `{"steps":[{"commands":[{"cost":1e3}]}]}`, `{"steps":[{"commands":[{"cost":01}]}]}`,
	`{"steps":[{"commands":[{"cost":9223372036854775808}]}]}`, `{"steps":[{"commands":[{"cost":-9223372036854775809}]}]}`,
	`{"steps":[{"commands":[{"cost":-0}]}]}`, `{"steps":[{"commands":[{"cost":"1"}]}]}`, `{"steps":[{"commands":[{"keepTtl":1}]}]}`,
	`{"steps":[{"commands":[{"windows":[{"kind":"hourly"}]}]}]}`, `{"steps":[{"commands":[{"windows":[{"kind":1}]}]}]}`,
	`{"steps":[{"commands":[{"op":"win.hit","extra":1}]}]}`, `{"unknown":1}`, `{"operationId":"o"} {}`, `{"operationId":"o"}x`,
	`{"operationId":"o",}`, `{"operationId":"o"`, `[]`, `null`, ``, `{"steps":[{"partition":"a"},]}`, "{\"family\":\"a\tb\"}",
}

var responseSeeds = []string{
	`{"steps":[{"results":[{"allowed":true,"remaining":999999,"resetAt":1700000000000,"windows":[{"allowed":true,"remaining":999999,"resetAt":1700000000000}]}]}]}` + "\n",
	`{"steps":[{"results":[{"allowed":true,"remaining":0},{"allowed":true,"int":1,"remaining":0}]},{"denied":true,"results":[{"allowed":false,"found":true,"remaining":0}]},{"skipped":true,"results":null}]}`,
	`{"steps":[{"replayed":true,"results":[{"allowed":true,"found":true,"value":"a \"q\" \u003c\u2028","ttlMs":5,"remaining":0,"retryAfterMs":3,"at":9}]}]}`,
	`{"steps":[{"results":[{"allowed":true,"remaining":1,"future":{"a":[1,2.5e-3,true,null,"x\u0041"]}}],"alsoNew":[]}],"new":"field"}`,
	`{"steps":[{"results":[{"Allowed":true,"remaining":1}]}]}`, `{"steps":[{"results":[{"allowed":null,"remaining":null}]}]}`,
	`{"steps":null}`, `{"steps":[]}`, `{}`, `null`, `{"steps":[{"results":[null]}]}`, `{"steps":[{"results":[{"int":1.5}]}]}`,
	`{"steps":[{"results":[{"x":01}]}]}`, `{"steps":[{"results":[{"x":"\q"}]}]}`, "{\"steps\":[{\"results\":[{\"x\":\"\xff\"}]}]}",
	`{"steps":[]} x`, `{"steps":[{"results":[{"remaining":1,"remaining":2}]}]}`, "{\"st\u212Aeps\":1}",
}

func FuzzDecodeRequest(f *testing.F) {
	for _, s := range requestSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) { checkRequestDecoders(t, body) })
}

func FuzzDecodeResponse(f *testing.F) {
	for _, s := range responseSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) { checkResponseDecoders(t, body) })
}

// FuzzAppend checks the encoders against json.Marshal on every request and
// answer json.Unmarshal makes of the input, and appendString on the raw
// input as a string.
func FuzzAppend(f *testing.F) {
	for _, s := range requestSeeds {
		f.Add([]byte(s))
	}
	for _, s := range responseSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		want, _ := json.Marshal(string(data))
		if got := appendString(nil, string(data)); !bytes.Equal(got, want) {
			t.Fatalf("appendString(%q) = %s, json.Marshal %s", data, got, want)
		}
		var req Request
		if json.Unmarshal(data, &req) == nil {
			want, wantErr := json.Marshal(&req)
			got, err := AppendRequest(nil, &req)
			if (err != nil) != (wantErr != nil) || !bytes.Equal(got, want) {
				t.Fatalf("AppendRequest(%#v) = %s, %v; json.Marshal %s, %v", req, got, err, want, wantErr)
			}
		}
		var resp Response
		if json.Unmarshal(data, &resp) == nil {
			want, _ := json.Marshal(&resp)
			if got := AppendResponse(nil, &resp); !bytes.Equal(got, want) {
				t.Fatalf("AppendResponse(%#v) = %s, json.Marshal %s", resp, got, want)
			}
		}
	})
}

func TestDecodersOnSeeds(t *testing.T) {
	for _, s := range requestSeeds {
		checkRequestDecoders(t, []byte(s))
	}
	for _, s := range responseSeeds {
		checkResponseDecoders(t, []byte(s))
	}
}

// TestFastPathsTakeWhatSluiceWrites checks that what the encoders write —
// every request a client sends and every answer a server gives — takes the
// fast paths, so they are what runs, not encoding/json.
func TestFastPathsTakeWhatSluiceWrites(t *testing.T) {
	for _, s := range requestSeeds[:5] {
		if _, ok := fastRequest([]byte(s)); !ok {
			t.Errorf("the fast path leaves %s to encoding/json", s)
		}
	}
	for _, s := range responseSeeds[:4] {
		if _, ok := fastResponse([]byte(s)); !ok {
			t.Errorf("the fast path leaves %s to encoding/json", s)
		}
	}
	rapid.Check(t, func(t *rapid.T) {
		req := genRequest().Draw(t, "request")
		body, err := AppendRequest(nil, req)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := json.Marshal(req)
		if !bytes.Equal(body, want) {
			t.Fatalf("AppendRequest = %s\njson.Marshal  %s", body, want)
		}
		got, ok := fastRequest(body)
		if !ok {
			t.Fatalf("the fast path leaves %s to encoding/json", body)
		}
		if !reflect.DeepEqual(got, req) {
			t.Fatalf("decoded %#v\nsent    %#v", got, req)
		}

		resp := genResponse().Draw(t, "response")
		answer := AppendResponse(nil, resp)
		want, _ = json.Marshal(resp)
		if !bytes.Equal(answer, want) {
			t.Fatalf("AppendResponse = %s\njson.Marshal   %s", answer, want)
		}
		gotResp, ok := fastResponse(answer)
		if !ok {
			t.Fatalf("the fast path leaves %s to json.Unmarshal", answer)
		}
		if !reflect.DeepEqual(gotResp, resp) {
			t.Fatalf("decoded %#v\nsent    %#v", gotResp, resp)
		}
	})
}

// genString draws valid UTF-8 that needs every kind of escape.
func genString() *rapid.Generator[string] {
	return rapid.OneOf(
		rapid.StringMatching(`[a-z0-9:._-]{1,12}`),
		rapid.StringOf(rapid.SampledFrom([]rune("aZ09 \"\\/<>&\b\f\n\r\t\x00\x1f\x7f\u00e9\u2028\u2029\U0001F600\ufffd"))),
	)
}

func genInt() *rapid.Generator[int64] {
	return rapid.OneOf(rapid.Int64(), rapid.Int64Range(-3, 3))
}

func genRequest() *rapid.Generator[*Request] {
	return rapid.Custom(func(t *rapid.T) *Request {
		r := &Request{
			OperationID: genString().Draw(t, "operationId"),
			Family:      genString().Draw(t, "family"),
			Mode:        rapid.SampledFrom([]engine.Mode{"", engine.Sequential, engine.All, "other"}).Draw(t, "mode"),
		}
		if rapid.Bool().Draw(t, "identities") {
			r.Source, r.Principal = genString().Draw(t, "source"), genString().Draw(t, "principal")
			// Tier names need no escapes: the fast path leaves a key with
			// escapes to encoding/json.
			r.SourceTiers = rapid.MapOf(rapid.StringMatching(`v[0-9a-z/]{1,6}`), genString()).Draw(t, "tiers")
			if len(r.SourceTiers) == 0 {
				r.SourceTiers = nil
			}
		}
		r.Steps = rapid.SliceOfN(rapid.Custom(func(t *rapid.T) engine.Step {
			return engine.Step{
				Partition: genString().Draw(t, "partition"),
				Commands:  rapid.SliceOfN(genCommand(), 1, 8).Draw(t, "commands"),
			}
		}), 1, 4).Draw(t, "steps")
		return r
	})
}

func genCommand() *rapid.Generator[engine.Command] {
	return rapid.Custom(func(t *rapid.T) engine.Command {
		c := engine.Command{Op: rapid.SampledFrom(append(ops[:], "x.unknown")).Draw(t, "op")}
		opt := func(name string) bool { return rapid.Bool().Draw(t, name) }
		if opt("key?") {
			c.Key = genString().Draw(t, "key")
		}
		if opt("windows?") {
			c.Windows = rapid.SliceOfN(rapid.Custom(func(t *rapid.T) engine.Window {
				return engine.Window{Key: genString().Draw(t, "key"), Kind: rapid.SampledFrom(kinds[:]).Draw(t, "kind"), Limit: genInt().Draw(t, "limit"), WindowMs: genInt().Draw(t, "windowMs")}
			}), 1, 4).Draw(t, "windows")
		}
		if opt("budgets?") {
			c.Budgets = rapid.SliceOfN(rapid.Custom(func(t *rapid.T) engine.Budget {
				return engine.Budget{Key: genString().Draw(t, "key"), Limit: genInt().Draw(t, "limit"), WindowMs: genInt().Draw(t, "windowMs"), Refundable: rapid.Bool().Draw(t, "refundable")}
			}), 1, 4).Draw(t, "budgets")
		}
		if opt("strings?") {
			c.Receipt, c.Value, c.Lease = genString().Draw(t, "receipt"), genString().Draw(t, "value"), genString().Draw(t, "lease")
			c.Mode = rapid.SampledFrom([]engine.SetMode{engine.SetAlways, engine.SetNX, engine.SetXX, "always"}).Draw(t, "mode")
			c.KeepTTL = rapid.Bool().Draw(t, "keepTtl")
		}
		if opt("numbers?") {
			c.Cost, c.TTLMs, c.Delta, c.Limit = genInt().Draw(t, "cost"), genInt().Draw(t, "ttl"), genInt().Draw(t, "delta"), genInt().Draw(t, "limit")
			c.WindowMs, c.MaxWaitMs, c.At, c.DelayMs = genInt().Draw(t, "windowMs"), genInt().Draw(t, "maxWait"), genInt().Draw(t, "at"), genInt().Draw(t, "delay")
		}
		if opt("refill?") {
			v := genInt().Draw(t, "refill")
			c.RefillPermille = &v
		}
		return c
	})
}

func genResponse() *rapid.Generator[*Response] {
	return rapid.Custom(func(t *rapid.T) *Response {
		steps := rapid.SliceOfN(rapid.Custom(func(t *rapid.T) engine.StepResult {
			st := engine.StepResult{Skipped: rapid.Bool().Draw(t, "skipped")}
			if st.Skipped {
				return st
			}
			st.Replayed, st.Denied = rapid.Bool().Draw(t, "replayed"), rapid.Bool().Draw(t, "denied")
			st.Results = rapid.SliceOfN(rapid.Custom(func(t *rapid.T) engine.Result {
				r := engine.Result{
					Allowed: rapid.Bool().Draw(t, "allowed"), Found: rapid.Bool().Draw(t, "found"),
					Int: genInt().Draw(t, "int"), TTLMs: genInt().Draw(t, "ttl"), Remaining: genInt().Draw(t, "remaining"),
					ResetAt: genInt().Draw(t, "resetAt"), RetryAfterMs: genInt().Draw(t, "retryAfter"), At: genInt().Draw(t, "at"),
				}
				if rapid.Bool().Draw(t, "value?") {
					r.Value = genString().Draw(t, "value")
				}
				if rapid.Bool().Draw(t, "windows?") {
					r.Windows = rapid.SliceOfN(rapid.Custom(func(t *rapid.T) engine.WindowResult {
						return engine.WindowResult{Allowed: rapid.Bool().Draw(t, "allowed"), Remaining: genInt().Draw(t, "remaining"), ResetAt: genInt().Draw(t, "resetAt"), RetryAfterMs: genInt().Draw(t, "retryAfter")}
					}), 1, 4).Draw(t, "windows")
				}
				return r
			}), 1, 8).Draw(t, "results")
			return st
		}), 1, 16).Draw(t, "steps")
		return &Response{Steps: steps}
	})
}

// TestAppendRequestRefusesAnUnnamedKind checks that an invalid window kind
// fails the encoding, as it fails json.Marshal.
func TestAppendRequestRefusesAnUnnamedKind(t *testing.T) {
	r := &Request{Steps: []engine.Step{{Partition: "p", Commands: []engine.Command{engine.Hit(1, engine.Window{Key: "w", Kind: algo.Kind(0), Limit: 1, WindowMs: 1})}}}}
	if _, err := json.Marshal(r); err == nil {
		t.Fatal("json.Marshal accepted kind 0")
	}
	if b, err := AppendRequest(nil, r); err == nil {
		t.Fatalf("AppendRequest accepted kind 0: %s", b)
	}
}

// TestDecodeRequestErrors checks the server's reasons for a malformed body.
func TestDecodeRequestErrors(t *testing.T) {
	for body, want := range map[string]string{
		`{"operationId":"o"} {}`: "malformed JSON: data after the request object",
		`{"unknown":1}`:          `malformed JSON: json: unknown field "unknown"`,
		`{"operationId":`:        "malformed JSON: unexpected EOF",
	} {
		var r Request
		if err := DecodeRequest([]byte(body), &r); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("DecodeRequest(%s) = %v, want %q", body, err, want)
		}
	}
}

// TestFastPathsKnowEveryField sets each field of every message type in
// turn, found by reflection, and checks that the fast paths decode the
// result: a field added to a message later and not to its fast path fails
// here (it would still decode, slowly, through encoding/json).
func TestFastPathsKnowEveryField(t *testing.T) {
	check := func(t *testing.T, name string, v any, fast func([]byte) (any, bool)) {
		body, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := fast(body)
		if !ok {
			t.Errorf("%s: the fast path leaves %s to encoding/json", name, body)
			return
		}
		if !reflect.DeepEqual(got, v) {
			t.Errorf("%s: decoded %#v, want %#v", name, got, v)
		}
	}
	fastReq := func(b []byte) (any, bool) { r, ok := fastRequest(b); return r, ok }
	fastResp := func(b []byte) (any, bool) { r, ok := fastResponse(b); return r, ok }

	base := func() *Request {
		return &Request{OperationID: "o", Family: "f", Steps: []engine.Step{{Partition: "p", Commands: []engine.Command{{Op: engine.OpHit}}}}}
	}
	for _, target := range []struct {
		name string
		get  func(*Request) reflect.Value
	}{
		{"Request", func(r *Request) reflect.Value { return reflect.ValueOf(r).Elem() }},
		{"Step", func(r *Request) reflect.Value { return reflect.ValueOf(&r.Steps[0]).Elem() }},
		{"Command", func(r *Request) reflect.Value { return reflect.ValueOf(&r.Steps[0].Commands[0]).Elem() }},
	} {
		typ := target.get(base()).Type()
		for i := range typ.NumField() {
			r := base()
			setField(target.get(r).Field(i))
			check(t, target.name+"."+typ.Field(i).Name, r, fastReq)
		}
	}

	baseResp := func() *Response {
		return &Response{Steps: []engine.StepResult{{Results: []engine.Result{{Windows: []engine.WindowResult{{}}}}}}}
	}
	for _, target := range []struct {
		name string
		get  func(*Response) reflect.Value
	}{
		{"StepResult", func(r *Response) reflect.Value { return reflect.ValueOf(&r.Steps[0]).Elem() }},
		{"Result", func(r *Response) reflect.Value { return reflect.ValueOf(&r.Steps[0].Results[0]).Elem() }},
		{"WindowResult", func(r *Response) reflect.Value { return reflect.ValueOf(&r.Steps[0].Results[0].Windows[0]).Elem() }},
	} {
		typ := target.get(baseResp()).Type()
		for i := range typ.NumField() {
			r := baseResp()
			setField(target.get(r).Field(i))
			check(t, target.name+"."+typ.Field(i).Name, r, fastResp)
		}
	}
}

// setField sets v to a non-zero value of its type; a list gets one element
// with every field set.
func setField(v reflect.Value) {
	switch v.Kind() {
	case reflect.String:
		v.SetString("x")
	case reflect.Int64:
		v.SetInt(7)
	case reflect.Uint8: // algo.Kind
		v.SetUint(uint64(algo.KindGCRA))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		setField(v.Elem())
	case reflect.Map:
		v.Set(reflect.ValueOf(map[string]string{TierV4Slash24: "x"}))
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		setField(v.Index(0))
	case reflect.Struct:
		for i := range v.NumField() {
			setField(v.Field(i))
		}
	default:
		panic("setField: no value for " + v.Type().String())
	}
}
