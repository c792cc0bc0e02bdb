package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"unicode/utf8"
)

// CheckStrict reports what encoding/json lets through in body, which it
// has already decoded into v, but this contract refuses:
//
//   - a member whose name matches a field of v only when case is ignored
//     (encoding/json matches names without regard to case; the contract's
//     names are case-sensitive, so such a member is an unknown field);
//   - a member given twice in one object (encoding/json keeps the last);
//   - a string that is not UTF-8, or that escapes half of a surrogate pair
//     alone (encoding/json decodes each as U+FFFD, so distinct operation
//     ids, partitions or keys would decode to one).
//
// Values decoded into a json.RawMessage, or into any other type that
// decodes itself, are not looked into: whoever decodes them checks them.
func CheckStrict(body []byte, v any) error {
	c := strictChecker{dec: json.NewDecoder(bytes.NewReader(body)), body: body}
	return c.value(reflect.TypeOf(v))
}

var unmarshalerType = reflect.TypeFor[json.Unmarshaler]()

type strictChecker struct {
	dec  *json.Decoder
	body []byte
}

// token reads the next token and checks the raw bytes of a string.
func (c *strictChecker) token() (json.Token, error) {
	start := c.dec.InputOffset()
	tok, err := c.dec.Token()
	if err != nil {
		return nil, err
	}
	if _, ok := tok.(string); ok {
		// The raw bytes are the string and the separators before it,
		// which are ASCII.
		raw := c.body[start:c.dec.InputOffset()]
		if !utf8.Valid(raw) {
			return nil, errors.New("a string is not UTF-8")
		}
		if loneSurrogate(raw) {
			return nil, errors.New("a string escapes half of a surrogate pair alone")
		}
	}
	return tok, nil
}

// value reads one value of Go type t.
func (c *strictChecker) value(t reflect.Type) error {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t != nil && reflect.PointerTo(t).Implements(unmarshalerType) {
		// A json.RawMessage, or a type that decodes itself.
		var raw json.RawMessage
		return c.dec.Decode(&raw)
	}
	tok, err := c.token()
	if err != nil {
		return err
	}
	switch tok {
	case json.Delim('['):
		elem := t
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			elem = t.Elem()
		}
		for c.dec.More() {
			if err := c.value(elem); err != nil {
				return err
			}
		}
	case json.Delim('{'):
		seen := map[string]bool{}
		for c.dec.More() {
			tok, err := c.token()
			if err != nil {
				return err
			}
			name, _ := tok.(string)
			if seen[name] {
				return fmt.Errorf("member %q given twice", name)
			}
			seen[name] = true
			var ft reflect.Type
			switch {
			case t == nil || t.Kind() == reflect.Interface:
				ft = t
			case t.Kind() == reflect.Map:
				ft = t.Elem()
			case t.Kind() == reflect.Struct:
				var ok bool
				if ft, ok = fieldType(t, name); !ok {
					return fmt.Errorf("unknown field %q (names are case-sensitive)", name)
				}
			}
			if err := c.value(ft); err != nil {
				return err
			}
		}
	default:
		return nil // a scalar
	}
	_, err = c.dec.Token() // the closing delimiter
	return err
}

// fieldType returns the type of the field of struct type t that
// encoding/json names exactly name, looking into embedded structs.
func fieldType(t reflect.Type, name string) (reflect.Type, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		n, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && n == "" && f.Type.Kind() == reflect.Struct {
			if ft, ok := fieldType(f.Type, name); ok {
				return ft, true
			}
			continue
		}
		if !f.IsExported() {
			continue
		}
		if n == "" {
			n = f.Name
		}
		if n == name {
			return f.Type, true
		}
	}
	return nil, false
}

// loneSurrogate reports whether raw, the bytes of a JSON string, escapes
// half of a surrogate pair without the other half right after it.
func loneSurrogate(raw []byte) bool {
	for i := 0; i+1 < len(raw); i++ {
		if raw[i] != '\\' {
			continue
		}
		i++ // the escaped character
		if raw[i] != 'u' {
			continue
		}
		r, _ := hex4(raw[i+1:])
		i += 4
		switch {
		case r < 0xD800 || r >= 0xE000:
		case r >= 0xDC00:
			return true // a low half first
		case i+6 >= len(raw) || raw[i+1] != '\\' || raw[i+2] != 'u':
			return true // a high half alone
		default:
			lo, _ := hex4(raw[i+3:])
			if lo < 0xDC00 || lo >= 0xE000 {
				return true
			}
			i += 6
		}
	}
	return false
}
