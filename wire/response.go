package wire

import (
	"encoding/json"
	"strings"

	"github.com/sluicehq/sluice/engine"
)

// DecodeResponse decodes the body of a successful RPC answer into r, which
// it resets first, as json.Unmarshal would: unknown fields are ignored, so
// a client keeps working when a server adds one.
//
// Answers as Sluice's servers write them take a fast path without
// reflection; anything else goes to json.Unmarshal, which decides. Both
// decode the same bytes to the same Response and refuse the same answers.
func DecodeResponse(data []byte, r *Response) error {
	*r = Response{}
	s := scanner{data: data, results: resultDecoder{bodies: 1}}
	if s.response(r) && s.end() {
		return nil
	}
	*r = Response{}
	return json.Unmarshal(data, r)
}

// unknown skips the value of a field the fast path does not know, as
// json.Unmarshal ignores it. A key that json.Unmarshal might match with a
// field anyway, by its case-insensitive matching, is left to it.
func (s *scanner) unknown(key []byte, fields ...string) bool {
	for _, c := range key {
		if c >= 0x80 {
			return false
		}
	}
	for _, f := range fields {
		if strings.EqualFold(string(key), f) {
			return false
		}
	}
	return s.skip(0)
}

func (s *scanner) response(r *Response) bool {
	return s.object(func(k []byte) (f uint, ok bool) {
		switch string(k) {
		case "steps":
			f = 1
			if ok = s.null(); !ok {
				r.Steps, ok = s.stepResults()
			}
		default:
			ok = s.unknown(k, "steps")
		}
		return f, ok
	})
}

func (s *scanner) stepResults() ([]engine.StepResult, bool) {
	d := &s.results
	return list(s, &d.steps, min(max(len(s.data)/256, 1), max(d.bodies, 1)*engine.MaxSteps), func(st *engine.StepResult) bool { return d.step(s, st) })
}

// resultDecoder holds the backing arrays of the step results, results and
// window results of one body, sized once from the body's length: a lone
// response's, or every answer's of an envelope. Each slice handed out is
// capped at its own length, so that appending to one never writes into
// another's.
type resultDecoder struct {
	// bodies is the most responses the body holds, which bounds the first
	// backing arrays: 1, or MaxEnvelope for an envelope's answers.
	bodies  int
	steps   []engine.StepResult
	results []engine.Result
	windows []engine.WindowResult
}

var stepResultFields = []string{"skipped", "replayed", "denied", "results"}

func (d *resultDecoder) step(s *scanner, st *engine.StepResult) bool {
	return s.object(func(k []byte) (f uint, ok bool) {
		switch string(k) {
		case "skipped":
			f = 1
			st.Skipped, ok = s.boolOrNull(st.Skipped)
		case "replayed":
			f = 2
			st.Replayed, ok = s.boolOrNull(st.Replayed)
		case "denied":
			f = 4
			st.Denied, ok = s.boolOrNull(st.Denied)
		case "results":
			f = 8
			if ok = s.null(); !ok {
				st.Results, ok = d.resultList(s)
			}
		default:
			ok = s.unknown(k, stepResultFields...)
		}
		return f, ok
	})
}

// resultList reads a step's results into the results' backing array, sized
// at one result per 48 bytes of body: a hit's result takes at least 56 in
// the minimal form (`{"allowed":true,"remaining":0,"resetAt":` and 13
// digits, a brace and a comma), so a body of hits fits without growing it.
func (d *resultDecoder) resultList(s *scanner) ([]engine.Result, bool) {
	return list(s, &d.results, min(max(len(s.data)/48, 1), max(d.bodies, 1)*engine.MaxCommands), func(r *engine.Result) bool { return d.result(s, r) })
}

var resultFields = []string{"allowed", "found", "value", "int", "ttlMs", "remaining", "resetAt", "retryAfterMs", "at", "windows"}

func (d *resultDecoder) result(s *scanner, r *engine.Result) bool {
	return s.object(func(k []byte) (f uint, ok bool) {
		switch string(k) {
		case "allowed":
			f = 1 << 0
			r.Allowed, ok = s.boolOrNull(r.Allowed)
		case "found":
			f = 1 << 1
			r.Found, ok = s.boolOrNull(r.Found)
		case "value":
			f = 1 << 2
			if ok = s.null(); !ok {
				r.Value, ok = s.str()
			}
		case "int":
			f = 1 << 3
			r.Int, ok = s.intOrNull(r.Int)
		case "ttlMs":
			f = 1 << 4
			r.TTLMs, ok = s.intOrNull(r.TTLMs)
		case "remaining":
			f = 1 << 5
			r.Remaining, ok = s.intOrNull(r.Remaining)
		case "resetAt":
			f = 1 << 6
			r.ResetAt, ok = s.intOrNull(r.ResetAt)
		case "retryAfterMs":
			f = 1 << 7
			r.RetryAfterMs, ok = s.intOrNull(r.RetryAfterMs)
		case "at":
			f = 1 << 8
			r.At, ok = s.intOrNull(r.At)
		case "windows":
			f = 1 << 9
			if ok = s.null(); !ok {
				r.Windows, ok = d.windowList(s)
			}
		default:
			ok = s.unknown(k, resultFields...)
		}
		return f, ok
	})
}

func (d *resultDecoder) windowList(s *scanner) ([]engine.WindowResult, bool) {
	// A window's result takes some 50 bytes of JSON, and its command's
	// result as many again.
	return list(s, &d.windows, min(max(len(s.data)/96, 1), max(d.bodies, 1)*engine.MaxCommands*engine.MaxWindowsPerHit), s.windowResult)
}

var windowResultFields = []string{"allowed", "remaining", "resetAt", "retryAfterMs"}

func (s *scanner) windowResult(w *engine.WindowResult) bool {
	return s.object(func(k []byte) (f uint, ok bool) {
		switch string(k) {
		case "allowed":
			f = 1
			w.Allowed, ok = s.boolOrNull(w.Allowed)
		case "remaining":
			f = 2
			w.Remaining, ok = s.intOrNull(w.Remaining)
		case "resetAt":
			f = 4
			w.ResetAt, ok = s.intOrNull(w.ResetAt)
		case "retryAfterMs":
			f = 8
			w.RetryAfterMs, ok = s.intOrNull(w.RetryAfterMs)
		default:
			ok = s.unknown(k, windowResultFields...)
		}
		return f, ok
	})
}

// boolOrNull reads a bool, or a null that leaves old as it is, as
// json.Unmarshal does.
func (s *scanner) boolOrNull(old bool) (bool, bool) {
	if s.null() {
		return old, true
	}
	return s.bool()
}

// intOrNull reads an integer, or a null that leaves old as it is.
func (s *scanner) intOrNull(old int64) (int64, bool) {
	if s.null() {
		return old, true
	}
	return s.int64()
}
