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

	lru "github.com/hashicorp/golang-lru/v2"

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
	// keys holds the key names of the current UTC day (see keysOf).
	keys atomic.Pointer[dayKeys]
	// denials remembers identities found exhausted (see fairness.go); nil
	// when the denial shortcut is switched off.
	denials *lru.Cache[denialKey, denial]
}

// family is one family's configuration and this server's state for it.
type family struct {
	name      string
	allowance int64
	// chunk is Config.Chunk capped at 1 % of the allowance.
	chunk int64
	// warnAt is the number of admitted commands at which the day's warning
	// is due.
	warnAt int64
	shares Shares
	fair   bool
	// limits are the daily shares of each fairness axis, in commands.
	limits [numAxes]int64
	// quotaPartition and principalPartition begin the names of the
	// reserved partitions holding the family's source and principal
	// quotas (whole names, as engine.ReservedPartition returns them).
	quotaPartition, principalPartition string
	// quotaChunk is, per axis, what a charge reserves ahead of an
	// identity's quota: Config.QuotaChunk capped at 1 % of the axis' share
	// (0: nothing).
	quotaChunk [numAxes]int64
	// limited are the guard_limited answers, one per axis, built once so a
	// denial allocates nothing.
	limited [numAxes]error

	// The leased chunk: cur holds what is left of the commands leased for
	// its day, out of the commands of the day's durable allowance leased
	// by every server as of this server's last lease (chunk.leased). The
	// fast path takes from cur with a compare-and-swap; mu serialises
	// leases and replaces cur (a new day, a resume), so that nothing taken
	// from a chunk before it was replaced is ever given back to its
	// successor, nor counted with its successor's day.
	mu  sync.Mutex
	cur atomic.Pointer[chunk]
	// held counts the commands taken by RPCs whose fairness charge is
	// still running: they go back to the chunk if it refuses. A lease
	// that finds the allowance exhausted waits (settled, on mu) for them
	// to settle before it stops the family, so that an RPC refused for
	// its quota never costs another RPC its place (see settle).
	held    atomic.Int64
	waiting atomic.Int32
	settled *sync.Cond
	// warnedDay is the day whose warning this server knows to be claimed.
	warnedDay atomic.Int64

	// stop caches the family's durable stop state; stopMu serialises its
	// reloads and guards resetEpoch, the last fairness-reset epoch read.
	stopMu     sync.Mutex
	stop       atomic.Pointer[stopCache]
	resetEpoch string

	// gen invalidates remembered denials, one generation per side
	// (sideSource, sidePrincipal): it moves on after every refund and
	// fairness reset this server makes or learns of (see fairness.go).
	gen [2]atomic.Int64
	// leases holds what this server reserved ahead of identities' quotas
	// (see leases.go); nil when Config.QuotaChunk is zero. leaseEpoch
	// moves on with every fairness reset this server makes or learns of,
	// and a lease holds only for the epoch it was reserved in.
	leases     *leases
	leaseEpoch atomic.Int64
	// leasesTaken is a test's hook (see switches); nil otherwise.
	leasesTaken func()
	// deniedDay is the last day a denial of this family was remembered:
	// before the first one of a day, admissions skip the lookups.
	deniedDay atomic.Int64
}

// chunk is what is left of the commands a server leased of one UTC day's
// allowance, since its last new day or resume, and what every server had
// leased of that allowance as of this server's last lease of it.
type chunk struct {
	day    int64
	left   atomic.Int64
	leased atomic.Int64
}

type stopCache struct {
	day      int64
	loaded   time.Time
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
// reason, which Err returns. New does not log it: the server built on the
// Admitter validates its whole configuration, this reason included, and
// logs every reason once.
func New(eng *engine.Engine, cfg Config) *Admitter {
	a := &Admitter{eng: eng, cfg: cfg, now: cfg.Now, log: cfg.Logger, fams: map[string]*family{}}
	if a.now == nil {
		a.now = time.Now
	}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	allowances, err := cfg.Allowances()
	if err == nil && !cfg.switches.noDenialCache {
		a.denials, err = lru.New[denialKey, denial](cfg.DenialCache)
	}
	if err != nil {
		a.invalid = "invalid admission configuration: " + strings.ReplaceAll(err.Error(), "\n", "; ")
		return a
	}

	for name, n := range allowances {
		sh := cfg.Shares
		if fs, ok := cfg.FamilyShares[name]; ok {
			sh = fs.over(cfg.Shares)
		}
		a.fams[name] = newFamily(name, n, sh.withDefaults(), cfg)
	}
	return a
}

func newFamily(name string, allowance int64, sh Shares, cfg Config) *family {
	f := &family{
		name:               name,
		allowance:          allowance,
		chunk:              EffectiveChunk(cfg.Chunk, allowance),
		warnAt:             max(1, (allowance*cfg.WarnPermille+999)/1000),
		shares:             sh,
		quotaPartition:     engine.ReservedPartition("adm/q/" + name + "/"),
		principalPartition: engine.ReservedPartition("adm/p/" + name + "/"),
	}
	f.settled = sync.NewCond(&f.mu)
	if cfg.QuotaChunk > 0 {
		f.leases = newLeases()
	}
	f.leasesTaken = cfg.switches.leasesTaken
	f.cur.Store(&chunk{})
	for _, fair := range cfg.Fair {
		f.fair = f.fair || fair == name
	}
	for ax := range numAxes {
		f.limits[ax] = allowance / sh.divisor(ax)
		if cfg.QuotaChunk > 0 {
			f.quotaChunk[ax] = min(cfg.QuotaChunk, f.limits[ax]/100)
		}
		f.limited[ax] = problem(wire.CodeLimited, fmt.Sprintf("family %q: %s quota exhausted for today", name, axisNames[ax]))
	}
	return f
}

// EffectiveChunk returns the chunk a server leases of a family's daily
// allowance: chunk, capped at 1 % of the allowance (and at least 1). The
// cap bounds what leases hide from usage figures and the warning: at most
// 1 % of the allowance per server.
func EffectiveChunk(chunk, allowance int64) int64 { return max(1, min(chunk, allowance/100)) }

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
// unknown family. What an admission wrote is durable when Admit returns.
func (a *Admitter) Admit(ctx context.Context, req *wire.Request) error {
	pending, err := a.AdmitDeferred(ctx, req)
	if err != nil || !pending {
		return err
	}
	if err := a.eng.Sync(ctx); err != nil {
		return a.unavailable("making fairness charges durable", err)
	}
	return nil
}

// AdmitDeferred is Admit, except that the fairness charges of an admitted
// RPC (the reservations of its source, prefix tiers and principal) run
// deferred (one Engine.ApplyReservedJointDeferred on a store that runs
// joint steps, otherwise Engine.ApplyReservedPartitionDeferred per
// partition), and AdmitDeferred does not wait for them to be durable. It reports pending when it admitted req
// after such charges: the caller then calls Engine.Sync (once, after the
// subject request, which may itself run with Engine.DoDeferred) before it
// answers anything, and answers guard_unavailable, never a grant, if Sync
// fails. So a fair RPC on a store that fsyncs every commit waits for one
// fsync instead of one per batch.
//
// A refusal needs no Sync: it grants nothing. A joint step that refuses
// writes nothing. The charges two batches made and gave back (a source
// charged, then refunded when the principal refused) cancel out; a crash that keeps the charge and loses the refund
// over-charges, the safe direction. Everything else admission writes
// (chunk leases, stops, warnings, audit records) waits for its own fsync
// as before, and so does a charge that tops quota leases up: an RPC
// admitted from a lease reports nothing pending, and must rest on nothing
// a crash could lose.
func (a *Admitter) AdmitDeferred(ctx context.Context, req *wire.Request) (pending bool, err error) {
	if a.invalid != "" {
		return false, a.Err()
	}
	f := a.fams[req.Family]
	if f == nil {
		return false, problem(wire.CodeInvalid, fmt.Sprintf("unknown family %q", req.Family))
	}
	n := commandCount(req)
	now := a.now()
	day := dayOf(now)
	st, err := a.stopState(ctx, f, now, day)
	if err != nil {
		return false, a.unavailable("reading the family stop", err)
	}
	if st.stopped {
		return false, problem(wire.CodeStopped, fmt.Sprintf("family %q stopped: %s", f.name, st.reason))
	}
	c, left, err := a.spend(ctx, f, day, n)
	if err != nil {
		return false, err
	}
	if id := a.identities(f, req); !id.none() {
		if pending, err = a.chargeHeld(ctx, f, c, &id, day, n); err != nil {
			a.maybeWarn(ctx, f, c, left+n)
			return false, err
		}
	} else if err := a.stoppedMeanwhile(f, day); err != nil {
		c.giveBack(n)
		return false, err
	}
	a.maybeWarn(ctx, f, c, left)
	return pending, nil
}

// stoppedMeanwhile returns the refusal of an RPC of f for day that an
// operator stop made while it was being admitted (during a lease or a
// fairness charge) covers, or nil: once StopFamily has returned, this
// server admits nothing more for the family, not even an RPC that read the
// family's state before it. A budget stop refuses no RPC that has its
// commands already: they were leased within the day's allowance. One
// atomic load.
func (a *Admitter) stoppedMeanwhile(f *family, day int64) error {
	if c := f.stop.Load(); c != nil && c.day == day && c.stopped && c.operator {
		return problem(wire.CodeStopped, fmt.Sprintf("family %q stopped: %s", f.name, c.reason))
	}
	return nil
}

// chargeHeld charges id's quotas for the n commands the RPC took from f's
// chunk c for day, holding them (family.held) until the charge is decided.
// If it refuses, the commands go back to c: a refused RPC spends no family
// allowance. The hold ends however the charge ends, so that a lease
// waiting for it (awaitHolds) never waits longer than the charge.
//
// It reports whether the charge wrote to the store, deferred, and has not
// made it durable: an RPC whose quotas' leases covered it wrote nothing,
// and one that topped leases up synced its charge (see charge).
func (a *Admitter) chargeHeld(ctx context.Context, f *family, c *chunk, id *identities, day, n int64) (pending bool, err error) {
	f.held.Add(n)
	defer func() {
		if err != nil {
			c.giveBack(n)
		}
		f.settle(n)
	}()
	if pending, err = a.charge(ctx, f, id, a.keysOf(day), n); err != nil {
		return false, err
	}
	// A stop made during the charge refuses the RPC: its quotas stay
	// charged (an over-charge, the safe direction), its commands go back.
	return pending, a.stoppedMeanwhile(f, day)
}

// maybeWarn logs the warning of c's day once the commands admitted reach
// the threshold, as far as this server knows them: everything leased of
// that day as of its last lease, less left, what it still holds of c. (The
// figures of c's day, never another's: an RPC taking from the last chunk
// of a day may check after the next day's first leases.) Other servers' unspent
// chunks count as admitted, so the warning may come early by at most their
// chunks. It is never late: the server that made the latest lease counts
// every admitted command, and checks after each of its RPCs.
func (a *Admitter) maybeWarn(ctx context.Context, f *family, c *chunk, left int64) {
	if f.warnedDay.Load() == c.day {
		return
	}
	if admitted := c.leased.Load() - left; admitted >= f.warnAt {
		a.warn(ctx, f, c.day, admitted)
	}
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

// take takes n commands from the chunk leased for day, without locking,
// and returns the chunk and what is left of it.
func (f *family) take(day, n int64) (*chunk, int64, bool) {
	c := f.cur.Load()
	if c.day != day {
		return c, 0, false
	}
	for {
		cur := c.left.Load()
		if cur < n {
			return c, cur, false
		}
		if c.left.CompareAndSwap(cur, cur-n) {
			return c, cur - n, true
		}
	}
}

// settle ends the hold on n commands of an RPC whose fairness charge has
// been decided (and, if refused, given back), waking a lease waiting for
// the holds to settle. Only a waiting lease takes mu.
func (f *family) settle(n int64) {
	f.held.Add(-n)
	if f.waiting.Load() > 0 {
		f.mu.Lock()
		f.settled.Broadcast()
		f.mu.Unlock()
	}
}

// awaitHolds waits, with mu held, until no command of this server is held
// by a fairness charge still running. It reports whether there were any:
// the chunk may have had commands given back meanwhile.
func (f *family) awaitHolds() bool {
	f.waiting.Add(1)
	defer f.waiting.Add(-1)
	waited := false
	for f.held.Load() > 0 {
		waited = true
		f.settled.Wait()
	}
	return waited
}

// giveBack returns n commands taken from c. If c has been replaced since
// (a new day, a resume) they go with it: they stay leased and are never
// admitted, rather than admitted from an allowance that never held them.
func (c *chunk) giveBack(n int64) { c.left.Add(n) }

// resetLease forgets the leased chunk, starting an empty one for day: a new
// day or an operator resume. The caller holds f.mu.
func (f *family) resetLease(day int64) {
	f.cur.Store(&chunk{day: day})
}

func familyPartition(f string) string { return "adm/f/" + f }

const (
	operatorStopKey = "opstop"
	// resetEpochKey holds a fresh random value written by every fairness
	// reset of the family: a server that reads a new one forgets the
	// denials it remembers (see fairness.go).
	resetEpochKey = "reset"
)

// spend takes n commands of f's allowance for day, leasing a new chunk from
// the durable counter when the local one runs short, and returns the chunk
// they came from and what is left of it.
func (a *Admitter) spend(ctx context.Context, f *family, day, n int64) (*chunk, int64, error) {
	if c, left, ok := f.take(day, n); ok {
		return c, left, nil
	}
	return a.refill(ctx, f, day, n)
}

// refill takes n commands after leasing as many chunks as it needs, and
// returns the chunk they came from and what is left of it.
func (a *Admitter) refill(ctx context.Context, f *family, day, n int64) (*chunk, int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	// Callers on the lock-free fast path may take a fresh chunk before
	// this caller does: lease again until it gets its commands or the
	// allowance runs out.
	for {
		if f.cur.Load().day != day {
			// A new UTC day: what is left of yesterday's chunk stays
			// spent. (Checked on every round: awaitHolds lets go of mu.)
			f.resetLease(day)
		}
		c, left, ok := f.take(day, n)
		if ok {
			return c, left, nil
		}
		need := max(n-left, 1)
		got, remaining, err := a.lease(ctx, f, day, max(f.chunk, need), need)
		if err != nil {
			return nil, 0, err
		}
		if got == 0 {
			// Commands held by fairness charges still running may come
			// back to the chunk: wait for them before refusing.
			if f.awaitHolds() {
				continue
			}
			return nil, 0, a.exhausted(ctx, f, day, n)
		}
		// left first: a fast-path reader seeing the old leased figure
		// undercounts what was admitted until the next RPC, rather than
		// counting the fresh chunk as admitted. c is still the current
		// chunk: only holders of mu replace it.
		c.left.Add(got)
		c.leased.Store(f.allowance - remaining)
	}
}

// lease reserves up to want (at least need) commands of the family's
// durable allowance for day and returns how many it got and how many remain
// afterwards. It gets 0 when fewer than need remain.
func (a *Admitter) lease(ctx context.Context, f *family, day, want, need int64) (got, remaining int64, err error) {
	budget := engine.Budget{Key: a.keysOf(day).used, Limit: max(f.allowance, 1), WindowMs: keyTTL}
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
	k := a.keysOf(day)
	var out engine.StepResult
	if err := a.eng.ApplyReserved(ctx, familyPartition(f.name), &out, engine.Get(k.used)); err != nil {
		return a.unavailable("reading the family usage", err)
	}
	used, _ := parseInt(out.Results[0].Value)
	if f.cur.Load().left.Load() > 0 || used < f.allowance {
		return problem(wire.CodeStopped, fmt.Sprintf("family %q: a batch of %d commands is larger than what is left of today's allowance", f.name, n))
	}
	reason := "daily operation budget exhausted"
	if err := a.writeStop(ctx, f.name, k.stop, reason, keyTTL); err != nil {
		return err
	}
	a.setStopCache(f, day, true, reason, false)
	a.log.Error("daily operation budget exhausted", "family", f.name, "day", k.name, "allowance", f.allowance)
	return problem(wire.CodeStopped, fmt.Sprintf("family %q stopped: %s", f.name, reason))
}

// warn logs the day's warning unless another server or an earlier start
// has: the durable NX claim makes it one warning per family and day across
// restarts and servers.
func (a *Admitter) warn(ctx context.Context, f *family, day, admitted int64) {
	k := a.keysOf(day)
	var out engine.StepResult
	if err := a.eng.ApplyReserved(ctx, familyPartition(f.name), &out, engine.SetIf(k.warn, "1", keyTTL, engine.SetNX)); err != nil {
		return // the next admission tries again
	}
	f.warnedDay.Store(day)
	if !out.Results[0].Allowed {
		return
	}
	a.log.Warn("daily operation budget at threshold", "family", f.name, "day", k.name,
		"used", admitted, "allowance", f.allowance, "threshold_permille", a.cfg.WarnPermille)
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

// setStopCache records a stop state this server has just written. The
// write tells nothing of what other servers wrote meanwhile (a stop, a
// fairness reset), so the copy keeps the time of the last read of the
// stored state: it is read again within StateRefresh of that read, as if
// this server had written nothing.
func (a *Admitter) setStopCache(f *family, day int64, stopped bool, reason string, operator bool) {
	f.stopMu.Lock()
	var loaded time.Time // never read today: read at the next RPC
	if c := f.stop.Load(); c != nil && c.day == day {
		loaded = c.loaded
	}
	f.stop.Store(&stopCache{day: day, loaded: loaded, stopped: stopped, reason: reason, operator: operator})
	f.stopMu.Unlock()
}

// fresh reports whether a cached stop state for day may still be used at
// now. A copy read after now (the clock stepped back) is not fresh: its age
// is unknown, and it must not outlive StateRefresh by the size of the step.
func (a *Admitter) fresh(c *stopCache, now time.Time, day int64) bool {
	if c == nil || c.day != day {
		return false
	}
	age := now.Sub(c.loaded)
	return age >= 0 && age < a.cfg.StateRefresh
}

// stopState returns f's stop state for day, from the cache when it is
// fresher than Config.StateRefresh: without a lock on that path.
func (a *Admitter) stopState(ctx context.Context, f *family, now time.Time, day int64) (*stopCache, error) {
	if c := f.stop.Load(); a.fresh(c, now, day) {
		return c, nil
	}
	f.stopMu.Lock()
	defer f.stopMu.Unlock()
	if c := f.stop.Load(); a.fresh(c, now, day) {
		return c, nil // another caller reloaded it meanwhile
	}
	return a.loadStop(ctx, f, now, day)
}

// reloadStop reads f's stop state for day from the store, however fresh
// the cached copy: the control state. The copy stays in force while the
// store is read, so that an RPC checking it meanwhile still sees this
// server's own stop.
func (a *Admitter) reloadStop(ctx context.Context, f *family, now time.Time, day int64) (*stopCache, error) {
	f.stopMu.Lock()
	defer f.stopMu.Unlock()
	return a.loadStop(ctx, f, now, day)
}

// loadStop reads f's stop state for day from the store and caches it. The
// caller holds f.stopMu.
func (a *Admitter) loadStop(ctx context.Context, f *family, now time.Time, day int64) (*stopCache, error) {
	k := a.keysOf(day)
	var out engine.StepResult
	if err := a.eng.ApplyReserved(ctx, familyPartition(f.name), &out,
		engine.Get(operatorStopKey), engine.Get(k.stop), engine.TTL(operatorStopKey), engine.Get(resetEpochKey), engine.Get(k.used)); err != nil {
		return nil, err
	}
	// An operator stop holds until resumed: like the global stop fence, its
	// record is renewed whenever less than half of its lifetime is left.
	if out.Results[0].Found && out.Results[2].TTLMs < engine.MaxTTLMs/2 {
		var renewed engine.StepResult
		if err := a.eng.ApplyReserved(ctx, familyPartition(f.name), &renewed, engine.Expire(operatorStopKey, engine.MaxTTLMs)); err != nil {
			return nil, err
		}
	}
	// A fairness reset made through another server: forget the denials
	// remembered before it.
	if epoch := out.Results[3].Value; epoch != f.resetEpoch {
		f.resetEpoch = epoch
		f.forget()
	}
	// A budget stop holds only while the day's allowance is spent: a
	// resume deletes the usage with the stop, and a stop another server
	// wrote just after it, having found the allowance spent just before
	// it, is read in the same batch as the usage it no longer matches. A
	// usage that is not a number says nothing, and the stop holds: never
	// fail open.
	used, ok := parseInt(out.Results[4].Value)
	budgetSpent := !ok || used >= f.allowance
	c := &stopCache{day: day, loaded: now}
	for i, r := range out.Results[:2] {
		if !r.Found || i == 1 && !budgetSpent {
			continue
		}
		var rec StopRecord
		if err := json.Unmarshal([]byte(r.Value), &rec); err != nil {
			rec.Reason = "unreadable stop record" // never fail open
		}
		c.stopped, c.reason, c.operator = true, rec.Reason, i == 0
		break
	}
	f.stop.Store(c)
	return c, nil
}
