package engine

import (
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"testing"

	"pgregory.net/rapid"

	"github.com/sluicehq/sluice/algo"
)

// TestHashEncodingIsInjective checks that the canonical encoding Hash
// digests can be decoded back into the step it encodes, so no two
// different steps share an encoding, and draws pairs of steps from small
// alphabets, so that equal fields are frequent, to check that equal steps
// give equal hashes and different ones different hashes.
func TestHashEncodingIsInjective(t *testing.T) {
	str := rapid.SampledFrom([]string{"", "a", "b", "ab", "a\x00", "\x00a", "\xff", "é"})
	num := rapid.SampledFrom([]int64{0, 1, -1, 255, 256, 1 << 40, -1 << 63})
	step := rapid.Custom(func(t *rapid.T) Step {
		s := Step{Partition: str.Draw(t, "partition")}
		s.Commands = rapid.SliceOfN(rapid.Custom(func(t *rapid.T) Command {
			c := Command{
				Op: Op(str.Draw(t, "op")), Key: str.Draw(t, "key"), Receipt: str.Draw(t, "receipt"),
				Cost: num.Draw(t, "cost"), Value: str.Draw(t, "value"), Mode: SetMode(str.Draw(t, "mode")),
				KeepTTL: rapid.Bool().Draw(t, "keepTtl"), TTLMs: num.Draw(t, "ttl"), Delta: num.Draw(t, "delta"),
				Limit: num.Draw(t, "limit"), Lease: str.Draw(t, "lease"), WindowMs: num.Draw(t, "windowMs"),
				MaxWaitMs: num.Draw(t, "maxWait"), At: num.Draw(t, "at"), DelayMs: num.Draw(t, "delay"),
			}
			if rapid.Bool().Draw(t, "refill?") {
				v := num.Draw(t, "refill")
				c.RefillPermille = &v
			}
			c.Windows = rapid.SliceOfN(rapid.Custom(func(t *rapid.T) Window {
				return Window{Key: str.Draw(t, "key"), Kind: algo.Kind(rapid.IntRange(0, 5).Draw(t, "kind")), Limit: num.Draw(t, "limit"), WindowMs: num.Draw(t, "windowMs")}
			}), 0, 2).Draw(t, "windows")
			c.Budgets = rapid.SliceOfN(rapid.Custom(func(t *rapid.T) Budget {
				return Budget{Key: str.Draw(t, "key"), Limit: num.Draw(t, "limit"), WindowMs: num.Draw(t, "windowMs"), Refundable: rapid.Bool().Draw(t, "refundable")}
			}), 0, 2).Draw(t, "budgets")
			return c
		}), 0, 3).Draw(t, "commands")
		return s
	})
	rapid.Check(t, func(t *rapid.T) {
		a := step.Draw(t, "a")
		b := a
		if rapid.Bool().Draw(t, "independent") {
			b = step.Draw(t, "b")
		}
		encA, encB := a.appendCanonical(nil), b.appendCanonical(nil)
		decoded, err := decodeCanonical(encA)
		if err != nil {
			t.Fatalf("decoding the encoding of %#v: %v", a, err)
		}
		if !reflect.DeepEqual(normalStep(decoded), normalStep(a)) {
			t.Fatalf("the encoding of\n%#v\ndecodes to\n%#v", a, decoded)
		}
		same := reflect.DeepEqual(normalStep(a), normalStep(b))
		if bytes.Equal(encA, encB) != same {
			t.Fatalf("equal steps %v, equal encodings %v:\n%#v\n%#v", same, !same, a, b)
		}
		ha, _ := a.Hash()
		hb, _ := b.Hash()
		if (ha == hb) != same {
			t.Fatalf("equal steps %v, equal hashes %v", same, !same)
		}
	})
}

// normalStep returns a copy of s in which empty and nil lists are alike
// (the encoding, as JSON before it, does not tell them apart) and
// RefillPermille is compared by value.
func normalStep(s Step) any {
	type cmd struct {
		C      Command
		Refill int64
		HasRef bool
	}
	out := []any{s.Partition, len(s.Commands)}
	for _, c := range s.Commands {
		n := cmd{C: c}
		if c.RefillPermille != nil {
			n.Refill, n.HasRef = *c.RefillPermille, true
		}
		n.C.RefillPermille = nil
		if len(c.Windows) == 0 {
			n.C.Windows = nil
		}
		if len(c.Budgets) == 0 {
			n.C.Budgets = nil
		}
		out = append(out, n)
	}
	return out
}

// decodeCanonical is the inverse of appendCanonical: it reads every field
// back in order and fails unless it consumes the encoding exactly.
func decodeCanonical(b []byte) (Step, error) {
	d := canonicalReader{b: b}
	if string(d.bytes(len(hashTag))) != hashTag {
		return Step{}, errors.New("no tag")
	}
	s := Step{Partition: d.str()}
	for range d.count() {
		c := Command{Op: Op(d.str()), Key: d.str()}
		for range d.count() {
			c.Windows = append(c.Windows, Window{Key: d.str(), Kind: algo.Kind(d.byte()), Limit: d.int(), WindowMs: d.int()})
		}
		for range d.count() {
			c.Budgets = append(c.Budgets, Budget{Key: d.str(), Limit: d.int(), WindowMs: d.int(), Refundable: d.byte() == 1})
		}
		c.Receipt, c.Cost, c.Value, c.Mode = d.str(), d.int(), d.str(), SetMode(d.str())
		c.KeepTTL, c.TTLMs, c.Delta, c.Limit = d.byte() == 1, d.int(), d.int(), d.int()
		c.Lease, c.WindowMs = d.str(), d.int()
		if d.byte() == 1 {
			v := d.int()
			c.RefillPermille = &v
		}
		c.MaxWaitMs, c.At, c.DelayMs = d.int(), d.int(), d.int()
		s.Commands = append(s.Commands, c)
	}
	if d.err != nil || len(d.b) != 0 {
		return Step{}, errors.New("truncated or trailing bytes")
	}
	return s, nil
}

type canonicalReader struct {
	b   []byte
	err error
}

func (r *canonicalReader) bytes(n int) []byte {
	if n < 0 || n > len(r.b) {
		r.err, r.b = errors.New("short"), nil
		return nil
	}
	out := r.b[:n]
	r.b = r.b[n:]
	return out
}

func (r *canonicalReader) count() int {
	v, n := binary.Uvarint(r.b)
	if n <= 0 || v > uint64(len(r.b)) {
		r.err, r.b = errors.New("bad length"), nil
		return 0
	}
	r.b = r.b[n:]
	return int(v)
}

func (r *canonicalReader) str() string { return string(r.bytes(r.count())) }

func (r *canonicalReader) byte() byte {
	if b := r.bytes(1); len(b) == 1 {
		return b[0]
	}
	return 0
}

func (r *canonicalReader) int() int64 {
	if b := r.bytes(8); len(b) == 8 {
		return int64(binary.BigEndian.Uint64(b))
	}
	return 0
}
