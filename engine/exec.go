package engine

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"

	"github.com/sluicehq/sluice/algo"
)

// Executor evaluates batches for stores that keep their records in Go (the
// memory and embedded stores; the Redis store runs the same logic in Lua).
// It reads through a View, buffers every write, and hands the writes back
// only when the whole batch succeeded, so a store commits all of a batch or
// none of it.
//
// An Executor is not safe for concurrent use; it is meant to be owned by the
// lock that serialises a partition, and reused, so that steady-state batches
// allocate nothing.
type Executor struct {
	view    View
	now     int64
	pending []Write
	arena   []byte
	keybuf  []byte
	mutated bool
}

// Run evaluates b at now against v and fills out. It returns the writes to
// commit atomically, valid until the next call to Run. On error nothing must
// be committed.
func (x *Executor) Run(v View, now int64, b *Batch, out *StepResult) ([]Write, error) {
	x.view, x.now, x.mutated = v, now, false
	x.pending = x.pending[:0]
	x.arena = x.arena[:0]
	defer func() { x.view = nil }()
	resetStep(out)

	var replay string
	if b.OperationID != "" {
		x.keybuf = replayKey(x.keybuf[:0], b.OperationID, b.Step)
		replay = string(x.keybuf)
		if rec, ok := x.view.Get(replay); ok && rec.Live(now) {
			return nil, decodeReplay(rec, b.Hash, out)
		}
	}
	for i := range b.Commands {
		r := nextResult(out)
		if err := x.run(&b.Commands[i], r); err != nil {
			return nil, fmt.Errorf("command %d (%s): %w", i, b.Commands[i].Op, err)
		}
		out.Denied = out.Denied || !r.Allowed
	}
	if replay != "" && x.mutated {
		start := len(x.arena)
		x.arena = append(x.arena, b.Hash[:]...)
		x.arena = appendReplay(x.arena, out)
		x.put(replay, RecReplay, now+ReplayTTL.Milliseconds(), x.arena[start:len(x.arena):len(x.arena)])
	}
	return x.pending, nil
}

func decodeReplay(rec Record, hash [32]byte, out *StepResult) error {
	if rec.Kind != RecReplay || len(rec.Data) < len(hash) {
		return fmt.Errorf("%w: replay record", ErrCorrupt)
	}
	if !bytes.Equal(rec.Data[:len(hash)], hash[:]) {
		return ErrOperationConflict
	}
	if data := rec.Data[len(hash):]; len(data) > 0 && (data[0] == replayCompact || data[0] == replayMirrored) {
		if err := decodeReplayCompact(data, out); err != nil {
			return err
		}
		out.Replayed = true
		return nil
	}
	// A record written as JSON, before the compact form.
	// Unmarshal decodes into the elements a reused out still holds past its
	// length, keeping every field the record omits: zero them first.
	clear(out.Results[:cap(out.Results)])
	if err := json.Unmarshal(rec.Data[len(hash):], out); err != nil {
		return fmt.Errorf("%w: replay record: %w", ErrCorrupt, err)
	}
	out.Replayed = true
	return nil
}

func resetStep(out *StepResult) {
	out.Skipped, out.Replayed, out.Denied = false, false, false
	out.Results = out.Results[:0]
}

// nextResult appends a zero Result to out, reusing the capacity of the
// slot's previous Windows slice so a reused StepResult allocates nothing.
func nextResult(out *StepResult) *Result {
	n := len(out.Results)
	if n < cap(out.Results) {
		out.Results = out.Results[:n+1]
		r := &out.Results[n]
		*r = Result{Windows: r.Windows[:0]}
		return r
	}
	out.Results = append(out.Results, Result{})
	return &out.Results[n]
}

// get returns the live record at key as the batch sees it so far.
func (x *Executor) get(key string) (Record, bool) {
	for i := len(x.pending) - 1; i >= 0; i-- {
		if w := &x.pending[i]; w.Key == key {
			return w.Rec, !w.Delete
		}
	}
	rec, ok := x.view.Get(key)
	if !ok || !rec.Live(x.now) {
		return Record{}, false
	}
	return rec, true
}

func (x *Executor) put(key string, kind RecordKind, expireAt int64, data []byte) {
	x.mutated = true
	x.pending = append(x.pending, Write{Key: key, Rec: Record{Kind: kind, ExpireAt: expireAt, Data: data}})
}

func (x *Executor) del(key string) {
	x.mutated = true
	x.pending = append(x.pending, Write{Key: key, Delete: true})
}

// mark returns the arena's length, to be passed to since after appending.
func (x *Executor) mark() int { return len(x.arena) }

// since returns what was appended to the arena after mark m, capped so that
// later appends cannot write into it.
func (x *Executor) since(m int) []byte { return x.arena[m:len(x.arena):len(x.arena)] }

func (x *Executor) run(c *Command, r *Result) error {
	switch c.Op {
	case OpHit:
		return x.hit(c, r)
	case OpGet:
		return x.kvGet(c, r)
	case OpSet:
		return x.kvSet(c, r)
	case OpDel:
		r.Allowed = true
		if _, ok := x.get(c.Key); ok {
			r.Found = true
			x.del(c.Key)
		}
		return nil
	case OpTTL:
		r.Allowed = true
		if rec, ok := x.get(c.Key); ok {
			r.Found, r.TTLMs = true, rec.ExpireAt-x.now
		}
		return nil
	case OpExpire:
		return x.kvExpire(c, r)
	case OpIncr:
		return x.kvIncr(c, r)
	case OpReserve:
		return x.reserve(c, r)
	case OpRefund:
		return x.refund(c, r)
	case OpAcquire, OpRenew, OpRelease:
		return x.gate(c, r)
	case OpPaceTake, OpPaceClaim, OpPacePenalize:
		return x.pace(c, r)
	}
	return invalid("unknown op %q", c.Op)
}

func windowRecord(k algo.Kind) RecordKind {
	switch k {
	case algo.KindFixed:
		return RecFixed
	case algo.KindSliding:
		return RecSliding
	case algo.KindLog:
		return RecLog
	case algo.KindGCRA:
		return RecGCRA
	}
	return 0
}

func wrongType(key string, have, want RecordKind) error {
	return fmt.Errorf("%w: key %q holds a %s record, not a %s", ErrWrongType, key, have, want)
}

func (x *Executor) hit(c *Command, r *Result) error {
	var cur, next [MaxWindowsPerHit]algo.WindowState
	r.Allowed = true
	r.Remaining = algo.MaxLimit
	for i := range c.Windows {
		w := &c.Windows[i]
		kind := windowRecord(w.Kind)
		st := &cur[i]
		if rec, ok := x.get(w.Key); ok {
			if rec.Kind != kind {
				return wrongType(w.Key, rec.Kind, kind)
			}
			var err error
			if *st, err = algo.DecodeWindow(w.Kind, rec.Data); err != nil {
				return wrapAlgo(err)
			}
		}
		var d algo.Decision
		next[i], d = algo.Hit(w.limit(), *st, x.now, c.Cost)
		r.Windows = append(r.Windows, WindowResult{Allowed: d.Allowed, Remaining: d.Remaining, ResetAt: d.ResetAt, RetryAfterMs: d.RetryAfter})
		r.Allowed = r.Allowed && d.Allowed
		r.RetryAfterMs = max(r.RetryAfterMs, d.RetryAfter)
	}
	for i := range r.Windows {
		wr := &r.Windows[i]
		if !r.Allowed && wr.Allowed {
			// This window would have admitted the hit but was not charged:
			// report it as it stands.
			p := algo.Peek(c.Windows[i].limit(), cur[i], x.now)
			wr.Remaining, wr.ResetAt = p.Remaining, p.ResetAt
		}
		r.Remaining = min(r.Remaining, wr.Remaining)
		r.ResetAt = max(r.ResetAt, wr.ResetAt)
	}
	if !r.Allowed {
		return nil
	}
	for i := range c.Windows {
		w := &c.Windows[i]
		l := w.limit()
		m := x.mark()
		x.arena = next[i].AppendBinary(w.Kind, x.arena)
		x.put(w.Key, windowRecord(w.Kind), x.now+max(1, l.TTL(next[i], x.now)), x.since(m))
	}
	return nil
}

func (x *Executor) value(key string) (Record, bool, error) {
	rec, ok := x.get(key)
	if ok && rec.Kind != RecValue {
		return rec, ok, wrongType(key, rec.Kind, RecValue)
	}
	return rec, ok, nil
}

func (x *Executor) kvGet(c *Command, r *Result) error {
	rec, ok, err := x.value(c.Key)
	if err != nil {
		return err
	}
	r.Allowed = true
	if ok {
		r.Found, r.Value = true, string(rec.Data)
	}
	return nil
}

func (x *Executor) kvSet(c *Command, r *Result) error {
	rec, ok, err := x.value(c.Key)
	if err != nil {
		return err
	}
	switch c.Mode {
	case SetNX:
		r.Allowed = !ok
	case SetXX:
		r.Allowed = ok
	default:
		r.Allowed = true
	}
	r.Found = ok
	if !r.Allowed {
		return nil
	}
	expireAt := x.now + c.TTLMs
	if c.KeepTTL && ok {
		expireAt = rec.ExpireAt
	}
	m := x.mark()
	x.arena = append(x.arena, c.Value...)
	x.put(c.Key, RecValue, expireAt, x.since(m))
	return nil
}

func (x *Executor) kvExpire(c *Command, r *Result) error {
	rec, ok, err := x.value(c.Key)
	if err != nil {
		return err
	}
	r.Allowed = true
	if ok {
		r.Found = true
		x.put(c.Key, RecValue, x.now+c.TTLMs, rec.Data)
	}
	return nil
}

// counter reads the integer at key; ok is false when the key is absent.
func (x *Executor) counter(key string) (n int64, rec Record, ok bool, err error) {
	rec, ok, err = x.value(key)
	if err != nil || !ok {
		return 0, rec, ok, err
	}
	n, valid := algo.ParseCounter(rec.Data)
	if !valid {
		return 0, rec, ok, fmt.Errorf("%w: key %q holds a value that is not an integer", ErrWrongType, key)
	}
	return n, rec, ok, nil
}

func (x *Executor) putCounter(key string, n, expireAt int64) {
	m := x.mark()
	x.arena = algo.AppendCounter(x.arena, n)
	x.put(key, RecValue, expireAt, x.since(m))
}

func (x *Executor) kvIncr(c *Command, r *Result) error {
	cur, rec, ok, err := x.counter(c.Key)
	if err != nil {
		return err
	}
	n, err := algo.AddInt(cur, c.Delta)
	if err != nil {
		return wrapAlgo(err)
	}
	expireAt := x.now + c.TTLMs
	if ok {
		expireAt = rec.ExpireAt
	}
	r.Allowed, r.Found, r.Int = true, ok, n
	x.putCounter(c.Key, n, expireAt)
	return nil
}

func (x *Executor) reserve(c *Command, r *Result) error {
	var next [MaxBudgets]algo.BudgetState
	var empty [MaxBudgets]bool // absent or expired before the reservation
	r.Allowed = true
	r.Remaining = algo.MaxLimit
	receiptExpiry := int64(0)
	if c.Receipt != "" {
		// A receipt replaces an earlier receipt, never another record.
		if rec, ok := x.get(c.Receipt); ok && rec.Kind != RecReceipt {
			return wrongType(c.Receipt, rec.Kind, RecReceipt)
		}
	}
	for i := range c.Budgets {
		b := &c.Budgets[i]
		n, rec, ok, err := x.counter(b.Key)
		if err != nil {
			return err
		}
		// An absent budget is an expired one, at any now: the zero state
		// would be a live window ending at the Unix epoch before it.
		st := algo.BudgetState{ExpireAt: x.now}
		if ok {
			st = algo.BudgetState{Count: n, ExpireAt: rec.ExpireAt}
		}
		empty[i] = !ok
		var d algo.Decision
		next[i], d = algo.Budget{Limit: b.Limit, Window: b.WindowMs}.Reserve(st, x.now, c.Cost)
		r.Windows = append(r.Windows, WindowResult{Allowed: d.Allowed, Remaining: d.Remaining, ResetAt: d.ResetAt, RetryAfterMs: d.RetryAfter})
		r.Allowed = r.Allowed && d.Allowed
		r.RetryAfterMs = max(r.RetryAfterMs, d.RetryAfter)
		if b.Refundable && (receiptExpiry == 0 || next[i].ExpireAt < receiptExpiry) {
			receiptExpiry = next[i].ExpireAt
		}
	}
	for i := range r.Windows {
		wr := &r.Windows[i]
		if !r.Allowed && wr.Allowed {
			// Nothing was reserved: report what the budget had, saturating
			// like the remaining it was computed as (a counter kv.incr
			// drove far below zero has all of int64 left), and an empty
			// budget as empty now: no window was anchored.
			wr.Remaining = min(wr.Remaining, math.MaxInt64-c.Cost) + c.Cost
			if empty[i] {
				wr.ResetAt = x.now
			}
		}
		r.Remaining = min(r.Remaining, wr.Remaining)
		r.ResetAt = max(r.ResetAt, wr.ResetAt)
	}
	if !r.Allowed {
		return nil
	}
	for i := range c.Budgets {
		x.putCounter(c.Budgets[i].Key, next[i].Count, next[i].ExpireAt)
	}
	if c.Receipt != "" {
		m := x.mark()
		x.arena = algo.AppendReceiptCost(x.arena, c.Cost)
		for i := range c.Budgets {
			if c.Budgets[i].Refundable {
				x.arena = algo.AppendReceiptKey(x.arena, c.Budgets[i].Key)
			}
		}
		x.put(c.Receipt, RecReceipt, receiptExpiry, x.since(m))
	}
	return nil
}

func (x *Executor) refund(c *Command, r *Result) error {
	r.Allowed = true
	rec, ok := x.get(c.Key)
	if !ok {
		return nil
	}
	if rec.Kind != RecReceipt {
		return wrongType(c.Key, rec.Kind, RecReceipt)
	}
	receipt, err := algo.DecodeReceipt(rec.Data)
	if err != nil {
		return wrapAlgo(err)
	}
	for _, key := range receipt.Keys {
		n, brec, live, err := x.counter(key)
		if err != nil {
			return err
		}
		if !live {
			continue // the budget's window ended: nothing to return
		}
		st := algo.BudgetState{Count: n, ExpireAt: brec.ExpireAt}.Refund(x.now, receipt.Cost)
		x.putCounter(key, st.Count, st.ExpireAt)
	}
	r.Found = true
	x.del(c.Key)
	return nil
}

func (x *Executor) gate(c *Command, r *Result) error {
	var st algo.GateState
	if rec, ok := x.get(c.Key); ok {
		if rec.Kind != RecGate {
			return wrongType(c.Key, rec.Kind, RecGate)
		}
		var err error
		if st, err = algo.DecodeGate(rec.Data); err != nil {
			return wrapAlgo(err)
		}
	}
	var next algo.GateState
	changed := false
	switch c.Op {
	case OpAcquire:
		var d algo.Decision
		next, d = st.Acquire(x.now, c.Lease, c.Limit, c.TTLMs)
		r.Allowed, r.Remaining, r.ResetAt, r.RetryAfterMs = d.Allowed, d.Remaining, d.ResetAt, d.RetryAfter
		changed = d.Allowed
	case OpRenew:
		next, r.Found = st.Renew(x.now, c.Lease, c.TTLMs)
		r.Allowed, changed = true, r.Found
		r.ResetAt = next.ExpireAt()
	case OpRelease:
		next, r.Found = st.Release(x.now, c.Lease)
		r.Allowed, changed = true, r.Found
	}
	if !changed {
		return nil
	}
	if len(next.Leases) == 0 {
		x.del(c.Key)
		return nil
	}
	m := x.mark()
	x.arena = next.AppendBinary(x.arena)
	x.put(c.Key, RecGate, next.ExpireAt(), x.since(m))
	return nil
}

func (x *Executor) pace(c *Command, r *Result) error {
	var st algo.PaceState
	if rec, ok := x.get(c.Key); ok {
		if rec.Kind != RecPace {
			return wrongType(c.Key, rec.Kind, RecPace)
		}
		var err error
		if st, err = algo.DecodePace(rec.Data); err != nil {
			return wrapAlgo(err)
		}
	}
	l := c.paceLimit()
	var next algo.PaceState
	changed := true
	switch c.Op {
	case OpPaceTake, OpPaceClaim:
		var d algo.PaceDecision
		if c.Op == OpPaceTake {
			next, d = st.Take(l, x.now, c.Cost, c.MaxWaitMs)
		} else {
			next, d = st.Claim(l, x.now, c.At, c.Cost, c.MaxWaitMs)
		}
		r.Allowed, r.At, r.Remaining, r.ResetAt, r.RetryAfterMs = d.Allowed, d.At, d.Remaining, d.ResetAt, d.RetryAfter
		if c.Op == OpPaceTake {
			changed = d.Allowed
		} else {
			// A claim changes the log only when a penalty moved its slot
			// (re-reserved, or released if the new wait is too long).
			changed = x.now >= c.At && c.At < st.ForcedUntil
		}
	case OpPacePenalize:
		next = st.Penalize(l, x.now, x.now+c.DelayMs)
		r.Allowed, r.At = true, next.ForcedUntil
		r.Remaining = max(0, l.Limit-next.Used(l, x.now))
		changed = next.ForcedUntil != st.ForcedUntil
	}
	if !changed {
		return nil
	}
	m := x.mark()
	x.arena = next.AppendBinary(x.arena)
	x.put(c.Key, RecPace, max(x.now+1, next.ExpireAt(l)), x.since(m))
	return nil
}
