package jsonstr

import (
	"bytes"
	"encoding/json"
	"testing"
)

// FuzzAppend checks Append against json.Marshal on any bytes, valid UTF-8
// or not.
func FuzzAppend(f *testing.F) {
	for _, s := range []string{"", "plain", `"quoted" \ back`, "<b>&amp;</b>", "\x00\x01\b\f\n\r\t\x1f\x7f", "é€😀", "\u2028\u2029", "\xff\xc3(", "a\xed\xa0\x80b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := Append([]byte("kept"), s); !bytes.Equal(got, append([]byte("kept"), want...)) {
			t.Fatalf("Append(%q) = %s, json.Marshal %s", s, got[4:], want)
		}
	})
}

// TestAppendEveryByte checks every single byte and every rune near the
// escaped ones.
func TestAppendEveryByte(t *testing.T) {
	for b := range 256 {
		s := string([]byte{'a', byte(b), 'z'})
		want, _ := json.Marshal(s)
		if got := Append(nil, s); !bytes.Equal(got, want) {
			t.Errorf("byte %#x: %s, want %s", b, got, want)
		}
	}
	for r := rune(0x2020); r < 0x2030; r++ {
		s := string(r)
		want, _ := json.Marshal(s)
		if got := Append(nil, s); !bytes.Equal(got, want) {
			t.Errorf("rune %U: %s, want %s", r, got, want)
		}
	}
}

// BenchmarkAppend appends what the wire mostly carries: hashed names of 64
// hex digits, short keys and names, and now and then a string to escape.
func BenchmarkAppend(b *testing.B) {
	for _, c := range []struct{ name, s string }{
		{"hash", "3f7a9c0e5b1d2486af03c9e7d5b12f4068ac3e9b7d105f2c84e6a09b3d7c1e5f"},
		{"short", "limit-7"},
		{"escapes", `a "quoted" <name> & a\path`},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(c.s)))
			var buf []byte
			for b.Loop() {
				buf = Append(buf[:0], c.s)
			}
		})
	}
}
