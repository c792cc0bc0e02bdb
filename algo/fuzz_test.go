package algo_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/sluicehq/sluice/algo"
)

// inBounds restates the documented bounds of a window and a cost.
func inBounds(l algo.Limit, cost int64) bool {
	maxLimit := algo.MaxLimit
	switch l.Kind {
	case algo.KindFixed, algo.KindSliding, algo.KindGCRA:
	case algo.KindLog:
		maxLimit = algo.MaxLogLimit
	default:
		return false
	}
	return 1 <= l.Limit && l.Limit <= maxLimit &&
		1 <= l.Window && l.Window <= algo.MaxWindow &&
		1 <= cost && cost <= l.Limit
}

// fuzzArrivals decodes up to 16 arrivals from data, 5 bytes each: a gap
// after the previous arrival (a little-endian uint32 reduced to at most
// three windows) and a selector choosing between cost and 1.
func fuzzArrivals(l algo.Limit, start, cost int64, data []byte) []hit {
	var hits []hit
	at := start
	for len(data) >= 5 && len(hits) < 16 {
		at += int64(binary.LittleEndian.Uint32(data)) % (3*l.Window + 1)
		c := cost
		if data[4]&1 == 1 {
			c = 1
		}
		hits = append(hits, hit{at: at, cost: c})
		data = data[5:]
	}
	return hits
}

// FuzzWindow feeds arbitrary limits, windows, costs and arrivals to every
// window kind. Anything outside the bounds must be refused by Validate or
// ValidateCost with ErrInvalid, so that no extreme value ever reaches the
// arithmetic to wrap or to be allowed. Anything inside must obey every
// decision rule, give an exact retry-after and, where the numbers are small
// enough for it, agree with the reference.
func FuzzWindow(f *testing.F) {
	arrivals := []byte{0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0xe8, 3, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0}
	for _, kind := range allKinds {
		k := uint8(kind)
		f.Add(k, int64(10), int64(1000), int64(1), int64(0), arrivals)
		f.Add(k, int64(1), int64(1), int64(1), int64(1<<41), arrivals)
		f.Add(k, int64(3), int64(1000), int64(3), int64(999), arrivals)
		f.Add(k, algo.MaxLimit, algo.MaxWindow, algo.MaxLimit, int64(1<<42-1), arrivals)
		f.Add(k, algo.MaxLogLimit, int64(86_400_000), int64(1), int64(0), arrivals)
		// Each of these must be refused.
		f.Add(k, int64(10), int64(1000), int64(math.MaxInt64), int64(0), arrivals)
		f.Add(k, int64(math.MaxInt64), int64(1000), int64(math.MaxInt64), int64(0), arrivals)
		f.Add(k, int64(10), int64(1<<62), int64(1), int64(0), arrivals)
		f.Add(k, int64(0), int64(1000), int64(1), int64(0), arrivals)
		f.Add(k, int64(-5), int64(1000), int64(-5), int64(0), arrivals)
		f.Add(k, int64(10), int64(1000), int64(11), int64(0), arrivals)
		f.Add(k, int64(10), int64(0), int64(1), int64(0), arrivals)
		f.Add(k, int64(10), int64(math.MinInt64), int64(1), int64(0), arrivals)
	}
	f.Add(uint8(0), int64(10), int64(1000), int64(1), int64(0), arrivals)
	f.Add(uint8(200), int64(10), int64(1000), int64(1), int64(0), arrivals)

	f.Fuzz(func(t *testing.T, kind uint8, limit, window, cost, start int64, data []byte) {
		l := algo.Limit{Kind: algo.Kind(kind), Limit: limit, Window: window}
		err := l.Validate()
		if err == nil {
			err = l.ValidateCost(cost)
		}
		if valid := inBounds(l, cost); (err == nil) != valid {
			t.Fatalf("Validate and ValidateCost(%+v, cost %d) = %v, but in bounds: %v", l, cost, err, valid)
		}
		if err != nil {
			if !errors.Is(err, algo.ErrInvalid) {
				t.Fatalf("Validate and ValidateCost(%+v, cost %d) = %v, want ErrInvalid", l, cost, err)
			}
			return
		}
		start = int64(uint64(start) % (1 << 42))
		small := l.Limit <= 1<<16 && l.Window <= 1<<16 && start < 1<<30
		ref := &reference{l: l}
		var s algo.WindowState
		for _, h := range fuzzArrivals(l, start, cost, data) {
			before := cloneState(s)
			next, d := algo.Hit(l, s, h.at, h.cost)
			checkDecision(t, l, h.at, d)
			checkRetryExact(t, l, s, h.at, h.cost, d)
			if !d.Allowed && !equalState(next, before) {
				t.Fatalf("denial changed the state: %+v → %+v", before, next)
			}
			if n := int64(len(next.Log)); n > l.Limit {
				t.Fatalf("log holds %d entries > limit %d", n, l.Limit)
			}
			if d.Allowed {
				checkTTL(t, l, next, h.at, small || l.Kind != algo.KindSliding)
			}
			if small {
				ok, rem := ref.decide(h.at, h.cost)
				if ok != d.Allowed || rem != d.Remaining {
					t.Fatalf("%+v, state %+v, cost %d at %d: got %+v, reference allowed %v remaining %d",
						l, s, h.cost, h.at, d, ok, rem)
				}
				if ok {
					ref.admit(h.at, h.cost)
				}
			}
			s = next
		}
		if small {
			ref.checkRolling(t)
		}
	})
}

// FuzzDecode feeds arbitrary bytes to every Decode function. None may panic;
// every error wraps ErrCorrupt; and whatever decodes re-encodes to a form
// that decodes to the same state (for the fixed-width encodings, to the very
// same bytes).
func FuzzDecode(f *testing.F) {
	f.Add([]byte{})
	f.Add(make([]byte, 8))
	f.Add(make([]byte, 16))
	f.Add(make([]byte, 24))
	f.Add(algo.WindowState{Log: []algo.Entry{{At: 1, N: 2}, {At: 5, N: 1}}}.AppendBinary(algo.KindLog, nil))
	f.Add(algo.WindowState{TAT: 1000, Frac: 2}.AppendBinary(algo.KindGCRA, nil))
	f.Add(algo.GateState{Leases: []algo.Lease{{ID: "worker-1", ExpireAt: 99}, {ID: "", ExpireAt: 7}}}.AppendBinary(nil))
	f.Add(algo.Receipt{Cost: 3, Keys: []string{"source", "target"}}.AppendBinary(nil))
	f.Add(algo.PaceState{ForcedUntil: 60_000, Log: []algo.Entry{{At: 5, N: 1}}}.AppendBinary(nil))
	f.Add(algo.PaceState{ForcedUntil: 60_000, Hold: 2, PenalizedAt: 7, Log: []algo.Entry{{At: 5, N: 1}}}.AppendBinary(nil))
	f.Add(append(make([]byte, 8), 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01))

	f.Fuzz(func(t *testing.T, data []byte) {
		for _, k := range append(slices.Clone(allKinds), 0, 9) {
			s, err := algo.DecodeWindow(k, data)
			if err != nil {
				if !errors.Is(err, algo.ErrCorrupt) {
					t.Fatalf("DecodeWindow(%s) = %v, want ErrCorrupt", k, err)
				}
				continue
			}
			if enc := s.AppendBinary(k, nil); len(data) > 0 && !bytes.Equal(enc, data) {
				t.Fatalf("DecodeWindow(%s, %x) re-encodes as %x", k, data, enc)
			}
		}
		if s, err := algo.DecodePace(data); err != nil {
			if !errors.Is(err, algo.ErrCorrupt) {
				t.Fatalf("DecodePace = %v, want ErrCorrupt", err)
			}
		} else if enc := s.AppendBinary(nil); len(data) > 0 && !bytes.Equal(enc, data) {
			t.Fatalf("DecodePace(%x) re-encodes as %x", data, enc)
		}
		if g, err := algo.DecodeGate(data); err != nil {
			if !errors.Is(err, algo.ErrCorrupt) {
				t.Fatalf("DecodeGate = %v, want ErrCorrupt", err)
			}
		} else if again, err := algo.DecodeGate(g.AppendBinary(nil)); err != nil || !slices.Equal(again.Leases, g.Leases) {
			t.Fatalf("DecodeGate(%x) = %+v, which re-decodes as %+v, %v", data, g, again, err)
		}
		if r, err := algo.DecodeReceipt(data); err != nil {
			if !errors.Is(err, algo.ErrCorrupt) {
				t.Fatalf("DecodeReceipt = %v, want ErrCorrupt", err)
			}
		} else if again, err := algo.DecodeReceipt(r.AppendBinary(nil)); err != nil || again.Cost != r.Cost || !slices.Equal(again.Keys, r.Keys) {
			t.Fatalf("DecodeReceipt(%x) = %+v, which re-decodes as %+v, %v", data, r, again, err)
		}
	})
}
