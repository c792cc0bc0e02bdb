package admission

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/wire"
)

// keyTTL keeps every per-day record for two days: long enough to cover the
// whole UTC day it names from any first write, short enough to vanish soon
// after.
const keyTTL = 2 * 24 * 60 * 60 * 1000

// Admitter implements server.Admitter. It is safe for concurrent use.
type Admitter struct {
	eng     *engine.Engine
	cfg     Config
	now     func() time.Time
	log     *slog.Logger
	invalid string
	fams    map[string]*family
}

// family is one family's configuration and this server's state for it.
type family struct {
	name      string
	allowance int64
	shares    Shares
	fair      bool

	// The leased chunk: left commands leased for day. The fast path takes
	// from left with a compare-and-swap; mu serialises leases.
	mu   sync.Mutex
	day  atomic.Int64
	left atomic.Int64

	stopMu sync.Mutex
	stop   stopCache
}

type stopCache struct {
	day      int64
	loaded   time.Time
	valid    bool
	stopped  bool
	reason   string
	operator bool
}

// StopRecord is the stored form of a family stop.
type StopRecord struct {
	Reason string    `json:"reason"`
	Since  time.Time `json:"since"`
}

// New returns an Admitter keeping its state in eng's store. An invalid cfg
// does not fail New: every Admit then answers guard_unavailable with the
// reason, which is logged once.
func New(eng *engine.Engine, cfg Config) *Admitter {
	a := &Admitter{eng: eng, cfg: cfg, now: cfg.Now, log: cfg.Logger, fams: map[string]*family{}}
	if a.now == nil {
		a.now = time.Now
	}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	allowances, err := cfg.Allowances()
	if err != nil {
		a.invalid = "invalid admission configuration: " + strings.ReplaceAll(err.Error(), "\n", "; ")
		a.log.Error("refusing every RPC", "reason", a.invalid)
		return a
	}
	for name, n := range allowances {
		sh := cfg.Shares
		if fs, ok := cfg.FamilyShares[name]; ok {
			sh = fs.over(cfg.Shares)
		}
		f := &family{name: name, allowance: n, shares: sh.withDefaults()}
		for _, fair := range cfg.Fair {
			f.fair = f.fair || fair == name
		}
		a.fams[name] = f
	}
	return a
}

// Err returns why the admitter refuses everything, or nil.
func (a *Admitter) Err() error {
	if a.invalid == "" {
		return nil
	}
	return problem(wire.CodeUnavailable, a.invalid)
}

// Admit admits req or returns a *wire.Error: guard_unavailable for a
// misconfiguration or a store failure, guard_stopped for a stopped or
// exhausted family, guard_limited for a fairness denial, invalid for an
// unknown family.
func (a *Admitter) Admit(ctx context.Context, req *wire.Request) error {
	if a.invalid != "" {
		return a.Err()
	}
	f := a.fams[req.Family]
	if f == nil {
		return problem(wire.CodeInvalid, fmt.Sprintf("unknown family %q", req.Family))
	}
	n := commandCount(req)
	day := dayOf(a.now())
	st, err := a.stopState(ctx, f, day)
	if err != nil {
		return a.unavailable("reading the family stop", err)
	}
	if st.stopped {
		return problem(wire.CodeStopped, fmt.Sprintf("family %q stopped: %s", f.name, st.reason))
	}
	if err := a.spend(ctx, f, day, n); err != nil {
		return err
	}
	if err := a.fairness(ctx, f, req, day, n); err != nil {
		// The commands go back to the leased chunk: a refused RPC spends
		// no family allowance.
		f.giveBack(day, n)
		return err
	}
	return nil
}

func commandCount(req *wire.Request) int64 {
	var n int64
	for i := range req.Steps {
		n += int64(len(req.Steps[i].Commands))
	}
	return n
}

// dayOf returns the UTC day number of t.
func dayOf(t time.Time) int64 { return t.Unix() / 86400 }

func dayName(day int64) string { return time.Unix(day*86400, 0).UTC().Format(time.DateOnly) }

func problem(code wire.Code, reason string) error {
	return &wire.Error{Problem: wire.NewProblem(code, reason)}
}

func (a *Admitter) unavailable(what string, err error) error {
	a.log.Error("admission store failure", "op", what, "err", err)
	return fmt.Errorf("%s: %w", what, errors.Join(problem(wire.CodeUnavailable, "admission state unavailable"), err))
}

// take takes n commands from the chunk leased for day, without locking.
func (f *family) take(day, n int64) bool {
	if f.day.Load() != day {
		return false
	}
	for {
		cur := f.left.Load()
		if cur < n {
			return false
		}
		if f.left.CompareAndSwap(cur, cur-n) {
			return true
		}
	}
}

// giveBack returns n commands to the chunk of day, if it is still current.
func (f *family) giveBack(day, n int64) {
	if f.day.Load() == day {
		f.left.Add(n)
	}
}

func familyPartition(f string) string { return "adm/f/" + f }

func usedKey(day int64) string { return "used/" + dayName(day) }
func stopKey(day int64) string { return "stop/" + dayName(day) }
func warnKey(day int64) string { return "warn/" + dayName(day) }

const operatorStopKey = "opstop"

// spend takes n commands of f's allowance for day, leasing a new chunk from
// the durable counter when the local one runs short.
func (a *Admitter) spend(ctx context.Context, f *family, day, n int64) error {
	if f.take(day, n) {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.day.Load() != day {
		// A new UTC day: what is left of yesterday's chunk stays spent.
		f.left.Store(0)
		f.day.Store(day)
	}
	// Callers on the lock-free fast path may take a fresh chunk before
	// this caller does: lease again until it gets its commands or the
	// allowance runs out.
	for !f.take(day, n) {
		need := max(n-f.left.Load(), 1)
		got, remaining, err := a.lease(ctx, f, day, max(a.cfg.Chunk, need), need)
		if err != nil {
			return err
		}
		if got == 0 {
			return a.exhausted(ctx, f, day, n)
		}
		f.left.Add(got)
		a.maybeWarn(ctx, f, day, remaining)
	}
	return nil
}

// lease reserves up to want (at least need) commands of the family's
// durable allowance for day and returns how many it got and how many remain
// afterwards. It gets 0 when fewer than need remain.
func (a *Admitter) lease(ctx context.Context, f *family, day, want, need int64) (got, remaining int64, err error) {
	budget := engine.Budget{Key: usedKey(day), Limit: max(f.allowance, 1), WindowMs: keyTTL}
	for range 3 {
		if f.allowance < need {
			return 0, 0, nil
		}
		var out engine.StepResult
		cost := min(want, f.allowance)
		if err := a.eng.ApplyReserved(ctx, familyPartition(f.name), &out, engine.Reserve("", cost, budget)); err != nil {
			return 0, 0, a.unavailable("leasing the family allowance", err)
		}
		r := out.Results[0]
		if r.Allowed {
			return cost, r.Remaining, nil
		}
		if r.Remaining < need {
			return 0, r.Remaining, nil
		}
		// Less than a chunk is left: lease exactly what remains (another
		// server may race us for it; try again).
		want = r.Remaining
	}
	return 0, 0, nil
}

// exhausted answers a batch that the family's allowance cannot cover. When
// nothing at all is left the family is stopped durably until the next UTC
// day; a batch larger than a non-zero remainder is refused without a stop.
func (a *Admitter) exhausted(ctx context.Context, f *family, day, n int64) error {
	var out engine.StepResult
	if err := a.eng.ApplyReserved(ctx, familyPartition(f.name), &out, engine.Get(usedKey(day))); err != nil {
		return a.unavailable("reading the family usage", err)
	}
	used, _ := parseInt(out.Results[0].Value)
	if f.left.Load() > 0 || used < f.allowance {
		return problem(wire.CodeStopped, fmt.Sprintf("family %q: a batch of %d commands is larger than what is left of today's allowance", f.name, n))
	}
	reason := "daily operation budget exhausted"
	if err := a.writeStop(ctx, f.name, stopKey(day), reason, keyTTL); err != nil {
		return err
	}
	a.setStopCache(f, day, true, reason, false)
	a.log.Error("daily operation budget exhausted", "family", f.name, "day", dayName(day), "allowance", f.allowance)
	return problem(wire.CodeStopped, fmt.Sprintf("family %q stopped: %s", f.name, reason))
}

// maybeWarn logs one warning per family and day once usage reaches the
// threshold. The durable NX claim makes it one warning across restarts and
// servers.
func (a *Admitter) maybeWarn(ctx context.Context, f *family, day, remaining int64) {
	used := f.allowance - remaining
	if used*1000 < f.allowance*a.cfg.WarnPermille {
		return
	}
	var out engine.StepResult
	err := a.eng.ApplyReserved(ctx, familyPartition(f.name), &out, engine.SetIf(warnKey(day), "1", keyTTL, engine.SetNX))
	if err != nil || !out.Results[0].Allowed {
		return
	}
	a.log.Warn("daily operation budget at threshold", "family", f.name, "day", dayName(day),
		"used", used, "allowance", f.allowance, "threshold_permille", a.cfg.WarnPermille)
}

func (a *Admitter) writeStop(ctx context.Context, fam, key, reason string, ttl int64) error {
	rec, err := json.Marshal(StopRecord{Reason: reason, Since: a.now().UTC()})
	if err != nil {
		return err
	}
	var out engine.StepResult
	if err := a.eng.ApplyReserved(ctx, familyPartition(fam), &out, engine.Set(key, string(rec), ttl)); err != nil {
		return a.unavailable("writing the family stop", err)
	}
	return nil
}

func (a *Admitter) setStopCache(f *family, day int64, stopped bool, reason string, operator bool) {
	f.stopMu.Lock()
	f.stop = stopCache{day: day, loaded: a.now(), valid: true, stopped: stopped, reason: reason, operator: operator}
	f.stopMu.Unlock()
}

// stopState returns f's stop state for day, from the cache when it is
// fresher than Config.StateRefresh.
func (a *Admitter) stopState(ctx context.Context, f *family, day int64) (stopCache, error) {
	f.stopMu.Lock()
	defer f.stopMu.Unlock()
	now := a.now()
	if c := f.stop; c.valid && c.day == day && now.Sub(c.loaded) < a.cfg.StateRefresh {
		return c, nil
	}
	var out engine.StepResult
	if err := a.eng.ApplyReserved(ctx, familyPartition(f.name), &out,
		engine.Get(operatorStopKey), engine.Get(stopKey(day)), engine.TTL(operatorStopKey)); err != nil {
		return stopCache{}, err
	}
	// An operator stop holds until resumed: like the global stop fence, its
	// record is renewed whenever less than half of its lifetime is left.
	if out.Results[0].Found && out.Results[2].TTLMs < engine.MaxTTLMs/2 {
		var renewed engine.StepResult
		if err := a.eng.ApplyReserved(ctx, familyPartition(f.name), &renewed, engine.Expire(operatorStopKey, engine.MaxTTLMs)); err != nil {
			return stopCache{}, err
		}
	}
	c := stopCache{day: day, loaded: now, valid: true}
	for i, r := range out.Results[:2] {
		if !r.Found {
			continue
		}
		var rec StopRecord
		if err := json.Unmarshal([]byte(r.Value), &rec); err != nil {
			rec.Reason = "unreadable stop record" // never fail open
		}
		c.stopped, c.reason, c.operator = true, rec.Reason, i == 0
		break
	}
	f.stop = c
	return c, nil
}
