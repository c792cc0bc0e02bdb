package wire

import (
	"slices"
	"strconv"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/jsonstr"
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
// writes for r (see engine.Response.AppendJSON).
func AppendResponse(dst []byte, r *Response) []byte { return r.AppendJSON(dst) }

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

// appendString writes s as a JSON string as encoding/json does.
func appendString(dst []byte, s string) []byte { return jsonstr.Append(dst, s) }
