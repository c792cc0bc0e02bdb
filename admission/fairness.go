package admission

import (
	"context"
	"errors"
	"strconv"
	"sync"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/wire"
)

// axis is one fairness axis: the source bucket, a prefix tier, or the
// principal.
type axis uint8

const (
	axisSource axis = iota
	axisV4Slash24
	axisV6Slash56
	axisV6Slash48
	axisPrincipal
	numAxes
)

// axisNames name the axes in guard_limited answers.
var axisNames = [numAxes]string{"source", "prefix " + wire.TierV4Slash24, "prefix " + wire.TierV6Slash56, "prefix " + wire.TierV6Slash48, "principal"}

// tierAxes lists the prefix tiers from finest to coarsest within each
// address family; the coarsest present names the source partition, so a
// source and all of its tiers are reserved in one atomic batch.
var tierAxes = [...]struct {
	name string
	axis axis
}{{wire.TierV4Slash24, axisV4Slash24}, {wire.TierV6Slash56, axisV6Slash56}, {wire.TierV6Slash48, axisV6Slash48}}

// divisor returns the divisor of ax.
func (s Shares) divisor(ax axis) int64 {
	switch ax {
	case axisSource:
		return s.Source
	case axisV4Slash24:
		return s.V4Slash24
	case axisV6Slash56:
		return s.V6Slash56
	case axisV6Slash48:
		return s.V6Slash48
	}
	return s.Principal
}

// identities are the hashed identities one RPC is charged to.
type identities struct {
	source    string
	tiers     [len(tierAxes)]string // by tierAxes index; "" when absent
	principal string
}

func (id *identities) none() bool { return id.source == "" && id.principal == "" }

func identitiesOf(source string, tiers map[string]string, principal string) identities {
	id := identities{source: source, principal: principal}
	if source != "" && source != wire.UnknownSource {
		for i, t := range tierAxes {
			id.tiers[i] = tiers[t.name]
		}
	}
	return id
}

// identities returns what req is charged to in f: in a fair family an RPC
// without a source is charged to the shared unknown bucket.
func (a *Admitter) identities(f *family, req *wire.Request) identities {
	source := req.Source
	if source == "" && f.fair {
		source = wire.UnknownSource
	}
	sw := a.cfg.switches
	if sw.noSource {
		source = ""
	}
	id := identitiesOf(source, req.SourceTiers, req.Principal)
	if sw.noTiers {
		id.tiers = [len(tierAxes)]string{}
	}
	if sw.noPrincipal {
		id.principal = ""
	}
	return id
}

// dayKeys are the names of one UTC day's records, built once a day rather
// than on every RPC.
type dayKeys struct {
	day              int64
	name             string // 2026-01-01
	used, stop, warn string // in the family partition
	// quota begins each axis' quota key; the identity's hash ends it, but
	// for the principal, whose partition the hash already names.
	quota [numAxes]string
}

func newDayKeys(day int64) *dayKeys {
	d := dayName(day)
	k := &dayKeys{day: day, name: d, used: "used/" + d, stop: "stop/" + d, warn: "warn/" + d}
	k.quota[axisSource] = "src/" + d + "/"
	for _, t := range tierAxes {
		k.quota[t.axis] = "t/" + t.name + "/" + d + "/"
	}
	k.quota[axisPrincipal] = "p/" + d
	return k
}

// keysOf returns the record names of day.
func (a *Admitter) keysOf(day int64) *dayKeys {
	if k := a.keys.Load(); k != nil && k.day == day {
		return k
	}
	k := newDayKeys(day)
	a.keys.Store(k)
	return k
}

// quotaKey returns the key of id's quota on ax.
func (k *dayKeys) quotaKey(ax axis, id string) string {
	if ax == axisPrincipal {
		return k.quota[ax]
	}
	return k.quota[ax] + id
}

// maxQuotas is the most quotas one RPC is charged to: a source, its tiers
// and a principal.
const maxQuotas = 2 + len(tierAxes)

// scratch holds what charging one RPC needs, reused across RPCs so that an
// admitted fair RPC allocates only the names of its quota records, and
// those in one piece.
type scratch struct {
	out     engine.StepResult
	outs    [2]engine.StepResult // of a joint step: the source's, the principal's
	steps   [2]engine.Step
	cmds    [maxQuotas]engine.Command
	budgets [maxQuotas]engine.Budget
	axes    [maxQuotas]axis
	ids     [maxQuotas]string
	n       int
	// names gathers the names an RPC's batches use (its two reserved
	// partitions and the keys of its source and tiers); ends[i] is where
	// the i-th ends. One string made of all of them is cut into each, so
	// that they cost one allocation rather than one each.
	names []byte
	ends  [maxQuotas + 1]int
	nn    int
}

var scratches = sync.Pool{New: func() any { return new(scratch) }}

// name appends a name made of parts to sc.names and returns its index.
func (sc *scratch) name(parts ...string) int {
	for _, p := range parts {
		sc.names = append(sc.names, p...)
	}
	sc.ends[sc.nn] = len(sc.names)
	sc.nn++
	return sc.nn - 1
}

// cut returns the names gathered by name, by index: substrings of one
// string.
func (sc *scratch) cut() (names [maxQuotas + 1]string) {
	all := string(sc.names)
	start := 0
	for i := range sc.nn {
		names[i] = all[start:sc.ends[i]]
		start = sc.ends[i]
	}
	return names
}

func (sc *scratch) add(ax axis, id, key string, limit int64) {
	sc.budgets[sc.n] = engine.Budget{Key: key, Limit: limit, WindowMs: keyTTL}
	sc.axes[sc.n], sc.ids[sc.n] = ax, id
	sc.n++
}

// release returns sc to the pool, holding no caller's strings.
func (sc *scratch) release() {
	clear(sc.cmds[:sc.n])
	clear(sc.steps[:])
	clear(sc.budgets[:sc.n])
	clear(sc.ids[:sc.n])
	sc.n, sc.nn, sc.names = 0, 0, sc.names[:0]
	scratches.Put(sc)
}

// The two sides of an RPC's quotas, which fail and refund separately: the
// source with its tiers (one partition) and the principal (another).
const (
	sideSource = iota
	sidePrincipal
)

func sideOf(ax axis) int {
	if ax == axisPrincipal {
		return sidePrincipal
	}
	return sideSource
}

// charge charges n commands to id's source bucket, its prefix tiers and its
// principal, all or none, and reports whether what it wrote to the store
// is still to be made durable (deferred, pending a Sync): an RPC whose
// every quota's lease holds n is charged from the leases alone (see
// leases.go), and a charge that tops leases up is synced here, before the
// leases hold it, since the RPCs admitted from them wait for no Sync.
func (a *Admitter) charge(ctx context.Context, f *family, id *identities, k *dayKeys, n int64) (pending bool, err error) {
	var qs [maxQuotas]quota
	qs2 := qs[:id.quotas(&qs)]
	var lt leaseTake
	if f.takeLeases(qs2, k.day, n, &lt) {
		return false, nil
	}
	// The denial shortcut, for the quotas leases do not cover: what this
	// server holds of an identity's quota is admitted even after the store
	// has refused it.
	if err := a.knownExhausted(f, id, &lt, k.day, n); err != nil {
		f.settleLeases(&lt, n, 0, true)
		return false, err
	}
	extra := f.extra(qs2, &lt, n)
	err = a.chargeStore(ctx, f, id, k, &lt, n, n+extra)
	if errors.Is(err, errOnlyExtra) {
		// The quotas hold n but not the commands more: charge n alone.
		extra = 0
		err = a.chargeStore(ctx, f, id, k, &lt, n, n)
	}
	synced := false
	if err == nil && extra > 0 {
		// The RPCs admitted from a lease report nothing pending: what they
		// rest on must be durable before the lease holds it. One Sync per
		// chunk, which makes this RPC's own charge durable too. If it
		// fails, the RPC is refused and the leases hold nothing more; the
		// quotas stay charged, the safe direction.
		if err = a.eng.Sync(ctx); err != nil {
			err = a.unavailable("making a quota lease durable", err)
		}
		synced = true
	}
	f.settleLeases(&lt, n, extra, err != nil)
	return err == nil && !synced, err
}

// errOnlyExtra reports a charge refused only for the chunk it reserved
// beyond its RPC's commands.
var errOnlyExtra = errors.New("admission: quota refused the lease's chunk only")

// chargeStore charges, in the store, m commands (n for the RPC, the rest
// for leases) to each of id's quotas that lt took nothing from.
//
// The source and its tiers share one partition (named by the coarsest
// tier); the principal, whose quota is shared across all sources, lives in
// a partition of its own. One partition cannot hold both without a
// partition common to every source and principal of the family: a hotspot
// every fair RPC would serialise on. So the two partitions are charged
// together in one joint step when the store runs them
// (engine.Engine.Joins): both charges commit, or, when either quota
// refuses, neither does. On any other store the source with its tiers is
// reserved in one batch and the principal in a second; when the principal
// refuses after the source was charged, the source charge is refunded, and
// the RPC spends nothing. Between the two batches a concurrent RPC may see
// the source charged and be refused: a conservative error, never an
// over-admission.
func (a *Admitter) chargeStore(ctx context.Context, f *family, id *identities, k *dayKeys, lt *leaseTake, n, m int64) error {
	sc := scratches.Get().(*scratch)
	defer sc.release()
	var gens [2]int64
	gens[sideSource], gens[sidePrincipal] = f.gen[sideSource].Load(), f.gen[sidePrincipal].Load()

	// Which sides need the store: quota i (in the order of
	// identities.quotas) does unless its lease covered it.
	needSrc, needPrin := false, false
	q := 0
	if id.source != "" {
		for range 1 + id.tierCount() {
			needSrc = needSrc || lt.took[q] == nil
			q++
		}
	}
	if id.principal != "" {
		needPrin = lt.took[q] == nil
	}

	// The names first, all in one piece: the source partition (named by
	// the coarsest tier present), the keys of the source and its tiers,
	// the principal partition. The principal's key is the day's alone.
	srcPart, prinPart := -1, -1
	var keys [maxQuotas]int
	if needSrc {
		coarsest := id.source
		for i := range tierAxes {
			if h := id.tiers[i]; h != "" {
				coarsest = h
			}
		}
		srcPart = sc.name(f.quotaPartition, coarsest)
		q = 0
		if lt.took[q] == nil {
			keys[q] = sc.name(k.quota[axisSource], id.source)
		}
		for i, t := range tierAxes {
			if h := id.tiers[i]; h != "" {
				if q++; lt.took[q] == nil {
					keys[q] = sc.name(k.quota[t.axis], h)
				}
			}
		}
	}
	if needPrin {
		prinPart = sc.name(f.principalPartition, id.principal)
	}
	names := sc.cut()

	var partition string
	if needSrc {
		q = 0
		if lt.took[q] == nil {
			sc.add(axisSource, id.source, names[keys[q]], f.limits[axisSource])
		}
		for i, t := range tierAxes {
			if h := id.tiers[i]; h != "" {
				if q++; lt.took[q] == nil {
					sc.add(t.axis, h, names[keys[q]], f.limits[t.axis])
				}
			}
		}
		partition = names[srcPart]
		if needPrin && a.eng.Joins() {
			charged := sc.n
			sc.add(axisPrincipal, id.principal, k.quotaKey(axisPrincipal, id.principal), f.limits[axisPrincipal])
			return a.reserveJoint(ctx, f, sc, partition, names[prinPart], charged, n, m, k.day, &gens)
		}
		if err := a.reserve(ctx, f, sc, partition, 0, n, m, k.day, &gens); err != nil {
			return err
		}
	}
	if !needPrin {
		return nil
	}
	charged := sc.n
	sc.add(axisPrincipal, id.principal, k.quotaKey(axisPrincipal, id.principal), f.limits[axisPrincipal])
	err := a.reserve(ctx, f, sc, names[prinPart], charged, n, m, k.day, &gens)
	if err != nil && charged > 0 {
		a.refund(ctx, f, sc, partition, charged, m)
	}
	return err
}

// tierCount returns how many prefix tiers id carries.
func (id *identities) tierCount() int {
	n := 0
	for _, h := range id.tiers {
		if h != "" {
			n++
		}
	}
	return n
}

// reserveJoint reserves m commands (n for the RPC) on every budget of sc
// in one joint step: those before split (the source and its tiers) in
// srcPart, the rest (the principal) in prinPart, both reserved partitions'
// whole names. Either both reservations commit or, when any quota refuses,
// neither does: no refund. A refusal is remembered, every axis of both
// sides that cannot hold n, and answered with the first of them, the
// source's side first, as the two batches of reserve answer it. A share
// too small for n refuses without a store call.
func (a *Admitter) reserveJoint(ctx context.Context, f *family, sc *scratch, srcPart, prinPart string, split int, n, m, day int64, gens *[2]int64) error {
	for i := range sc.n {
		if sc.budgets[i].Limit < n {
			return f.limited[sc.axes[i]]
		}
	}
	sc.cmds[0] = engine.Reserve("", m, sc.budgets[:split]...)
	sc.cmds[1] = engine.Reserve("", m, sc.budgets[split:sc.n]...)
	sc.steps[0] = engine.Step{Partition: srcPart, Commands: sc.cmds[0:1]}
	sc.steps[1] = engine.Step{Partition: prinPart, Commands: sc.cmds[1:2]}
	// Deferred: the caller of AdmitDeferred syncs before it answers.
	if err := a.eng.ApplyReservedJointDeferred(ctx, sc.steps[:], sc.outs[:]); err != nil {
		return a.unavailable("reserving fairness quotas", err)
	}
	var refusal error
	for side, from := range [2]int{0, split} {
		err := a.refusal(f, sc, &sc.outs[side].Results[0], from, n, m, day, gens)
		if refusal == nil || errors.Is(refusal, errOnlyExtra) && err != nil {
			refusal = err
		}
	}
	return refusal
}

// reserve reserves m commands (n for the RPC) on the budgets of sc from
// index from on, all in one reserved partition (its whole name), in one
// atomic batch. A refusal is remembered and answered with the first axis
// that cannot hold n. A share too small for n refuses without a store
// call.
func (a *Admitter) reserve(ctx context.Context, f *family, sc *scratch, partition string, from int, n, m, day int64, gens *[2]int64) error {
	budgets := sc.budgets[from:sc.n]
	for i := range budgets {
		if budgets[i].Limit < n {
			return f.limited[sc.axes[from+i]]
		}
	}
	sc.cmds[0] = engine.Reserve("", m, budgets...)
	// Deferred: the caller of AdmitDeferred syncs before it answers.
	if err := a.eng.ApplyReservedPartitionDeferred(ctx, partition, &sc.out, sc.cmds[:1]...); err != nil {
		return a.unavailable("reserving a fairness quota", err)
	}
	return a.refusal(f, sc, &sc.out.Results[0], from, n, m, day, gens)
}

// refusal returns nil if r, the result of a reserve of m commands (n for
// the RPC) on the budgets of sc from index from on, was allowed. Otherwise
// it remembers every axis that cannot hold n and returns the first one's
// refusal, or errOnlyExtra if every axis can hold n: only the chunk
// reserved beyond them was refused.
func (a *Admitter) refusal(f *family, sc *scratch, r *engine.Result, from int, n, m, day int64, gens *[2]int64) error {
	if r.Allowed {
		return nil
	}
	var refusal error
	onlyExtra := false
	for i, w := range r.Windows {
		if w.Allowed {
			continue
		}
		if m > n && w.Remaining >= n {
			onlyExtra = true
			continue
		}
		ax := sc.axes[from+i]
		a.remember(f, ax, sc.ids[from+i], day, gens[sideOf(ax)], w.Remaining)
		if refusal == nil {
			refusal = f.limited[ax]
		}
	}
	switch {
	case refusal != nil:
		return refusal
	case onlyExtra:
		return errOnlyExtra
	}
	return f.limited[sc.axes[from]]
}

// refund gives back the charge of m commands on the first count budgets of
// sc, reserved in partition (a reserved partition's whole name). The
// budgets keep their expiry (kv.incr keeps a live record's TTL). Should the
// refund fail, the quotas stay charged: a conservative error, logged.
func (a *Admitter) refund(ctx context.Context, f *family, sc *scratch, partition string, count int, m int64) {
	for i := range count {
		sc.cmds[i] = engine.Incr(sc.budgets[i].Key, -m, keyTTL)
	}
	// Deferred, and never synced by itself: losing a refund to a crash
	// only over-charges.
	if err := a.eng.ApplyReservedPartitionDeferred(ctx, partition, &sc.out, sc.cmds[:count]...); err != nil {
		a.log.Error("refunding a source quota failed; it stays charged", "family", f.name, "err", err)
	} else {
		// A counter the refund drove below zero no longer held the charge:
		// a fairness reset deleted it between the charge and the refund
		// (and fewer than m commands were charged to it since). Give the
		// m back to it, so that the fresh count is what was charged since
		// the reset, not m less. (A counter charged m or more since the
		// reset cannot be told apart: it is refunded m all the same. And
		// until this second batch lands the counter reads m low: an RPC
		// charged meanwhile may be admitted up to m beyond the fresh
		// share.)
		n := 0
		for i, r := range sc.out.Results[:count] {
			if r.Int < 0 {
				sc.cmds[n] = engine.Incr(sc.budgets[i].Key, m, keyTTL)
				n++
			}
		}
		if n > 0 {
			if err := a.eng.ApplyReservedPartitionDeferred(ctx, partition, &sc.out, sc.cmds[:n]...); err != nil {
				a.log.Error("restoring a source quota reset during a refund failed", "family", f.name, "err", err)
			}
		}
	}
	// A concurrent RPC may have been refused for the charge just given
	// back: what it remembers must not outlive the refund.
	f.gen[sideSource].Add(1)
}

// The denial shortcut. An identity found exhausted is remembered, with
// what it had left, until the end of its UTC day: an RPC needing more than
// that is refused from memory, without a store call, since within one day
// a quota only shrinks. Three things give a quota back, and each makes the
// memory forget:
//
//   - the UTC day ends: an entry holds only for its day;
//   - a refund (see charge): it advances the generation of the source
//     side, and an entry holds only for the generation current when its
//     RPC began, so an RPC that read the quota before the refund cannot
//     remember a stale denial after it;
//   - a fairness reset: it advances both generations on the server that
//     made it, and writes a fresh reset epoch to the family's partition,
//     which every other server sharing the store reads with its stop state
//     within Config.StateRefresh and then advances its own generations.
//
// The memory is bounded (Config.DenialCache entries, the oldest evicted
// first) and per server: an evicted entry, a restart or another server
// asks the store again, which still refuses. Nothing remembered ever
// admits.

// denialKey names one identity of one family on one axis.
type denialKey struct {
	f  *family
	ax axis
	id string
}

// denial is a remembered refusal.
type denial struct {
	day, gen  int64
	remaining int64 // what the quota had left when it refused
}

func (a *Admitter) remember(f *family, ax axis, id string, day, gen, remaining int64) {
	if a.denials == nil {
		return
	}
	a.denials.Add(denialKey{f, ax, id}, denial{day: day, gen: gen, remaining: remaining})
	f.deniedDay.Store(day)
}

// knownExhausted returns the refusal of an RPC of n commands that a
// remembered denial already decides, or nil. Quotas whose leases lt took
// from are not looked up: they hold n.
func (a *Admitter) knownExhausted(f *family, id *identities, lt *leaseTake, day, n int64) error {
	if a.denials == nil || f.deniedDay.Load() != day {
		return nil
	}
	q := 0
	if id.source != "" {
		gen := f.gen[sideSource].Load()
		if lt.took[q] == nil && a.refused(f, axisSource, id.source, day, gen, n) {
			return f.limited[axisSource]
		}
		for i, t := range tierAxes {
			if h := id.tiers[i]; h != "" {
				if q++; lt.took[q] == nil && a.refused(f, t.axis, h, day, gen, n) {
					return f.limited[t.axis]
				}
			}
		}
		q++
	}
	if id.principal != "" && lt.took[q] == nil && a.refused(f, axisPrincipal, id.principal, day, f.gen[sidePrincipal].Load(), n) {
		return f.limited[axisPrincipal]
	}
	return nil
}

// refused reports whether a remembered denial of id on ax refuses n
// commands on day at generation gen.
func (a *Admitter) refused(f *family, ax axis, id string, day, gen, n int64) bool {
	d, ok := a.denials.Peek(denialKey{f, ax, id})
	return ok && d.day == day && d.gen == gen && n > d.remaining
}

// forget makes every remembered denial and every quota lease of f
// invalid: after a fairness reset.
func (f *family) forget() {
	f.gen[sideSource].Add(1)
	f.gen[sidePrincipal].Add(1)
	f.leaseEpoch.Add(1)
}

func parseInt(s string) (int64, bool) {
	if s == "" {
		return 0, true
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}
