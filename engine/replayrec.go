package engine

import (
	"encoding/binary"
	"fmt"
)

// A replay record's data is the step's hash (32 bytes) and its results.
// Records written before version 2 hold the results as JSON (AppendJSON),
// which starts with '{'; since then they hold a compact form, whose first
// byte names it: replayCompact (read, no longer written) or replayMirrored.
// All three are read.
//
//	form byte, step flags (1 skipped, 2 replayed, 4 denied),
//	uvarint(len(results)), each result:
//	  flags: 1 allowed, 2 found, 4 value, 8 int, 16 ttlMs, 32 resetAt,
//	         64 retryAfterMs, 128 at
//	  varint(remaining), then for each flag set from 4 on, in that order,
//	  uvarint(len(value)) value or the field's varint,
//	  the windows: in replayCompact, uvarint(len(windows)); in
//	  replayMirrored, 0 for one window equal to the result's own allowed,
//	  remaining, resetAt and retryAfterMs (written no further), or
//	  uvarint(len(windows)+1); then each window written:
//	    flags: 1 allowed, 2 retryAfterMs; varint(remaining),
//	    varint(resetAt), varint(retryAfterMs) if flagged
//
// A hit's result takes about 20 bytes in replayCompact, against about 130
// in JSON: the replay record of a step of 8 hits is written (log, memtable,
// tables) in 0.2 KB instead of 1.1. replayMirrored leaves out the window of
// every hit of one window and every reserve of one budget, which only
// repeats its result (as a minimal answer does, see AppendMinimalJSON):
// about 11 bytes a hit.
const (
	replayCompact  = 1
	replayMirrored = 2
)

const (
	resAllowed = 1 << iota
	resFound
	resValue
	resInt
	resTTL
	resResetAt
	resRetryAfter
	resAt
)

// appendReplay appends the compact encoding of st's results, in the form
// replayMirrored.
func appendReplay(dst []byte, st *StepResult) []byte {
	var f byte
	if st.Skipped {
		f |= 1
	}
	if st.Replayed {
		f |= 2
	}
	if st.Denied {
		f |= 4
	}
	dst = append(dst, replayMirrored, f)
	dst = binary.AppendUvarint(dst, uint64(len(st.Results)))
	for i := range st.Results {
		r := &st.Results[i]
		f = 0
		if r.Allowed {
			f |= resAllowed
		}
		if r.Found {
			f |= resFound
		}
		if r.Value != "" {
			f |= resValue
		}
		if r.Int != 0 {
			f |= resInt
		}
		if r.TTLMs != 0 {
			f |= resTTL
		}
		if r.ResetAt != 0 {
			f |= resResetAt
		}
		if r.RetryAfterMs != 0 {
			f |= resRetryAfter
		}
		if r.At != 0 {
			f |= resAt
		}
		dst = append(dst, f)
		dst = binary.AppendVarint(dst, r.Remaining)
		if f&resValue != 0 {
			dst = binary.AppendUvarint(dst, uint64(len(r.Value)))
			dst = append(dst, r.Value...)
		}
		for _, v := range [...]struct {
			flag byte
			n    int64
		}{{resInt, r.Int}, {resTTL, r.TTLMs}, {resResetAt, r.ResetAt}, {resRetryAfter, r.RetryAfterMs}, {resAt, r.At}} {
			if f&v.flag != 0 {
				dst = binary.AppendVarint(dst, v.n)
			}
		}
		if len(r.Windows) == 1 && r.Windows[0] == r.window() {
			dst = append(dst, 0)
			continue
		}
		dst = binary.AppendUvarint(dst, uint64(len(r.Windows))+1)
		for j := range r.Windows {
			w := &r.Windows[j]
			f = 0
			if w.Allowed {
				f |= 1
			}
			if w.RetryAfterMs != 0 {
				f |= 2
			}
			dst = append(dst, f)
			dst = binary.AppendVarint(dst, w.Remaining)
			dst = binary.AppendVarint(dst, w.ResetAt)
			if f&2 != 0 {
				dst = binary.AppendVarint(dst, w.RetryAfterMs)
			}
		}
	}
	return dst
}

// replayReader decodes the compact encoding; the first error sticks.
type replayReader struct {
	b   []byte
	err error
}

func (d *replayReader) fail() {
	if d.err == nil {
		d.err = fmt.Errorf("%w: replay record: truncated or malformed", ErrCorrupt)
	}
	d.b = nil
}

func (d *replayReader) byte() byte {
	if len(d.b) == 0 {
		d.fail()
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *replayReader) varint() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *replayReader) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

// count reads a length of items each at least min bytes long, refusing one
// the rest of the record cannot hold.
func (d *replayReader) count(min int) int { return d.bounded(d.uvarint(), min) }

// bounded returns n, a length read of items each at least min bytes long,
// refusing one the rest of the record cannot hold.
func (d *replayReader) bounded(n uint64, min int) int {
	if d.err != nil || n > uint64(len(d.b))/uint64(min) {
		d.fail()
		return 0
	}
	return int(n)
}

// decodeReplayCompact decodes b, a record of either compact form (from its
// form byte on), into out, whose Results' capacity it reuses; out's Windows
// slices are fresh.
func decodeReplayCompact(b []byte, out *StepResult) error {
	d := replayReader{b: b[1:]}
	mirrored := b[0] == replayMirrored
	f := d.byte()
	out.Skipped, out.Replayed, out.Denied = f&1 != 0, f&2 != 0, f&4 != 0
	n := d.count(3)
	if d.err != nil {
		return d.err
	}
	if cap(out.Results) >= n {
		out.Results = out.Results[:n]
	} else {
		out.Results = make([]Result, n)
	}
	var mirror []WindowResult
	for i := range out.Results {
		r := &out.Results[i]
		*r = Result{}
		f := d.byte()
		r.Allowed, r.Found = f&resAllowed != 0, f&resFound != 0
		r.Remaining = d.varint()
		if f&resValue != 0 {
			if l := d.count(1); d.err == nil {
				r.Value, d.b = string(d.b[:l]), d.b[l:]
			}
		}
		for _, v := range [...]struct {
			flag byte
			p    *int64
		}{{resInt, &r.Int}, {resTTL, &r.TTLMs}, {resResetAt, &r.ResetAt}, {resRetryAfter, &r.RetryAfterMs}, {resAt, &r.At}} {
			if f&v.flag != 0 {
				*v.p = d.varint()
			}
		}
		var nw int
		switch {
		case !mirrored:
			nw = d.count(3)
		case len(d.b) > 0 && d.b[0] == 0:
			// One window repeating the result: restored from it, in an
			// array shared by the results that hold one.
			d.b = d.b[1:]
			if len(mirror) == cap(mirror) {
				mirror = make([]WindowResult, 0, len(out.Results)-i)
			}
			mirror = append(mirror, r.window())
			r.Windows = mirror[len(mirror)-1 : len(mirror) : len(mirror)]
		default:
			nw = d.bounded(d.uvarint()-1, 3) // 0 is taken above
		}
		if nw > 0 {
			r.Windows = make([]WindowResult, nw)
			for j := range r.Windows {
				w := &r.Windows[j]
				wf := d.byte()
				w.Allowed = wf&1 != 0
				w.Remaining, w.ResetAt = d.varint(), d.varint()
				if wf&2 != 0 {
					w.RetryAfterMs = d.varint()
				}
			}
		}
		if d.err != nil {
			return d.err
		}
	}
	if len(d.b) != 0 {
		return fmt.Errorf("%w: replay record: %d bytes past its results", ErrCorrupt, len(d.b))
	}
	return nil
}
