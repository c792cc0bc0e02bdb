package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// PathRPCs is the envelope endpoint: several whole RPC requests in one
// signed body, each run and answered as if it had come alone to PathRPC.
const PathRPCs = "/v1/rpcs"

// FeatureRPCs is reported in Ping.Features by a server serving PathRPCs.
const FeatureRPCs = "rpcs"

// Bounds of an envelope. Each request in it keeps every bound of a request
// sent alone, MaxBody included.
const (
	// MaxEnvelope is the most requests one envelope carries.
	MaxEnvelope = 32
	// MaxEnvelopeBody is the largest envelope body accepted, in bytes.
	MaxEnvelopeBody = 48 << 10
)

// Envelope is the body of POST /v1/rpcs: {"requests":[…]}, each element
// the body of a request to POST /v1/rpc.
type Envelope struct {
	Requests []json.RawMessage `json:"requests"`
}

// EnvelopeResponse is the body of a 200 answer to POST /v1/rpcs: one Answer
// per request, in the envelope's order.
type EnvelopeResponse struct {
	Answers []Answer `json:"answers"`
}

// Answer is what POST /v1/rpc would have answered one request of an
// envelope: its HTTP status, and the Response of a 200 or the Problem of
// any other status.
type Answer struct {
	Status int `json:"status"`
	// OperationID is the operation id of the request answered, when it
	// decoded far enough to have one; a client checks that each answer is
	// its own request's. Servers older than the field leave it out.
	OperationID string    `json:"operationId,omitempty"`
	Response    *Response `json:"response,omitempty"`
	Problem     *Problem  `json:"problem,omitempty"`
}

// AppendEnvelope appends the envelope of bodies, each the encoded body of
// one request (see AppendRequest), to dst.
func AppendEnvelope(dst []byte, bodies ...[]byte) []byte {
	dst = append(dst, `{"requests":[`...)
	for i, b := range bodies {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, b...)
	}
	return append(dst, "]}"...)
}

// EnvelopeSize returns the length of the envelope of n request bodies
// totalling size bytes.
func EnvelopeSize(n, size int) int { return len(`{"requests":[]}`) + size + max(n-1, 0) }

// EnvelopeRequest is one request of an envelope, as DecodeEnvelope reads
// it: its bytes, and what DecodeRequest makes of them.
type EnvelopeRequest struct {
	// Body is the request's JSON; it aliases the envelope's body.
	Body []byte
	// Request is Body decoded if Err is nil. Request and Err are what
	// DecodeRequest(Body) returns, whichever way they were reached.
	Request Request
	Err     error
}

// DecodeEnvelope decodes an envelope body strictly, as DecodeRequest does a
// request, and appends each of its requests to dst, decoded on its own: a
// request that does not decode has its Err, and leaves the others whole.
// DecodeEnvelope checks the envelope's own bounds (1 … MaxEnvelope
// requests) but not its requests', not even MaxBody. Each request is
// decoded in the same pass that finds where it ends, the way Sluice's
// client writes envelopes; any other request (or envelope) is delimited
// first and decoded after, with the same results.
func DecodeEnvelope(body []byte, dst []EnvelopeRequest) ([]EnvelopeRequest, error) {
	start := len(dst)
	s := scanner{data: body}
	var ok bool
	if dst, ok = s.envelope(dst); !ok || !s.end() {
		var env Envelope
		dst = dst[:start]
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&env); err != nil {
			return dst, fmt.Errorf("malformed JSON: %w", err)
		}
		if _, err := dec.Token(); err != io.EOF {
			return dst, errors.New("malformed JSON: data after the envelope object")
		}
		if err := CheckStrict(body, &env); err != nil {
			return dst, fmt.Errorf("malformed JSON: %w", err)
		}
		if err := envelopeCount(len(env.Requests)); err != nil {
			return dst, err
		}
		for _, r := range env.Requests {
			dst = append(dst, EnvelopeRequest{Body: r})
			last := &dst[len(dst)-1]
			last.Err = DecodeRequest(r, &last.Request)
		}
	}
	return dst, envelopeCount(len(dst) - start)
}

// envelopeCount checks the number of requests in an envelope.
func envelopeCount(n int) error {
	if n == 0 || n > MaxEnvelope {
		return fmt.Errorf("envelope of %d requests (want 1…%d)", n, MaxEnvelope)
	}
	return nil
}

// envelope reads {"requests":[…]}, decoding each element as a request
// where the fast path takes it and otherwise delimiting it by its syntax
// and decoding it alone.
func (s *scanner) envelope(dst []EnvelopeRequest) ([]EnvelopeRequest, bool) {
	if !s.next('{') {
		return dst, false
	}
	k, ok := s.key()
	if !ok || string(k) != "requests" || !s.next('[') {
		return dst, false
	}
	if !s.next(']') {
		for {
			s.ws()
			dst = append(dst, EnvelopeRequest{})
			r := &dst[len(dst)-1]
			start := s.pos
			// What the fast path takes here it takes in DecodeRequest of
			// the element alone: the element starts with no whitespace and
			// ends at its closing brace.
			if !s.request(&r.Request) {
				r.Request = Request{}
				s.pos = start
				if !s.skip(0) {
					return dst, false
				}
				r.Err = DecodeRequest(s.data[start:s.pos], &r.Request)
			}
			r.Body = s.data[start:s.pos]
			s.prevRequest = len(r.Body)
			more, ok := s.more(']')
			if !ok {
				return dst, false
			}
			if !more {
				break
			}
		}
	}
	return dst, s.next('}')
}

// AppendAnswer appends the JSON of a, as json.Marshal writes it, to dst.
func AppendAnswer(dst []byte, a *Answer) []byte { return appendAnswer(dst, a, false) }

func appendAnswer(dst []byte, a *Answer, minimal bool) []byte {
	dst = append(dst, `{"status":`...)
	dst = strconv.AppendInt(dst, int64(a.Status), 10)
	dst = appendStringField(dst, `,"operationId":`, a.OperationID)
	if a.Response != nil {
		dst = append(dst, `,"response":`...)
		if minimal {
			dst = a.Response.AppendMinimalJSON(dst)
		} else {
			dst = a.Response.AppendJSON(dst)
		}
	}
	if a.Problem != nil {
		dst = append(dst, `,"problem":`...)
		dst = AppendProblem(dst, a.Problem)
	}
	return append(dst, '}')
}

// AppendProblem appends the JSON of p, as json.Marshal writes it, to dst.
func AppendProblem(dst []byte, p *Problem) []byte {
	dst = append(dst, `{"type":`...)
	dst = appendString(dst, p.Type)
	dst = append(dst, `,"title":`...)
	dst = appendString(dst, p.Title)
	dst = append(dst, `,"status":`...)
	dst = strconv.AppendInt(dst, int64(p.Status), 10)
	dst = append(dst, `,"code":`...)
	dst = appendString(dst, string(p.Code))
	dst = appendStringField(dst, `,"reason":`, p.Reason)
	return append(dst, '}')
}

// DecodeEnvelopeResponse decodes the body of a 200 answer to POST /v1/rpcs
// into r, which it resets first, leniently as DecodeResponse does: a fast
// path for what Sluice's servers write, json.Unmarshal for anything else.
func DecodeEnvelopeResponse(data []byte, r *EnvelopeResponse) error {
	*r = EnvelopeResponse{}
	s := scanner{data: data, results: resultDecoder{bodies: MaxEnvelope}}
	if s.envelopeResponse(r) && s.end() {
		return nil
	}
	*r = EnvelopeResponse{}
	return json.Unmarshal(data, r)
}

func (s *scanner) envelopeResponse(r *EnvelopeResponse) bool {
	return s.object(func(k []byte) (f uint, ok bool) {
		switch string(k) {
		case "answers":
			f = 1
			if ok = s.null(); !ok {
				r.Answers, ok = s.answers()
			}
		default:
			ok = s.unknown(k, "answers")
		}
		return f, ok
	})
}

func (s *scanner) answers() ([]Answer, bool) {
	var answers []Answer
	return list(s, &answers, MaxEnvelope, s.answer)
}

var answerFields = []string{"status", "operationId", "response", "problem"}

func (s *scanner) answer(a *Answer) bool {
	return s.object(func(k []byte) (f uint, ok bool) {
		switch string(k) {
		case "status":
			f = 1
			a.Status, ok = s.statusOrNull(a.Status)
		case "operationId":
			f = 8
			a.OperationID, ok = s.strOrNull(a.OperationID)
		case "response":
			f = 2
			if ok = s.null(); !ok {
				a.Response = new(Response)
				ok = s.response(a.Response)
			}
		case "problem":
			f = 4
			if ok = s.null(); !ok {
				a.Problem = new(Problem)
				ok = s.problem(a.Problem)
			}
		default:
			ok = s.unknown(k, answerFields...)
		}
		return f, ok
	})
}

var problemFields = []string{"type", "title", "status", "code", "reason"}

func (s *scanner) problem(p *Problem) bool {
	return s.object(func(k []byte) (f uint, ok bool) {
		switch string(k) {
		case "type":
			f = 1
			p.Type, ok = s.strOrNull(p.Type)
		case "title":
			f = 2
			p.Title, ok = s.strOrNull(p.Title)
		case "status":
			f = 4
			p.Status, ok = s.statusOrNull(p.Status)
		case "code":
			f = 8
			var code string
			code, ok = s.strOrNull(string(p.Code))
			p.Code = Code(code)
		case "reason":
			f = 16
			p.Reason, ok = s.strOrNull(p.Reason)
		default:
			ok = s.unknown(k, problemFields...)
		}
		return f, ok
	})
}

// statusOrNull reads an HTTP status: an integer of three digits, which
// every int holds; anything else goes to json.Unmarshal.
func (s *scanner) statusOrNull(old int) (int, bool) {
	v, ok := s.intOrNull(int64(old))
	return int(v), ok && v >= 100 && v <= 999
}

// strOrNull reads a string, or a null that leaves old as it is.
func (s *scanner) strOrNull(old string) (string, bool) {
	if s.null() {
		return old, true
	}
	return s.str()
}
