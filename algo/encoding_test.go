package algo_test

import (
	"bytes"
	"errors"
	"math"
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/sluicehq/sluice/algo"
)

// drawEntries draws a log as every state stores it: instants strictly
// increasing, every count in 1…MaxLimit.
func drawEntries(t *rapid.T, maxLen int) []algo.Entry {
	n := rapid.IntRange(0, maxLen).Draw(t, "entries")
	at := rapid.Int64Range(math.MinInt64/2, math.MaxInt64/2).Draw(t, "firstAt")
	log := make([]algo.Entry, n)
	for i := range log {
		log[i] = algo.Entry{At: at, N: rapid.Int64Range(1, algo.MaxLimit).Draw(t, "n")}
		at += rapid.Int64Range(1, 1<<40).Draw(t, "step")
	}
	return log
}

func drawWindowState(t *rapid.T, k algo.Kind) algo.WindowState {
	count := rapid.Int64Range(0, algo.MaxLimit)
	switch k {
	case algo.KindFixed:
		return algo.WindowState{Start: rapid.Int64().Draw(t, "start"), Count: count.Draw(t, "count")}
	case algo.KindSliding:
		return algo.WindowState{Start: rapid.Int64().Draw(t, "start"), Count: count.Draw(t, "count"), Prev: count.Draw(t, "prev")}
	case algo.KindGCRA:
		return algo.WindowState{TAT: rapid.Int64().Draw(t, "tat"), Frac: rapid.Int64Range(0, algo.MaxLimit-1).Draw(t, "frac")}
	default:
		return algo.WindowState{Log: drawEntries(t, 40)}
	}
}

func TestWindowEncodingRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		k := rapid.SampledFrom(allKinds).Draw(t, "kind")
		s := drawWindowState(t, k)
		prefix := rapid.SliceOfN(rapid.Byte(), 0, 4).Draw(t, "prefix")
		data := s.AppendBinary(k, slices.Clone(prefix))
		if !bytes.Equal(data[:len(prefix)], prefix) {
			t.Fatalf("AppendBinary overwrote its prefix")
		}
		got, err := algo.DecodeWindow(k, data[len(prefix):])
		if err != nil {
			t.Fatalf("DecodeWindow(%s, %x) = %v", k, data, err)
		}
		if !equalState(got, s) {
			t.Fatalf("round trip of %s state %+v gave %+v", k, s, got)
		}
	})
}

// TestWindowEncodingOfReachedStates round-trips states produced by hits, so
// that a state the store writes is always one it can read back.
func TestWindowEncodingOfReachedStates(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		kind := rapid.SampledFrom(allKinds).Draw(t, "kind")
		l := drawLimit(t, kind, 1000, 5000)
		var s algo.WindowState
		for _, h := range drawHits(t, l, rapid.Int64Range(0, 1<<42).Draw(t, "start"), 20) {
			s, _ = algo.Hit(l, s, h.at, h.cost)
			got, err := algo.DecodeWindow(kind, s.AppendBinary(kind, nil))
			if err != nil || !equalState(got, s) {
				t.Fatalf("round trip of %+v gave %+v, %v", s, got, err)
			}
		}
	})
}

func TestGateEncodingRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		id := rapid.Map(rapid.SliceOfN(rapid.Byte(), 0, algo.MaxLeaseID), func(b []byte) string { return string(b) })
		lease := rapid.Custom(func(t *rapid.T) algo.Lease {
			return algo.Lease{ID: id.Draw(t, "id"), ExpireAt: rapid.Int64().Draw(t, "expireAt")}
		})
		s := algo.GateState{Leases: rapid.SliceOfN(lease, 0, 20).Draw(t, "leases")}
		got, err := algo.DecodeGate(s.AppendBinary(nil))
		if err != nil || !slices.Equal(got.Leases, s.Leases) {
			t.Fatalf("round trip of %+v gave %+v, %v", s, got, err)
		}
	})
}

func TestReceiptEncodingRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		key := rapid.Map(rapid.SliceOfN(rapid.Byte(), 0, 300), func(b []byte) string { return string(b) })
		r := algo.Receipt{
			Cost: rapid.Int64Range(1, math.MaxInt64).Draw(t, "cost"),
			Keys: rapid.SliceOfN(key, 0, 6).Draw(t, "keys"),
		}
		got, err := algo.DecodeReceipt(r.AppendBinary(nil))
		if err != nil || got.Cost != r.Cost || !slices.Equal(got.Keys, r.Keys) {
			t.Fatalf("round trip of %+v gave %+v, %v", r, got, err)
		}
		// The piecewise encoders write the same bytes.
		piecewise := algo.AppendReceiptCost(nil, r.Cost)
		for _, k := range r.Keys {
			piecewise = algo.AppendReceiptKey(piecewise, k)
		}
		if !bytes.Equal(piecewise, r.AppendBinary(nil)) {
			t.Fatalf("AppendReceiptCost/Key differ from AppendBinary")
		}
	})
}

func TestPaceEncodingRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := algo.PaceState{ForcedUntil: rapid.Int64().Draw(t, "forcedUntil"), Log: drawEntries(t, 40)}
		if rapid.Bool().Draw(t, "penalized") {
			s.Hold = rapid.Int64Range(0, algo.MaxLimit).Draw(t, "hold")
			s.PenalizedAt = rapid.Int64().Draw(t, "penalizedAt")
		}
		got, err := algo.DecodePace(s.AppendBinary(nil))
		if err != nil || !equalPace(got, s) {
			t.Fatalf("round trip of %+v gave %+v, %v", s, got, err)
		}
	})
}

// TestPaceEncodingReadsRecordsWithoutAHold decodes the form written before
// the hold existed (ForcedUntil and the log, a phantom spend among its
// entries) as a state without one, and writes a state without one in that
// same form.
func TestPaceEncodingReadsRecordsWithoutAHold(t *testing.T) {
	old := le(60_000, 5, 1, 60_000, 2)
	s, err := algo.DecodePace(old)
	want := algo.PaceState{ForcedUntil: 60_000, Log: []algo.Entry{{At: 5, N: 1}, {At: 60_000, N: 2}}}
	if err != nil || !equalPace(s, want) {
		t.Fatalf("DecodePace(old form) = %+v, %v; want %+v", s, err, want)
	}
	if enc := s.AppendBinary(nil); !bytes.Equal(enc, old) {
		t.Errorf("a state without a hold encodes as %x, want the old form %x", enc, old)
	}
	held := algo.PaceState{ForcedUntil: 60_000, Hold: 2, PenalizedAt: 7, Log: []algo.Entry{{At: 5, N: 1}}}
	if enc, want := held.AppendBinary(nil), le(60_000, 5, 1, 1, 2, 7); !bytes.Equal(enc, want) {
		t.Errorf("a state with a hold encodes as %x, want %x", enc, want)
	}
}

// TestPaceEncodingOfReachedStates round-trips states produced by takes,
// claims and penalties.
func TestPaceEncodingOfReachedStates(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		l := algo.PaceLimit{Limit: rapid.Int64Range(1, 8).Draw(t, "limit"), Window: rapid.Int64Range(1, 1000).Draw(t, "window"), RefillPermille: 500}
		var s algo.PaceState
		now := rapid.Int64Range(0, 1<<42).Draw(t, "start")
		var slots []int64
		for range rapid.IntRange(1, 30).Draw(t, "ops") {
			now += rapid.Int64Range(0, l.Window).Draw(t, "gap")
			switch rapid.IntRange(0, 2).Draw(t, "op") {
			case 0:
				var d algo.PaceDecision
				if s, d = s.Take(l, now, 1, 3*l.Window); d.Allowed {
					slots = append(slots, d.At)
				}
			case 1:
				s = s.Penalize(l, now, now+rapid.Int64Range(0, 3*l.Window).Draw(t, "delay"))
			default:
				if len(slots) > 0 {
					s, _ = s.Claim(l, now, slots[0], 1, 3*l.Window)
					slots = slots[1:]
				}
			}
			got, err := algo.DecodePace(s.AppendBinary(nil))
			if err != nil || !equalPace(got, s) {
				t.Fatalf("round trip of %+v gave %+v, %v", s, got, err)
			}
		}
	})
}

func TestDecodeEmpty(t *testing.T) {
	for _, k := range allKinds {
		if s, err := algo.DecodeWindow(k, nil); err != nil || !equalState(s, algo.WindowState{}) {
			t.Errorf("DecodeWindow(%s, nil) = %+v, %v; want the empty state", k, s, err)
		}
	}
	if s, err := algo.DecodePace(nil); err != nil || !equalPace(s, algo.PaceState{}) {
		t.Errorf("DecodePace(nil) = %+v, %v", s, err)
	}
	if s, err := algo.DecodeGate(nil); err != nil || len(s.Leases) != 0 {
		t.Errorf("DecodeGate(nil) = %+v, %v", s, err)
	}
}

// le encodes vs as 8-byte little-endian words.
func le(vs ...int64) []byte {
	var b []byte
	for _, v := range vs {
		b = append(b, byte(v), byte(v>>8), byte(v>>16), byte(v>>24), byte(v>>32), byte(v>>40), byte(v>>48), byte(v>>56))
	}
	return b
}

func TestDecodeRejectsCorruptState(t *testing.T) {
	windows := []struct {
		name string
		kind algo.Kind
		data []byte
	}{
		{"fixed, short", algo.KindFixed, le(1)},
		{"fixed, long", algo.KindFixed, le(1, 2, 3)},
		{"fixed, negative count", algo.KindFixed, le(0, -1)},
		{"fixed, count above MaxLimit", algo.KindFixed, le(0, algo.MaxLimit+1)},
		{"sliding, short", algo.KindSliding, le(0, 1)},
		{"sliding, negative previous", algo.KindSliding, le(0, 1, -5)},
		{"gcra, old 8-byte form", algo.KindGCRA, le(1)},
		{"gcra, negative fraction", algo.KindGCRA, le(1, -1)},
		{"gcra, fraction too large", algo.KindGCRA, le(1, algo.MaxLimit)},
		{"log, ragged", algo.KindLog, append(le(1, 1), 0)},
		{"log, zero count", algo.KindLog, le(1, 0)},
		{"log, count above MaxLimit", algo.KindLog, le(1, algo.MaxLimit+1)},
		{"log, out of order", algo.KindLog, le(5, 1, 4, 1)},
		{"log, repeated instant", algo.KindLog, le(5, 1, 5, 1)},
		{"unknown kind", algo.Kind(0), le(1, 1)},
		{"unknown kind", algo.Kind(9), le(1, 1)},
	}
	for _, tt := range windows {
		if s, err := algo.DecodeWindow(tt.kind, tt.data); !errors.Is(err, algo.ErrCorrupt) {
			t.Errorf("%s: DecodeWindow = %+v, %v; want ErrCorrupt", tt.name, s, err)
		}
	}
	others := []struct {
		name   string
		decode func([]byte) error
		data   []byte
	}{
		{"pace, short", decodePace, []byte{1, 2, 3}},
		{"pace, ragged log", decodePace, append(le(0, 1, 1), 7)},
		{"pace, out of order", decodePace, le(0, 9, 1, 3, 1)},
		{"pace, trailer too short", decodePace, le(0, 1)},
		{"pace, unknown trailer format", decodePace, le(0, 9, 1, 2, 1, 5)},
		{"pace, negative hold", decodePace, le(0, 1, -1, 5)},
		{"pace, hold above MaxLimit", decodePace, le(0, 1, algo.MaxLimit+1, 5)},
		{"pace, empty trailer", decodePace, le(0, 1, 0, 0)},
		{"pace, out of order before a trailer", decodePace, le(0, 9, 1, 3, 1, 1, 1, 5)},
		{"gate, short", decodeGate, []byte{1, 2, 3}},
		{"gate, id longer than the data", decodeGate, append(le(5), 3, 'a')},
		{"gate, id above MaxLeaseID", decodeGate, append(append(le(5), algo.MaxLeaseID+1), bytes.Repeat([]byte{'x'}, algo.MaxLeaseID+1)...)},
		{"gate, bad varint", decodeGate, append(le(5), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01)},
		{"receipt, short", decodeReceipt, []byte{1}},
		{"receipt, zero cost", decodeReceipt, le(0)},
		{"receipt, negative cost", decodeReceipt, le(-3)},
		{"receipt, key longer than the data", decodeReceipt, append(le(1), 9, 'k')},
		{"receipt, bad varint", decodeReceipt, append(le(1), 0x80)},
	}
	for _, tt := range others {
		if err := tt.decode(tt.data); !errors.Is(err, algo.ErrCorrupt) {
			t.Errorf("%s: %v, want ErrCorrupt", tt.name, err)
		}
	}
}

func decodePace(b []byte) error    { _, err := algo.DecodePace(b); return err }
func decodeGate(b []byte) error    { _, err := algo.DecodeGate(b); return err }
func decodeReceipt(b []byte) error { _, err := algo.DecodeReceipt(b); return err }
