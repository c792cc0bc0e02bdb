package memstore

import (
	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/engine"
)

// The fast path. Nearly every rate-limit check is one batch of one shape: a
// win.hit of one window, with no replay record, perhaps followed by a
// kv.ttl of the window's key (a route quota reads how long its window has
// left). The executor runs any batch by buffering its writes and handing
// them back for the store to reserve and commit, which costs several
// lookups and copies of the one record such a batch touches. runHit runs
// that shape directly on the record: one lookup, the state decoded from and
// encoded back into the record's own buffer. Its results and effects are
// the executor's exactly (FuzzHitMatchesExecutor holds them equal); for
// anything unusual (a record of another kind, a state that does not
// decode, a log window, whose state is not of fixed size) it does nothing
// and reports false, and the executor runs the batch as usual.

// hitShape reports whether b has the shape runHit runs.
func hitShape(b *engine.Batch) bool {
	if b.OperationID != "" || len(b.Commands) == 0 || len(b.Commands) > 2 {
		return false
	}
	c := &b.Commands[0]
	if c.Op != engine.OpHit || len(c.Windows) != 1 || c.Windows[0].Kind == algo.KindLog {
		return false
	}
	return len(b.Commands) == 1 || b.Commands[1].Op == engine.OpTTL && b.Commands[1].Key == c.Windows[0].Key
}

// windowRecord is the record kind holding a window's state.
func windowRecord(k algo.Kind) engine.RecordKind {
	switch k {
	case algo.KindFixed:
		return engine.RecFixed
	case algo.KindSliding:
		return engine.RecSliding
	case algo.KindGCRA:
		return engine.RecGCRA
	}
	return engine.RecLog
}

// runHit runs b, which has the shape hitShape accepts, on sh at now, whose
// lock the caller holds. It reports false if it left b to the executor,
// having changed nothing.
func (s *Store) runHit(sh *shard, b *engine.Batch, phash uint64, now int64, left int, out *engine.StepResult) (bool, error) {
	c := &b.Commands[0]
	w := &c.Windows[0]
	kind := windowRecord(w.Kind)
	v := &sh.view
	v.reset(sh, b.Partition, phash)
	defer v.reset(nil, "", 0) // hold no reference to the caller's strings

	r := v.lookup(w.Key)
	var cur algo.WindowState
	if r != nil && r.Live(now) {
		if r.Kind != kind {
			return false, nil // the executor reports the wrong type
		}
		var err error
		if cur, err = algo.DecodeWindow(w.Kind, r.Data); err != nil {
			return false, nil // the executor reports the corrupt record
		}
	}
	lim := algo.Limit{Kind: w.Kind, Limit: w.Limit, Window: w.WindowMs}
	next, d := algo.Hit(lim, cur, now, c.Cost)
	if d.Allowed && r == nil {
		// A new key: reserve it against the cap as the executor's writes
		// would be, sweeping if the store is full. Below the cap that is
		// reserveKeys' first step, taken here without building its write.
		if s.keys.Add(1) > s.max {
			s.keys.Add(-1)
			sh.one[0] = engine.Write{Key: w.Key}
			cs := [1]change{{v, sh.one[:]}}
			err := s.reserveKeys(now, left, cs[:])
			sh.one[0] = engine.Write{}
			if err != nil {
				return true, err
			}
		}
		r = v.create(w.Key)
	}

	out.Skipped, out.Replayed, out.Denied = false, false, !d.Allowed
	out.Results = out.Results[:0]
	res := nextResult(out)
	res.Allowed = d.Allowed
	res.Remaining = min(algo.MaxLimit, d.Remaining)
	res.ResetAt = max(0, d.ResetAt)
	res.RetryAfterMs = max(0, d.RetryAfter)
	res.Windows = append(res.Windows, engine.WindowResult{Allowed: d.Allowed, Remaining: d.Remaining, ResetAt: d.ResetAt, RetryAfterMs: d.RetryAfter})

	if d.Allowed {
		buf := r.Data[:0]
		if cap(buf) < len(r.inline) {
			buf = r.inline[:0]
		}
		r.Kind, r.ExpireAt = kind, now+max(1, lim.TTL(next, now))
		r.Data = next.AppendBinary(w.Kind, buf)
		sh.nextExpiry = min(sh.nextExpiry, r.ExpireAt)
	}
	if len(b.Commands) == 2 {
		ttl := nextResult(out)
		ttl.Allowed = true
		if r != nil && r.Live(now) {
			ttl.Found, ttl.TTLMs = true, r.ExpireAt-now
		}
	}
	return true, nil
}

// nextResult appends a zero Result to out, reusing the capacity of the
// slot's previous Windows slice, as the executor does.
func nextResult(out *engine.StepResult) *engine.Result {
	n := len(out.Results)
	if n < cap(out.Results) {
		out.Results = out.Results[:n+1]
		r := &out.Results[n]
		*r = engine.Result{Windows: r.Windows[:0]}
		return r
	}
	out.Results = append(out.Results, engine.Result{})
	return &out.Results[n]
}
