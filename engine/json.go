package engine

import (
	"strconv"

	"github.com/sluicehq/sluice/internal/jsonstr"
)

// AppendJSON appends the JSON of r to dst: the bytes json.Marshal writes
// for r, without reflection.
func (r *Response) AppendJSON(dst []byte) []byte {
	dst = append(dst, `{"steps":`...)
	if r.Steps == nil {
		return append(dst, "null}"...)
	}
	dst = append(dst, '[')
	for i := range r.Steps {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = r.Steps[i].AppendJSON(dst)
	}
	return append(dst, "]}"...)
}

// AppendJSON appends the JSON of s to dst: the bytes json.Marshal writes
// for s, without reflection. Replay records hold it.
func (st *StepResult) AppendJSON(dst []byte) []byte {
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
		dst = appendResult(dst, &st.Results[i])
	}
	return append(dst, "]}"...)
}

// appendResult writes the fields of r in the order of Result's
// declaration, leaving out the zero ones its omitempty tags name.
func appendResult(dst []byte, r *Result) []byte {
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
	if len(r.Windows) > 0 {
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
