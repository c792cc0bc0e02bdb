package wire

import (
	"unicode/utf8"
)

// scanner reads the JSON that Sluice's own encoders write, fast and without
// reflection, for the fast paths of DecodeRequest and DecodeResponse.
//
// It accepts a strict subset of JSON and never guesses: every method
// reports false as soon as the input leaves that subset — malformed JSON,
// but also JSON that is valid and merely unusual (null where a value was
// expected, a key that is escaped, duplicated or differs from a field name
// only in case, a string that is not valid UTF-8, a surrogate escape, a
// number with a fraction or out of the int64 range). The caller then
// decodes the whole input again with encoding/json, which decides. So a
// fast path never accepts what encoding/json would refuse, and never
// decodes anything differently; the fuzz tests hold it to that.
type scanner struct {
	data []byte
	pos  int
	// buf holds a string with escapes while it is unescaped.
	buf []byte
	// results holds the backing arrays of every response's step results
	// in data: an envelope's answers share them.
	results resultDecoder
	// prevRequest is the length of the request before the one being
	// decoded, in an envelope; 0 for the first, or a request alone.
	prevRequest int
}

// requestLeft estimates how much of the request being decoded is left to
// read, for sizing what it decodes into: the rest of the data, but in an
// envelope no more than the request before it took (the requests a client
// coalesces are often alike), nor than MaxBody.
func (s *scanner) requestLeft() int {
	n := len(s.data) - s.pos
	if s.prevRequest > 0 {
		return min(n, s.prevRequest)
	}
	return min(n, MaxBody)
}

// maxSkipDepth bounds the nesting of a value the scanner skips; deeper
// values go to encoding/json.
const maxSkipDepth = 32

// ws skips JSON whitespace.
func (s *scanner) ws() {
	pos := s.pos
	for pos < len(s.data) && class[s.data[pos]] == space {
		pos++
	}
	s.pos = pos
}

// Byte classes, for the loops that run over every byte of the input.
const (
	other = iota // needs a look of its own
	plain        // stands for itself in a string: printable ASCII but '"', '\\' and ' '
	space        // JSON whitespace (a space also stands for itself in a string)
)

// class holds each byte's class.
var class = func() (t [256]uint8) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		if c != '"' && c != '\\' {
			t[c] = plain
		}
	}
	for _, c := range []byte{' ', '\t', '\n', '\r'} {
		t[c] = space
	}
	return t
}()

// plainFrom returns the index of the first byte from i that is not plain
// (a string's end, an escape, a control byte, a non-ASCII byte or a
// space, which the caller's loop looks at), or len(data).
func plainFrom(data []byte, i int) int {
	for i < len(data) && class[data[i]] == plain {
		i++
	}
	return i
}

// next skips whitespace and consumes c if it comes next.
func (s *scanner) next(c byte) bool {
	s.ws()
	if s.pos < len(s.data) && s.data[s.pos] == c {
		s.pos++
		return true
	}
	return false
}

// end reports whether only whitespace is left.
func (s *scanner) end() bool {
	s.ws()
	return s.pos == len(s.data)
}

// null consumes a null literal if it comes next.
func (s *scanner) null() bool {
	s.ws()
	if len(s.data)-s.pos >= 4 && string(s.data[s.pos:s.pos+4]) == "null" {
		s.pos += 4
		return true
	}
	return false
}

// objectStart consumes the '{' of an object and reports whether it is
// empty (its '}' then consumed too).
func (s *scanner) objectStart() (ok, empty bool) {
	if !s.next('{') {
		return false, false
	}
	return true, s.next('}')
}

// key reads an object key and its colon. Keys with escapes are refused:
// encoding/json would unescape them before matching.
func (s *scanner) key() ([]byte, bool) {
	s.ws()
	if s.pos >= len(s.data) || s.data[s.pos] != '"' {
		return nil, false
	}
	start := s.pos + 1
	for i := start; i < len(s.data); i++ {
		if i = plainFrom(s.data, i); i == len(s.data) {
			break
		}
		switch c := s.data[i]; {
		case c == '"':
			s.pos = i + 1
			if !s.next(':') {
				return nil, false
			}
			return s.data[start:i], true
		case c == '\\' || c < 0x20:
			return nil, false
		}
	}
	return nil, false
}

// more consumes the ',' or the closing c after a member or an element and
// reports whether another one follows.
func (s *scanner) more(c byte) (more, ok bool) {
	s.ws()
	if s.pos < len(s.data) {
		switch s.data[s.pos] {
		case ',':
			s.pos++
			return true, true
		case c:
			s.pos++
			return false, true
		}
	}
	return false, false
}

// object reads an object whose members member reads: it is handed each
// key, reads the value, and returns the bit of the member's field and
// whether it read the value. A bit of 0 marks a member read or skipped
// without being counted (an unknown field a lenient decoder skips); a
// member refused or unreadable (ok false) fails the object, as does a
// field met twice, which encoding/json would take twice, keeping the last.
// A lenient decoder's member reads a null as encoding/json does, leaving
// its field as it is: `if ok = s.null(); !ok { … }`.
func (s *scanner) object(member func(k []byte) (field uint, ok bool)) bool {
	ok, empty := s.objectStart()
	if !ok || empty {
		return ok
	}
	var seen uint
	for {
		k, ok := s.key()
		if !ok {
			return false
		}
		f, ok := member(k)
		if !ok || seen&f != 0 {
			return false
		}
		seen |= f
		more, ok := s.more('}')
		if !ok || !more {
			return ok
		}
	}
}

// list reads an array whose elements elem reads, each into the next
// element of *arena, and returns them as a slice of *arena capped at its
// own length, so that appending to it never writes into what follows. A
// nil *arena is made with room for capacity elements when the first
// element comes; an empty array is an empty slice of its own.
func list[T any](s *scanner, arena *[]T, capacity int, elem func(*T) bool) ([]T, bool) {
	if !s.next('[') {
		return nil, false
	}
	if s.next(']') {
		return []T{}, true
	}
	if *arena == nil {
		*arena = make([]T, 0, capacity)
	}
	start := len(*arena)
	for {
		var zero T
		*arena = append(*arena, zero)
		if !elem(&(*arena)[len(*arena)-1]) {
			return nil, false
		}
		more, ok := s.more(']')
		if !ok {
			return nil, false
		}
		if !more {
			a := *arena
			return a[start:len(a):len(a)], true
		}
	}
}

// rawString reads a string without escapes and returns its bytes, which
// alias the input. It refuses invalid UTF-8, which encoding/json would
// replace.
func (s *scanner) rawString() ([]byte, bool) {
	s.ws()
	if s.pos >= len(s.data) || s.data[s.pos] != '"' {
		return nil, false
	}
	start := s.pos + 1
	ascii := true
	for i := start; i < len(s.data); i++ {
		if i = plainFrom(s.data, i); i == len(s.data) {
			break
		}
		switch c := s.data[i]; {
		case c == '"':
			if !ascii && !utf8.Valid(s.data[start:i]) {
				return nil, false
			}
			s.pos = i + 1
			return s.data[start:i], true
		case c == '\\' || c < 0x20:
			return nil, false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return nil, false
}

// str reads a string, unescaping it. It refuses what encoding/json would
// decode with replacements: invalid UTF-8 and surrogate escapes.
func (s *scanner) str() (string, bool) {
	s.ws()
	if s.pos >= len(s.data) || s.data[s.pos] != '"' {
		return "", false
	}
	start := s.pos + 1
	ascii := true
	for i := start; i < len(s.data); i++ {
		if i = plainFrom(s.data, i); i == len(s.data) {
			break
		}
		switch c := s.data[i]; {
		case c == '"':
			if !ascii && !utf8.Valid(s.data[start:i]) {
				return "", false
			}
			s.pos = i + 1
			return string(s.data[start:i]), true
		case c == '\\':
			return s.escaped(start, i)
		case c < 0x20:
			return "", false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return "", false
}

// escaped finishes reading a string from start whose first escape is at i.
func (s *scanner) escaped(start, i int) (string, bool) {
	b := append(s.buf[:0], s.data[start:i]...)
	for i < len(s.data) {
		c := s.data[i]
		switch {
		case c == '"':
			if !utf8.Valid(b) {
				return "", false
			}
			s.pos, s.buf = i+1, b
			return string(b), true
		case c < 0x20:
			return "", false
		case c != '\\':
			b = append(b, c)
			i++
			continue
		}
		if i+1 >= len(s.data) {
			return "", false
		}
		switch e := s.data[i+1]; e {
		case '"', '\\', '/':
			b = append(b, e)
		case 'b':
			b = append(b, '\b')
		case 'f':
			b = append(b, '\f')
		case 'n':
			b = append(b, '\n')
		case 'r':
			b = append(b, '\r')
		case 't':
			b = append(b, '\t')
		case 'u':
			r, ok := hex4(s.data[i+2:])
			if !ok || utf8.RuneLen(r) < 0 { // a surrogate half
				return "", false
			}
			b = utf8.AppendRune(b, r)
			i += 4
		default:
			return "", false
		}
		i += 2
	}
	return "", false
}

// hex4 decodes the four hex digits of a \u escape.
func hex4(p []byte) (rune, bool) {
	if len(p) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range p[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// int64 reads an integer: an optional minus sign and digits, without
// leading zeros, fraction or exponent, within the int64 range.
func (s *scanner) int64() (int64, bool) {
	s.ws()
	i, neg := s.pos, false
	if i < len(s.data) && s.data[i] == '-' {
		i, neg = i+1, true
	}
	if i >= len(s.data) || s.data[i] < '0' || s.data[i] > '9' {
		return 0, false
	}
	var u uint64
	if s.data[i] == '0' {
		i++
	} else {
		for ; i < len(s.data) && '0' <= s.data[i] && s.data[i] <= '9'; i++ {
			if u > (1<<63)/10 {
				return 0, false
			}
			u = u*10 + uint64(s.data[i]-'0')
		}
	}
	if i < len(s.data) {
		switch s.data[i] {
		case '.', 'e', 'E', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
			return 0, false
		}
	}
	if u > 1<<63 || (!neg && u == 1<<63) {
		return 0, false
	}
	s.pos = i
	if neg {
		return int64(-u), true
	}
	return int64(u), true
}

// bool reads true or false.
func (s *scanner) bool() (v, ok bool) {
	s.ws()
	switch rest := s.data[s.pos:]; {
	case len(rest) >= 4 && string(rest[:4]) == "true":
		s.pos += 4
		return true, true
	case len(rest) >= 5 && string(rest[:5]) == "false":
		s.pos += 5
		return false, true
	}
	return false, false
}

// skip reads and discards one value of any kind, checking its syntax as
// encoding/json would (strings may hold any bytes; escapes must be valid).
func (s *scanner) skip(depth int) bool {
	if depth > maxSkipDepth {
		return false
	}
	s.ws()
	if s.pos >= len(s.data) {
		return false
	}
	switch s.data[s.pos] {
	case '"':
		return s.skipString()
	case '{':
		ok, empty := s.objectStart()
		if !ok || empty {
			return ok
		}
		for {
			if !s.skipString() || !s.next(':') || !s.skip(depth+1) {
				return false
			}
			more, ok := s.more('}')
			if !ok || !more {
				return ok
			}
			s.ws()
		}
	case '[':
		s.pos++
		if s.next(']') {
			return true
		}
		for {
			if !s.skip(depth + 1) {
				return false
			}
			more, ok := s.more(']')
			if !ok || !more {
				return ok
			}
		}
	case 't', 'f':
		_, ok := s.bool()
		return ok
	case 'n':
		return s.null()
	}
	return s.skipNumber()
}

// skipString skips a string, checking its escapes.
func (s *scanner) skipString() bool {
	if s.pos >= len(s.data) || s.data[s.pos] != '"' {
		return false
	}
	for i := s.pos + 1; i < len(s.data); i++ {
		if i = plainFrom(s.data, i); i == len(s.data) {
			break
		}
		switch c := s.data[i]; {
		case c == '"':
			s.pos = i + 1
			return true
		case c < 0x20:
			return false
		case c == '\\':
			if i+1 >= len(s.data) {
				return false
			}
			switch s.data[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i++
			case 'u':
				if _, ok := hex4(s.data[i+2:]); !ok {
					return false
				}
				i += 5
			default:
				return false
			}
		}
	}
	return false
}

// skipNumber skips a number of JSON's full grammar.
func (s *scanner) skipNumber() bool {
	d, i := s.data, s.pos
	digits := func() bool {
		start := i
		for i < len(d) && '0' <= d[i] && d[i] <= '9' {
			i++
		}
		return i > start
	}
	if i < len(d) && d[i] == '-' {
		i++
	}
	switch {
	case i < len(d) && d[i] == '0':
		i++
	case !digits():
		return false
	}
	if i < len(d) && d[i] == '.' {
		i++
		if !digits() {
			return false
		}
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		if !digits() {
			return false
		}
	}
	s.pos = i
	return true
}
