package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// referenceDecodeEnvelope is DecodeEnvelope by encoding/json alone, then
// CheckStrict.
func referenceDecodeEnvelope(body []byte) ([]json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	var env Envelope
	if err := dec.Decode(&env); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("data after the object")
	}
	if err := CheckStrict(body, &env); err != nil {
		return nil, err
	}
	if len(env.Requests) == 0 || len(env.Requests) > MaxEnvelope {
		return nil, errors.New("count")
	}
	return env.Requests, nil
}

func checkEnvelopeDecoders(t testing.TB, body []byte) {
	want, wantErr := referenceDecodeEnvelope(body)
	got, err := DecodeEnvelope(body, nil)
	if (err != nil) != (wantErr != nil) {
		t.Fatalf("DecodeEnvelope(%q): error %v, reference error %v", body, err, wantErr)
	}
	if err != nil {
		return
	}
	if len(got) != len(want) {
		t.Fatalf("DecodeEnvelope(%q) = %d requests, reference %d", body, len(got), len(want))
	}
	for i := range got {
		if !bytes.Equal(got[i].Body, want[i]) {
			t.Fatalf("DecodeEnvelope(%q) request %d = %s, reference %s", body, i, got[i].Body, want[i])
		}
		// Each request is what DecodeRequest makes of it alone.
		var alone Request
		aloneErr := DecodeRequest(got[i].Body, &alone)
		if fmt.Sprint(got[i].Err) != fmt.Sprint(aloneErr) {
			t.Fatalf("DecodeEnvelope(%q) request %d: error %v, DecodeRequest's %v", body, i, got[i].Err, aloneErr)
		}
		if !reflect.DeepEqual(got[i].Request, alone) {
			t.Fatalf("DecodeEnvelope(%q) request %d\n= %#v\nDecodeRequest %#v", body, i, got[i].Request, alone)
		}
	}
}

func checkEnvelopeResponseDecoders(t testing.TB, body []byte) {
	var want EnvelopeResponse
	wantErr := json.Unmarshal(body, &want)
	var got EnvelopeResponse
	err := DecodeEnvelopeResponse(body, &got)
	if (err != nil) != (wantErr != nil) {
		t.Fatalf("DecodeEnvelopeResponse(%q): error %v, json.Unmarshal error %v", body, err, wantErr)
	}
	if err == nil && !reflect.DeepEqual(got, want) {
		t.Fatalf("DecodeEnvelopeResponse(%q)\n= %#v\njson.Unmarshal %#v", body, got, want)
	}
	var fast EnvelopeResponse
	s := scanner{data: body}
	if s.envelopeResponse(&fast) && s.end() {
		if wantErr != nil {
			t.Fatalf("the fast path took %q, which json.Unmarshal refuses: %v", body, wantErr)
		}
		if !reflect.DeepEqual(fast, want) {
			t.Fatalf("fast path on %q\n= %#v\njson.Unmarshal %#v", body, fast, want)
		}
	}
}

var envelopeSeeds = []string{
	`{"requests":[` + requestSeeds[0] + `,` + requestSeeds[1] + `]}`,
	` { "requests" : [ {"operationId":"o"} , null, 1, "x", [], {"a":{"b":[1.5e3,true,false,null]}} ] } ` + "\n",
	`{"requests":[]}`, `{"requests":null}`, `{}`, `{"requests":[{}],"requests":[{}]}`, `{"Requests":[{}]}`,
	`{"requests":[{}],"extra":1}`, `{"requests":[{}]} x`, `{"requests":[{]}`, `{"requests":[{}],}`, `[]`, `null`, ``,
	`{"requests":[` + strings.Repeat(`{},`, MaxEnvelope) + `{}]}`, `{"requests":[` + strings.Repeat(`{},`, MaxEnvelope-1) + `{}]}`,
	`{"requests":[` + strings.Repeat(`[`, 40) + strings.Repeat(`]`, 40) + `]}`, "{\"requests\":[\"\xff\"]}",
}

var envelopeResponseSeeds = []string{
	`{"answers":[{"status":200,"response":` + responseSeeds[1] + `},{"status":409,"problem":{"type":"about:blank","title":"Conflict","status":409,"code":"conflict","reason":"operation id reused"}}]}`,
	`{"answers":[{"status":200,"response":{"steps":[]},"new":1}],"more":[1]}`, `{"answers":[{"status":null,"response":null,"problem":null}]}`,
	`{"answers":[{"status":2000}]}`, `{"answers":[{"status":-1}]}`, `{"answers":[{"status":1.5}]}`, `{"answers":[{"Status":200}]}`,
	`{"answers":[{"problem":{"code":null,"reason":"\u00e9\"","extra":{}}}]}`, `{"answers":null}`, `{"answers":[null]}`, `{}`, `null`,
	`{"answers":[{"status":200,"status":201}]}`, `{"answers":[]} x`, `{"answers":[{"response":{"steps":1}}]}`,
}

func FuzzDecodeEnvelope(f *testing.F) {
	for _, s := range envelopeSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) { checkEnvelopeDecoders(t, body) })
}

func FuzzDecodeEnvelopeResponse(f *testing.F) {
	for _, s := range envelopeResponseSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		checkEnvelopeResponseDecoders(t, body)
		var r EnvelopeResponse
		if json.Unmarshal(body, &r) == nil {
			want, _ := json.Marshal(&r)
			if got := appendEnvelopeResponse(&r); !bytes.Equal(got, want) {
				t.Fatalf("AppendAnswer on %#v = %s, json.Marshal %s", r, got, want)
			}
		}
	})
}

// appendEnvelopeResponse writes r as the server does, answer by answer.
func appendEnvelopeResponse(r *EnvelopeResponse) []byte {
	if r.Answers == nil {
		return []byte(`{"answers":null}`)
	}
	b := []byte(`{"answers":[`)
	for i := range r.Answers {
		if i > 0 {
			b = append(b, ',')
		}
		b = AppendAnswer(b, &r.Answers[i])
	}
	return append(b, "]}"...)
}

func TestEnvelopeDecodersOnSeeds(t *testing.T) {
	for _, s := range envelopeSeeds {
		checkEnvelopeDecoders(t, []byte(s))
	}
	for _, s := range envelopeResponseSeeds {
		checkEnvelopeResponseDecoders(t, []byte(s))
	}
}

// TestEnvelopeRoundTrip checks that what a client and a server write takes
// the fast paths and decodes to what was sent.
func TestEnvelopeRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		reqs := rapid.SliceOfN(genRequest(), 1, 4).Draw(t, "requests")
		var bodies [][]byte
		size := 0
		for _, r := range reqs {
			b, err := AppendRequest(nil, r)
			if err != nil {
				t.Fatal(err)
			}
			bodies = append(bodies, b)
			size += len(b)
		}
		env := AppendEnvelope(nil, bodies...)
		if got := EnvelopeSize(len(bodies), size); got != len(env) {
			t.Fatalf("EnvelopeSize = %d, envelope of %d bytes", got, len(env))
		}
		s := scanner{data: env}
		got, ok := s.envelope(nil)
		if !ok || !s.end() {
			t.Fatalf("the fast path leaves %s to encoding/json", env)
		}
		for i := range got {
			if !bytes.Equal(got[i].Body, bodies[i]) {
				t.Fatalf("request %d = %s, sent %s", i, got[i].Body, bodies[i])
			}
			if got[i].Err != nil || !reflect.DeepEqual(&got[i].Request, reqs[i]) {
				t.Fatalf("request %d decoded %#v (error %v)\nsent %#v", i, got[i].Request, got[i].Err, reqs[i])
			}
		}

		var sent EnvelopeResponse
		for range reqs {
			if rapid.Bool().Draw(t, "ok") {
				sent.Answers = append(sent.Answers, Answer{Status: 200, Response: genResponse().Draw(t, "response")})
			} else {
				code := rapid.SampledFrom([]Code{CodeInvalid, CodeConflict, CodeLimited, CodeStopped, CodeTooLarge}).Draw(t, "code")
				p := NewProblem(code, genString().Draw(t, "reason"))
				sent.Answers = append(sent.Answers, Answer{Status: p.Status, Problem: &p})
			}
		}
		answer := appendEnvelopeResponse(&sent)
		want, _ := json.Marshal(&sent)
		if !bytes.Equal(answer, want) {
			t.Fatalf("AppendAnswer = %s\njson.Marshal %s", answer, want)
		}
		var dec EnvelopeResponse
		s = scanner{data: answer}
		if !s.envelopeResponse(&dec) || !s.end() {
			t.Fatalf("the fast path leaves %s to json.Unmarshal", answer)
		}
		if !reflect.DeepEqual(dec, sent) {
			t.Fatalf("decoded %#v\nsent    %#v", dec, sent)
		}
	})
}
