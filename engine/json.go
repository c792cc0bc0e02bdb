package engine

import (
	"strconv"

	"github.com/sluicehq/sluice/internal/jsonstr"
)

// AppendJSON appends the JSON of r to dst: the bytes json.Marshal writes
// for r, without reflection.
func (r *Response) AppendJSON(dst []byte) []byte { return r.appendJSON(dst, false) }

// AppendMinimalJSON appends the minimal JSON of r to dst: the bytes
// AppendJSON writes, except that a result whose Windows holds one window
// equal to the result's own Allowed, Remaining, ResetAt and RetryAfterMs
// (every allowed or denied win.hit or res.reserve of one window or budget)
// leaves its "windows" out. Nothing is lost: RestoreWindows, given the
// request's steps, rebuilds the list.
func (r *Response) AppendMinimalJSON(dst []byte) []byte { return r.appendJSON(dst, true) }

func (r *Response) appendJSON(dst []byte, minimal bool) []byte {
	dst = append(dst, `{"steps":`...)
	if r.Steps == nil {
		return append(dst, "null}"...)
	}
	dst = append(dst, '[')
	for i := range r.Steps {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = r.Steps[i].appendJSON(dst, minimal)
	}
	return append(dst, "]}"...)
}

// RestoreWindows gives back the window list AppendMinimalJSON leaves out:
// each result of a win.hit of one window or a res.reserve of one budget,
// in steps (the request r answers), that holds no window results gets one,
// equal to the result's own fields. Results r holds beyond steps' commands,
// or of commands of several windows, are left as they are (a caller
// checking the answer's shape then finds them wanting).
func (r *Response) RestoreWindows(steps []Step) {
	n := 0
	r.eachElided(steps, func(*Result) { n++ })
	if n == 0 {
		return
	}
	ws := make([]WindowResult, 0, n)
	r.eachElided(steps, func(res *Result) {
		ws = append(ws, res.window())
		res.Windows = ws[len(ws)-1 : len(ws) : len(ws)]
	})
}

// eachElided calls f with every result of r whose window list
// AppendMinimalJSON may have left out and that holds none.
func (r *Response) eachElided(steps []Step, f func(*Result)) {
	for i := range min(len(r.Steps), len(steps)) {
		results, cmds := r.Steps[i].Results, steps[i].Commands
		for j := range min(len(results), len(cmds)) {
			c := &cmds[j]
			one := c.Op == OpHit && len(c.Windows) == 1 || c.Op == OpReserve && len(c.Budgets) == 1
			if one && len(results[j].Windows) == 0 {
				f(&results[j])
			}
		}
	}
}

// AppendJSON appends the JSON of s to dst: the bytes json.Marshal writes
// for s, without reflection. Replay records hold it.
func (st *StepResult) AppendJSON(dst []byte) []byte { return st.appendJSON(dst, false) }

func (st *StepResult) appendJSON(dst []byte, minimal bool) []byte {
	dst = append(dst, '{')
	if st.Skipped {
		dst = append(dst, `"skipped":true,`...)
	}
	if st.Replayed {
		dst = append(dst, `"replayed":true,`...)
	}
	if st.Denied {
		dst = append(dst, `"denied":true,`...)
	}
	dst = append(dst, `"results":`...)
	if st.Results == nil {
		return append(dst, "null}"...)
	}
	dst = append(dst, '[')
	for i := range st.Results {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendResult(dst, &st.Results[i], minimal)
	}
	return append(dst, "]}"...)
}

// appendResult writes the fields of r in the order of Result's
// declaration, leaving out the zero ones its omitempty tags name, and, if
// minimal, a window list that repeats the result's own fields.
func appendResult(dst []byte, r *Result, minimal bool) []byte {
	dst = append(dst, `{"allowed":`...)
	dst = strconv.AppendBool(dst, r.Allowed)
	if r.Found {
		dst = append(dst, `,"found":true`...)
	}
	dst = appendJSONString(dst, `,"value":`, r.Value)
	dst = appendJSONInt(dst, `,"int":`, r.Int)
	dst = appendJSONInt(dst, `,"ttlMs":`, r.TTLMs)
	dst = append(dst, `,"remaining":`...)
	dst = strconv.AppendInt(dst, r.Remaining, 10)
	dst = appendJSONInt(dst, `,"resetAt":`, r.ResetAt)
	dst = appendJSONInt(dst, `,"retryAfterMs":`, r.RetryAfterMs)
	dst = appendJSONInt(dst, `,"at":`, r.At)
	if len(r.Windows) > 0 && !(minimal && len(r.Windows) == 1 && r.Windows[0] == r.window()) {
		dst = append(dst, `,"windows":[`...)
		for i := range r.Windows {
			w := &r.Windows[i]
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, `{"allowed":`...)
			dst = strconv.AppendBool(dst, w.Allowed)
			dst = append(dst, `,"remaining":`...)
			dst = strconv.AppendInt(dst, w.Remaining, 10)
			dst = append(dst, `,"resetAt":`...)
			dst = strconv.AppendInt(dst, w.ResetAt, 10)
			dst = appendJSONInt(dst, `,"retryAfterMs":`, w.RetryAfterMs)
			dst = append(dst, '}')
		}
		dst = append(dst, ']')
	}
	return append(dst, '}')
}

// appendJSONString writes an omitempty string field: name is its key
// with the separator before it and the colon.
func appendJSONString(dst []byte, name, v string) []byte {
	if v == "" {
		return dst
	}
	return jsonstr.Append(append(dst, name...), v)
}

// appendJSONInt writes an omitempty integer field.
func appendJSONInt(dst []byte, name string, v int64) []byte {
	if v == 0 {
		return dst
	}
	return strconv.AppendInt(append(dst, name...), v, 10)
}

// window returns the window result that repeats r's own fields.
func (r *Result) window() WindowResult {
	return WindowResult{Allowed: r.Allowed, Remaining: r.Remaining, ResetAt: r.ResetAt, RetryAfterMs: r.RetryAfterMs}
}
