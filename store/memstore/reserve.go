package memstore

import (
	"math"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/engine"
)

// The reserve fast path. A batch of one res.reserve without a receipt —
// what admission makes for every fair RPC its quota leases do not cover
// (an identity's quotas) and every lease of a family's allowance — reads up to engine.MaxBudgets counters
// and writes them back. Through the executor that costs a lookup of each
// counter to read it, another to count the keys its writes would create,
// and another to commit it, each hashing the partition and the key again.
// runReserve runs it on the records directly: one lookup each, the
// counters decoded from and encoded back into the records' own buffers.
// Its results and effects are the executor's exactly
// (TestFastPathMatchesExecutor holds them equal). It takes only budgets
// whose counters all exist, live: a budget to create, an expired counter,
// a record of another kind or one that does not parse leaves the batch to
// the executor, having changed nothing.

// reserveShape reports whether b has the shape runReserve runs.
func reserveShape(b *engine.Batch) bool {
	return b.OperationID == "" && len(b.Commands) == 1 && b.Commands[0].Op == engine.OpReserve && b.Commands[0].Receipt == ""
}

// runReserve runs b, which has the shape reserveShape accepts, on sh at
// now, whose lock the caller holds. It reports false if it left b to the
// executor, having changed nothing.
func (s *Store) runReserve(sh *shard, b *engine.Batch, phash uint64, now int64, out *engine.StepResult) bool {
	v := &sh.view
	v.reset(sh, b.Partition, phash)
	defer v.reset(nil, "", 0) // hold no reference to the caller's strings
	var rs reservation
	if !rs.evaluate(v, b, now, out) {
		return false
	}
	if !out.Denied {
		rs.commit(sh)
	}
	return true
}

// reservation is a res.reserve batch evaluated on its counters' records,
// to be committed if allowed.
type reservation struct {
	n    int
	recs [engine.MaxBudgets]*record
	next [engine.MaxBudgets]algo.BudgetState
}

// evaluate evaluates b, which has the shape reserveShape accepts, on v's
// partition at now and writes its outcome to out, changing no record. It
// reports false, having written nothing, if it leaves b to the executor.
func (rs *reservation) evaluate(v *view, b *engine.Batch, now int64, out *engine.StepResult) bool {
	c := &b.Commands[0]
	var ds [engine.MaxBudgets]algo.Decision
	allowed := true
	for i := range c.Budgets {
		bu := &c.Budgets[i]
		r := v.lookup(bu.Key)
		if r == nil || !r.Live(now) || r.Kind != engine.RecValue {
			return false // a counter to create, or one the executor must judge
		}
		n, ok := algo.ParseCounter(r.Data)
		if !ok {
			return false // the executor reports the wrong type
		}
		rs.recs[i] = r
		rs.next[i], ds[i] = algo.Budget{Limit: bu.Limit, Window: bu.WindowMs}.Reserve(algo.BudgetState{Count: n, ExpireAt: r.ExpireAt}, now, c.Cost)
		allowed = allowed && ds[i].Allowed
	}
	rs.n = len(c.Budgets)

	out.Skipped, out.Replayed, out.Denied = false, false, !allowed
	out.Results = out.Results[:0]
	res := nextResult(out)
	res.Allowed = allowed
	res.Remaining = algo.MaxLimit
	for i := range c.Budgets {
		d := &ds[i]
		res.RetryAfterMs = max(res.RetryAfterMs, d.RetryAfter)
		remaining := d.Remaining
		if !allowed && d.Allowed {
			// Nothing is reserved on a budget that allowed it; saturate as
			// the executor does.
			remaining = min(remaining, math.MaxInt64-c.Cost) + c.Cost
		}
		res.Windows = append(res.Windows, engine.WindowResult{Allowed: d.Allowed, Remaining: remaining, ResetAt: d.ResetAt, RetryAfterMs: d.RetryAfter})
		res.Remaining = min(res.Remaining, remaining)
		res.ResetAt = max(res.ResetAt, d.ResetAt)
	}
	return true
}

// commit writes the counters of an allowed reservation back into their
// records, in sh.
func (rs *reservation) commit(sh *shard) {
	for i, r := range rs.recs[:rs.n] {
		r.ExpireAt = rs.next[i].ExpireAt
		buf := r.Data[:0]
		if cap(buf) < len(r.inline) {
			buf = r.inline[:0] // a counter's text always fits
		}
		r.Data = algo.AppendCounter(buf, rs.next[i].Count)
		sh.nextExpiry = min(sh.nextExpiry, r.ExpireAt)
	}
}
