package wire

import (
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/engine"
)

// AppendRequest appends the JSON body of r to dst: the bytes json.Marshal
// writes for r, without reflection. It fails only for a window kind
// without a name, as json.Marshal does (a validated request has none).
func AppendRequest(dst []byte, r *Request) ([]byte, error) {
	dst = append(dst, `{"operationId":`...)
	dst = appendString(dst, r.OperationID)
	dst = append(dst, `,"family":`...)
	dst = appendString(dst, r.Family)
	if r.Source != "" {
		dst = append(dst, `,"source":`...)
		dst = appendString(dst, r.Source)
	}
	if r.Principal != "" {
		dst = append(dst, `,"principal":`...)
		dst = appendString(dst, r.Principal)
	}
	if len(r.SourceTiers) > 0 {
		dst = append(dst, `,"sourceTiers":{`...)
		var buf [4]string
		keys := buf[:0]
		for k := range r.SourceTiers {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for i, k := range keys {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendString(dst, k)
			dst = append(dst, ':')
			dst = appendString(dst, r.SourceTiers[k])
		}
		dst = append(dst, '}')
	}
	if r.Mode != "" {
		dst = append(dst, `,"mode":`...)
		dst = appendString(dst, string(r.Mode))
	}
	dst = append(dst, `,"steps":`...)
	if r.Steps == nil {
		return append(dst, "null}"...), nil
	}
	dst = append(dst, '[')
	for i := range r.Steps {
		if i > 0 {
			dst = append(dst, ',')
		}
		var err error
		if dst, err = appendStep(dst, &r.Steps[i]); err != nil {
			return nil, err
		}
	}
	return append(dst, "]}"...), nil
}

func appendStep(dst []byte, st *engine.Step) ([]byte, error) {
	dst = append(dst, `{"partition":`...)
	dst = appendString(dst, st.Partition)
	dst = append(dst, `,"commands":`...)
	if st.Commands == nil {
		return append(dst, "null}"...), nil
	}
	dst = append(dst, '[')
	for i := range st.Commands {
		if i > 0 {
			dst = append(dst, ',')
		}
		var err error
		if dst, err = appendCommand(dst, &st.Commands[i]); err != nil {
			return nil, err
		}
	}
	return append(dst, "]}"...), nil
}

// appendCommand writes the fields of c in the order of engine.Command's
// declaration, leaving out the zero ones as its omitempty tags do.
func appendCommand(dst []byte, c *engine.Command) ([]byte, error) {
	dst = append(dst, `{"op":`...)
	dst = appendString(dst, string(c.Op))
	dst = appendStringField(dst, `,"key":`, c.Key)
	if len(c.Windows) > 0 {
		dst = append(dst, `,"windows":[`...)
		for i := range c.Windows {
			w := &c.Windows[i]
			if i > 0 {
				dst = append(dst, ',')
			}
			kind, err := kindName(w.Kind)
			if err != nil {
				return nil, err
			}
			dst = append(dst, `{"key":`...)
			dst = appendString(dst, w.Key)
			dst = append(dst, `,"kind":`...)
			dst = appendString(dst, kind)
			dst = append(dst, `,"limit":`...)
			dst = strconv.AppendInt(dst, w.Limit, 10)
			dst = append(dst, `,"windowMs":`...)
			dst = strconv.AppendInt(dst, w.WindowMs, 10)
			dst = append(dst, '}')
		}
		dst = append(dst, ']')
	}
	if len(c.Budgets) > 0 {
		dst = append(dst, `,"budgets":[`...)
		for i := range c.Budgets {
			b := &c.Budgets[i]
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, `{"key":`...)
			dst = appendString(dst, b.Key)
			dst = append(dst, `,"limit":`...)
			dst = strconv.AppendInt(dst, b.Limit, 10)
			dst = append(dst, `,"windowMs":`...)
			dst = strconv.AppendInt(dst, b.WindowMs, 10)
			if b.Refundable {
				dst = append(dst, `,"refundable":true`...)
			}
			dst = append(dst, '}')
		}
		dst = append(dst, ']')
	}
	dst = appendStringField(dst, `,"receipt":`, c.Receipt)
	dst = appendIntField(dst, `,"cost":`, c.Cost)
	dst = appendStringField(dst, `,"value":`, c.Value)
	dst = appendStringField(dst, `,"mode":`, string(c.Mode))
	if c.KeepTTL {
		dst = append(dst, `,"keepTtl":true`...)
	}
	dst = appendIntField(dst, `,"ttlMs":`, c.TTLMs)
	dst = appendIntField(dst, `,"delta":`, c.Delta)
	dst = appendIntField(dst, `,"limit":`, c.Limit)
	dst = appendStringField(dst, `,"lease":`, c.Lease)
	dst = appendIntField(dst, `,"windowMs":`, c.WindowMs)
	if c.RefillPermille != nil {
		dst = append(dst, `,"refillPermille":`...)
		dst = strconv.AppendInt(dst, *c.RefillPermille, 10)
	}
	dst = appendIntField(dst, `,"maxWaitMs":`, c.MaxWaitMs)
	dst = appendIntField(dst, `,"at":`, c.At)
	dst = appendIntField(dst, `,"delayMs":`, c.DelayMs)
	return append(dst, '}'), nil
}

// kindName returns the wire name of k as its MarshalText does, without
// allocating for the kinds the decoder knows.
func kindName(k algo.Kind) (string, error) {
	if slices.Contains(kinds[:], k) {
		return k.String(), nil
	}
	name, err := k.MarshalText()
	return string(name), err
}

// AppendResponse appends the JSON of r to dst: the bytes json.Marshal
// writes for r, without reflection.
func AppendResponse(dst []byte, r *Response) []byte {
	dst = append(dst, `{"steps":`...)
	if r.Steps == nil {
		return append(dst, "null}"...)
	}
	dst = append(dst, '[')
	for i := range r.Steps {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendStepResult(dst, &r.Steps[i])
	}
	return append(dst, "]}"...)
}

func appendStepResult(dst []byte, st *engine.StepResult) []byte {
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

// appendResult writes the fields of r in the order of engine.Result's
// declaration, leaving out the zero ones its omitempty tags name.
func appendResult(dst []byte, r *engine.Result) []byte {
	dst = append(dst, `{"allowed":`...)
	dst = strconv.AppendBool(dst, r.Allowed)
	if r.Found {
		dst = append(dst, `,"found":true`...)
	}
	dst = appendStringField(dst, `,"value":`, r.Value)
	dst = appendIntField(dst, `,"int":`, r.Int)
	dst = appendIntField(dst, `,"ttlMs":`, r.TTLMs)
	dst = append(dst, `,"remaining":`...)
	dst = strconv.AppendInt(dst, r.Remaining, 10)
	dst = appendIntField(dst, `,"resetAt":`, r.ResetAt)
	dst = appendIntField(dst, `,"retryAfterMs":`, r.RetryAfterMs)
	dst = appendIntField(dst, `,"at":`, r.At)
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
			dst = appendIntField(dst, `,"retryAfterMs":`, w.RetryAfterMs)
			dst = append(dst, '}')
		}
		dst = append(dst, ']')
	}
	return append(dst, '}')
}

// appendStringField writes an omitempty string field: name is its key
// with the separator before it and the colon.
func appendStringField(dst []byte, name, v string) []byte {
	if v == "" {
		return dst
	}
	return appendString(append(dst, name...), v)
}

// appendIntField writes an omitempty integer field.
func appendIntField(dst []byte, name string, v int64) []byte {
	if v == 0 {
		return dst
	}
	return strconv.AppendInt(append(dst, name...), v, 10)
}

// appendString writes s as a JSON string exactly as encoding/json does with
// its default HTML escaping: <, > and & as \u escapes, invalid UTF-8 as
// \ufffd, and U+2028 and U+2029 escaped.
func appendString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' && b != '<' && b != '>' && b != '&' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '\\', '"':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[b>>4], hex[b&0xF])
			}
			i++
			start = i
			continue
		}
		c, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case c == utf8.RuneError && size == 1:
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
		case c == '\u2028' || c == '\u2029':
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[c&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
