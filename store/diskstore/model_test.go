package diskstore

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/testclock"
)

// The model test drives a store with a random mix of batches (plain,
// deferred, joint and replay-safe), checkpoints, sweeps, evictions and
// clock advances, and keeps beside it a plain map of what every
// acknowledged call left. After every operation the store must read as
// the map; at random points a copy of its file system as a power loss
// would leave it must open and read as the map too: every acknowledged
// call survives, whether its rows were written by a checkpoint, by an
// eviction, or are still only in the journal.

// The records of every model partition: counters, two fixed windows, and
// a full window (the blocker) that denies every hit naming it, so that a
// hit on a window and the blocker reads the window without charging it.
var (
	modelCounters = []string{"c0", "c1", "c2"}
	modelWindows  = []engine.Window{
		{Key: "w0", Kind: algo.KindFixed, Limit: 5, WindowMs: 20_000},
		{Key: "w1", Kind: algo.KindFixed, Limit: 12, WindowMs: 90_000},
	}
	modelBlocker = engine.Window{Key: "blk", Kind: algo.KindFixed, Limit: 1, WindowMs: 24 * 60 * 60 * 1000}
	modelTTLs    = []int64{3_000, 20_000, 60_000, 240_000}
)

const modelPartitions = 16

// mrec is one record of the model: a counter's value, or a fixed window's
// start and count.
type mrec struct {
	window   bool
	n        int64 // the counter, or the window's count
	start    int64 // the window's bucket start
	expireAt int64
}

// mreplay is a replay record of the model: the step's results as first
// answered.
type mreplay struct {
	expireAt int64
	res      engine.StepResult
}

type jmodel struct {
	recs    map[string]map[string]mrec // partition → key → record
	replays map[string]mreplay         // operation id/step → record
}

func newModel() *jmodel {
	return &jmodel{recs: make(map[string]map[string]mrec), replays: make(map[string]mreplay)}
}

func (m *jmodel) clone() *jmodel {
	c := newModel()
	for p, recs := range m.recs {
		c.recs[p] = maps.Clone(recs)
	}
	c.replays = maps.Clone(m.replays) // results are never changed once recorded
	return c
}

// live returns the record at key of partition p, if live at now.
func (m *jmodel) live(recs map[string]mrec, key string, now int64) (mrec, bool) {
	r, ok := recs[key]
	if !ok || r.expireAt <= now {
		return mrec{}, false
	}
	return r, true
}

// run evaluates cmds on p at now as the engine does, against a copy of
// p's records, and returns the results and the records as the batch
// leaves them, for the caller to commit (or not).
func (m *jmodel) run(p string, cmds []engine.Command, now int64) (engine.StepResult, map[string]mrec, bool) {
	recs := maps.Clone(m.recs[p])
	if recs == nil {
		recs = make(map[string]mrec)
	}
	var out engine.StepResult
	mutated := false
	for _, c := range cmds {
		var r engine.Result
		switch c.Op {
		case engine.OpIncr:
			cur, ok := m.live(recs, c.Key, now)
			n, exp := c.Delta, now+c.TTLMs
			if ok {
				n, exp = cur.n+c.Delta, cur.expireAt
			}
			r = engine.Result{Allowed: true, Found: ok, Int: n}
			recs[c.Key] = mrec{n: n, expireAt: exp}
			mutated = true
		case engine.OpHit:
			if len(c.Windows) != 1 {
				panic("the model hits one window at a time")
			}
			w := c.Windows[0]
			cur, _ := m.live(recs, w.Key, now)
			at := max(now, cur.start)
			start := at - at%w.WindowMs
			count := cur.n
			if start != cur.start {
				count = 0
			}
			end := start + w.WindowMs
			if count+c.Cost > w.Limit {
				wr := engine.WindowResult{Remaining: max(0, w.Limit-count), ResetAt: end, RetryAfterMs: end - at}
				r = engine.Result{Remaining: wr.Remaining, ResetAt: end, RetryAfterMs: wr.RetryAfterMs, Windows: []engine.WindowResult{wr}}
				out.Denied = true
				break
			}
			count += c.Cost
			wr := engine.WindowResult{Allowed: true, Remaining: w.Limit - count, ResetAt: end}
			r = engine.Result{Allowed: true, Remaining: wr.Remaining, ResetAt: end, Windows: []engine.WindowResult{wr}}
			recs[w.Key] = mrec{window: true, n: count, start: start, expireAt: end}
			mutated = true
		default:
			panic("the model runs no " + string(c.Op))
		}
		out.Results = append(out.Results, r)
	}
	return out, recs, mutated
}

// randomCommands returns one to three increments and window hits.
func randomCommands(rng *rand.Rand) []engine.Command {
	cmds := make([]engine.Command, 1+rng.IntN(3))
	for i := range cmds {
		if rng.IntN(2) == 0 {
			cmds[i] = engine.Incr(modelCounters[rng.IntN(len(modelCounters))], 1+rng.Int64N(5), modelTTLs[rng.IntN(len(modelTTLs))])
		} else {
			w := modelWindows[rng.IntN(len(modelWindows))]
			cmds[i] = engine.Hit(1+rng.Int64N(3), w)
		}
	}
	return cmds
}

func modelPartition(i int) string { return fmt.Sprintf("p%02d", i) }

// sameResults reports how got differs from want, or "".
func sameResults(got, want engine.StepResult) string {
	if got.Denied != want.Denied || got.Replayed != want.Replayed || got.Skipped != want.Skipped {
		return fmt.Sprintf("denied/replayed/skipped %v/%v/%v, want %v/%v/%v", got.Denied, got.Replayed, got.Skipped, want.Denied, want.Replayed, want.Skipped)
	}
	if len(got.Results) != len(want.Results) {
		return fmt.Sprintf("%d results, want %d", len(got.Results), len(want.Results))
	}
	for i := range got.Results {
		if d := sameResult(got.Results[i], want.Results[i]); d != "" {
			return fmt.Sprintf("result %d: %s", i, d)
		}
	}
	return ""
}

func sameResult(g, w engine.Result) string {
	if g.Allowed != w.Allowed || g.Found != w.Found || g.Value != w.Value || g.Int != w.Int || g.TTLMs != w.TTLMs ||
		g.Remaining != w.Remaining || g.ResetAt != w.ResetAt || g.RetryAfterMs != w.RetryAfterMs || g.At != w.At ||
		len(g.Windows) != len(w.Windows) {
		return fmt.Sprintf("%+v, want %+v", g, w)
	}
	for i := range g.Windows {
		if g.Windows[i] != w.Windows[i] {
			return fmt.Sprintf("%+v, want %+v", g, w)
		}
	}
	return ""
}

// modelRequest is a replay-safe request sent, kept for retries.
type modelRequest struct {
	req  *engine.Request
	sent int64
}

// do runs r through an engine on s at now and checks its answer against
// m, which it updates: a step whose replay record lives must answer it,
// any other runs as the model does and records its results if it changed
// anything.
func (m *jmodel) do(t *testing.T, s *Store, r *engine.Request, now int64, what string) {
	t.Helper()
	resp, err := engine.New(s).Do(t.Context(), r)
	if err != nil {
		t.Fatalf("%s: request %s: %v", what, r.OperationID, err)
	}
	denied := false
	for i, st := range r.Steps {
		var want engine.StepResult
		id := r.OperationID + "/" + strconv.Itoa(i)
		switch rep, ok := m.replays[id]; {
		case denied && r.Mode != engine.All:
			want.Skipped = true
		case ok && rep.expireAt > now:
			want = rep.res
			want.Replayed = true
		default:
			res, recs, mutated := m.run(st.Partition, st.Commands, now)
			m.recs[st.Partition] = recs
			if mutated {
				m.replays[id] = mreplay{expireAt: now + engine.ReplayTTL.Milliseconds(), res: res}
			}
			want = res
		}
		if d := sameResults(resp.Steps[i], want); d != "" {
			t.Fatalf("%s: request %s, step %d on %s at t0%+d: %s", what, r.OperationID, i, st.Partition, now-t0, d)
		}
		denied = denied || resp.Steps[i].Denied
	}
}

// check reads every record of every partition of s at now, without
// changing any, and compares it with m.
func (m *jmodel) check(t *testing.T, s *Store, now int64, what string) {
	t.Helper()
	if d := m.diff(t, s, now); d != "" {
		t.Fatalf("%s: %s", what, d)
	}
}

// diff reads every record of every partition of s at now, without
// changing any, and reports the first that differs from m, or "".
func (m *jmodel) diff(t *testing.T, s *Store, now int64) string {
	t.Helper()
	// Two batches (a batch holds at most 8 commands): only kv.get, kv.ttl
	// and hits denied by the blocker, which change nothing.
	var counters, windows []engine.Command
	for _, k := range modelCounters {
		counters = append(counters, engine.Get(k), engine.TTL(k))
	}
	for _, w := range modelWindows {
		windows = append(windows, engine.TTL(w.Key), engine.Hit(1, w, modelBlocker))
	}
	windows = append(windows, engine.TTL(modelBlocker.Key), engine.Hit(1, modelBlocker))
	var out, wout engine.StepResult
	for i := range modelPartitions {
		p := modelPartition(i)
		if err := engine.New(s).Apply(t.Context(), p, &out, counters...); err != nil {
			t.Fatalf("reading %s: %v", p, err)
		}
		if err := engine.New(s).Apply(t.Context(), p, &wout, windows...); err != nil {
			t.Fatalf("reading %s: %v", p, err)
		}
		out.Results = append(out.Results, wout.Results...)
		recs := m.recs[p]
		n := 0
		for _, k := range modelCounters {
			get, ttl := out.Results[n], out.Results[n+1]
			n += 2
			want := engine.Result{Allowed: true}
			wantTTL := engine.Result{Allowed: true}
			if r, ok := m.live(recs, k, now); ok {
				want.Found, want.Value = true, strconv.FormatInt(r.n, 10)
				wantTTL.Found, wantTTL.TTLMs = true, r.expireAt-now
			}
			if d := sameResult(get, want); d != "" {
				return fmt.Sprintf("%s/%s at t0%+d: %s", p, k, now-t0, d)
			}
			if d := sameResult(ttl, wantTTL); d != "" {
				return fmt.Sprintf("%s/%s's ttl at t0%+d: %s", p, k, now-t0, d)
			}
		}
		for _, w := range append(modelWindows[:len(modelWindows):len(modelWindows)], modelBlocker) {
			ttl := out.Results[n]
			hit := out.Results[n+1]
			n += 2
			wantTTL := engine.Result{Allowed: true}
			count, reset := int64(0), now
			if r, ok := m.live(recs, w.Key, now); ok {
				wantTTL.Found, wantTTL.TTLMs = true, r.expireAt-now
				if r.n > 0 {
					count, reset = r.n, r.start+w.WindowMs
				}
			}
			if d := sameResult(ttl, wantTTL); d != "" {
				return fmt.Sprintf("%s/%s's ttl at t0%+d: %s", p, w.Key, now-t0, d)
			}
			if hit.Allowed || len(hit.Windows) == 0 {
				return fmt.Sprintf("the read of %s/%s was allowed (its blocker is lost): %+v", p, w.Key, hit)
			}
			if got := hit.Windows[0]; got.Remaining != w.Limit-count || got.ResetAt != reset {
				return fmt.Sprintf("%s/%s at t0%+d reads remaining %d, reset at t0%+d; want %d, t0%+d (count %d)",
					p, w.Key, now-t0, got.Remaining, got.ResetAt-t0, w.Limit-count, reset-t0, count)
			}
		}
	}
	return ""
}

// TestJournalAgainstAModel drives stores on crashable in-memory file
// systems with a few fixed seeds and checks them, and copies of them as a
// power loss would leave them, against a model (see above).
func TestJournalAgainstAModel(t *testing.T) {
	for seed := range uint64(8) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { journalAgainstModel(t, seed, 300) })
	}
}

func journalAgainstModel(t *testing.T, seed uint64, ops int) {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	fs := vfs.NewCrashableMem()
	clk := testclock.At(t0)
	cfg := DefaultConfig()
	cfg.Dir, cfg.FS, cfg.Clock = "db", fs, clk
	cfg.SweepInterval = 1 << 62 // the test sweeps
	cfg.IdleTimeout = 0         // the test evicts
	cfg.MaxResident = 64        // one partition per shard: creating one evicts its shard's other
	s := openTest(t, cfg)
	m := newModel()
	now := func() int64 { return engine.UnixMilli(clk) }

	// Every partition's blocker, full for the whole test.
	for i := range modelPartitions {
		p := modelPartition(i)
		b := &engine.Batch{Partition: p, Commands: []engine.Command{engine.Hit(1, modelBlocker)}}
		var out engine.StepResult
		if err := s.Apply(t.Context(), b, &out); err != nil {
			t.Fatal(err)
		}
		res, recs, _ := m.run(p, b.Commands, now())
		m.recs[p] = recs
		if d := sameResults(out, res); d != "" {
			t.Fatalf("blocker of %s: %s", p, d)
		}
	}

	var sent []modelRequest
	stats := map[string]int{}
	batch := func() *engine.Batch {
		return &engine.Batch{Partition: modelPartition(rng.IntN(modelPartitions)), Commands: randomCommands(rng)}
	}
	for op := range ops {
		what := ""
		switch k := rng.IntN(100); {
		case k < 20:
			what = "apply"
			b := batch()
			var out engine.StepResult
			if err := s.Apply(t.Context(), b, &out); err != nil {
				t.Fatalf("op %d: apply: %v", op, err)
			}
			res, recs, _ := m.run(b.Partition, b.Commands, now())
			m.recs[b.Partition] = recs
			if d := sameResults(out, res); d != "" {
				t.Fatalf("op %d: apply on %s at t0%+d: %s", op, b.Partition, now()-t0, d)
			}
		case k < 32:
			what = "deferred"
			// The model as each batch leaves it: until Sync, a power
			// loss keeps the first of them (in log order), any number.
			prefixes := []*jmodel{m.clone()}
			for range 1 + rng.IntN(3) {
				b := batch()
				var out engine.StepResult
				if err := s.ApplyDeferred(t.Context(), b, &out); err != nil {
					t.Fatalf("op %d: apply deferred: %v", op, err)
				}
				res, recs, _ := m.run(b.Partition, b.Commands, now())
				m.recs[b.Partition] = recs
				if d := sameResults(out, res); d != "" {
					t.Fatalf("op %d: deferred apply on %s at t0%+d: %s", op, b.Partition, now()-t0, d)
				}
				prefixes = append(prefixes, m.clone())
			}
			if rng.IntN(6) == 0 {
				stats["copies before a sync"]++
				checkCopyAny(t, cfg, fs, now(), prefixes, fmt.Sprintf("op %d: power-loss copy before the sync of deferred batches", op))
			}
			if err := s.Sync(t.Context()); err != nil {
				t.Fatalf("op %d: sync: %v", op, err)
			}
		case k < 42:
			what = "joint"
			parts := rng.Perm(modelPartitions)[:2+rng.IntN(engine.MaxJointBatches-1)]
			bs := make([]*engine.Batch, len(parts))
			for i, pi := range parts {
				bs[i] = &engine.Batch{Partition: modelPartition(pi), Commands: randomCommands(rng)}
			}
			outs := make([]engine.StepResult, len(bs))
			if err := s.ApplyJoint(t.Context(), bs, outs); err != nil {
				t.Fatalf("op %d: joint: %v", op, err)
			}
			if err := s.Sync(t.Context()); err != nil {
				t.Fatalf("op %d: sync: %v", op, err)
			}
			denied := false
			after := make([]map[string]mrec, len(bs))
			for i, b := range bs {
				res, recs, _ := m.run(b.Partition, b.Commands, now())
				after[i] = recs
				denied = denied || res.Denied
				if d := sameResults(outs[i], res); d != "" {
					t.Fatalf("op %d: joint batch %d on %s at t0%+d: %s", op, i, b.Partition, now()-t0, d)
				}
			}
			if !denied {
				for i, b := range bs {
					m.recs[b.Partition] = after[i]
				}
			}
		case k < 54:
			what = "request"
			r := &engine.Request{OperationID: fmt.Sprintf("op-%d-%d", seed, op)}
			if rng.IntN(2) == 0 {
				r.Mode = engine.All
			}
			for range 1 + rng.IntN(3) {
				r.Steps = append(r.Steps, engine.Step{Partition: modelPartition(rng.IntN(modelPartitions)), Commands: randomCommands(rng)})
			}
			m.do(t, s, r, now(), fmt.Sprintf("op %d", op))
			sent = append(sent, modelRequest{req: r, sent: now()})
		case k < 62:
			what = "retry"
			if len(sent) == 0 {
				continue
			}
			// Mostly a recent request, whose replay records live.
			i := len(sent) - 1 - min(len(sent)-1, int(rng.ExpFloat64()*4))
			m.do(t, s, sent[i].req, now(), fmt.Sprintf("op %d: retry of a request %d ms old", op, now()-sent[i].sent))
			if now()-sent[i].sent < engine.ReplayTTL.Milliseconds() {
				stats["retry replayed"]++
			}
		case k < 70:
			what = "checkpoint"
			checkpoint(t, s)
		case k < 75:
			what = "sweep"
			if _, err := s.sweep(now()); err != nil {
				t.Fatalf("op %d: sweep: %v", op, err)
			}
		case k < 86:
			what = "advance"
			clk.Advance(time.Duration(1+rng.Int64N(90)) * time.Second)
		case k < 96:
			what = "evict"
			// Every check reads every partition, so all were used at
			// now: evict every one that may go, dirty ones included
			// (their rows are written first).
			stats["evicted idle"] += s.evictIdle(now()+1, 64)
		default:
			what = "copy"
			stats["journal rows at the copies"] += countRows(t, s, []byte{nsJournal})
			m.checkCopy(t, cfg, fs, now(), sent, rng, fmt.Sprintf("op %d: power-loss copy", op))
		}
		stats[what]++
		m.check(t, s, now(), fmt.Sprintf("op %d (%s)", op, what))
		stats["evicted by the cap, after the checks"] += modelPartitions - s.Resident()
	}
	m.checkCopy(t, cfg, fs, now(), sent, rng, "the last power-loss copy")
	t.Logf("%d ops over %v of store time: %v", ops, time.Duration(now()-t0)*time.Millisecond, stats)
}

// checkCopy opens a copy of fs as a power loss would leave it and checks
// it against m: every record, then a few retries of recent requests,
// whose replay records must answer (against a clone of m: the copy is
// dropped).
func (m *jmodel) checkCopy(t *testing.T, cfg Config, fs *vfs.MemFS, now int64, sent []modelRequest, rng *rand.Rand, what string) {
	t.Helper()
	copied := openCopy(t, cfg, fs, what)
	defer closeCopy(t, copied, what)
	m.check(t, copied, now, what)
	mc := m.clone()
	for range min(3, len(sent)) {
		r := sent[len(sent)-1-rng.IntN(min(len(sent), 8))]
		mc.do(t, copied, r.req, now, fmt.Sprintf("%s: retry of a request %d ms old", what, now-r.sent))
	}
	mc.check(t, copied, now, what+", after retries")
}

// checkCopyAny opens a copy of fs as a power loss would leave it and
// checks that it reads as one of models.
func checkCopyAny(t *testing.T, cfg Config, fs *vfs.MemFS, now int64, models []*jmodel, what string) {
	t.Helper()
	copied := openCopy(t, cfg, fs, what)
	defer closeCopy(t, copied, what)
	var diffs []string
	for i, m := range models {
		d := m.diff(t, copied, now)
		if d == "" {
			return
		}
		diffs = append(diffs, fmt.Sprintf("\n  as the first %d batches leave it: %s", i, d))
	}
	t.Fatalf("%s: the copy reads as no prefix of the batches:%s", what, strings.Join(diffs, ""))
}

// openCopy opens a copy of fs as a power loss would leave it.
func openCopy(t *testing.T, cfg Config, fs *vfs.MemFS, what string) *Store {
	t.Helper()
	c := cfg
	c.FS = fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	copied, err := Open(c)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return copied
}

func closeCopy(t *testing.T, copied *Store, what string) {
	t.Helper()
	if err := copied.Close(); err != nil {
		t.Errorf("%s: Close: %v", what, err)
	}
}
