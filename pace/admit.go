package pace

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/engine"
)

// Waiting in the gate's queue and at its head is polling: the store
// notifies nobody. A poller waits from pollFloor to pollCeiling (or a third
// of LeaseTTL, if less) between polls, as near its turn is (see backoff),
// and a lease released or a ticket served in this process wakes the
// pollers here at once. A call riding out a store outage retries from
// pollFloor, doubling, to pollCeiling.
const (
	pollFloor   = 10 * time.Millisecond
	pollCeiling = time.Second
	// cleanupTimeout bounds the releases made after a call and the
	// recording of a penalty, which run even when the call's context is
	// done, and retry through a store outage until it passes.
	cleanupTimeout = 5 * time.Second
)

// errRestart makes an admission start over under a configuration that
// changed before the call began to wait.
var errRestart = errors.New("pace: configuration changed before waiting")

// The phases of an admission. Each resumes from the durable state the
// previous ones left in the store, so a failure is retried from where it
// happened: a call holding a ticket keeps it, one holding a slot keeps it.
const (
	phaseConfig = iota // learn the configuration
	phaseQueue         // take a ticket in the gate's queue (see queue.go)
	phaseWait          // wait for the ticket's turn
	phaseGate          // the ticket's turn has come: take a lease
	phaseTake          // take a slot in the pacing log
	phaseSlot          // wait for the slot, then claim it
)

// admission is one attempt's way through the limiter: a ticket and a lease
// (under a cap), then a slot, then fn.
type admission struct {
	c     *caller
	id    string // the lease's id, also the ticket's and the waiter registration's
	cfg   stored
	phase int

	ticket int64 // the ticket held in the gate's queue, 0 for none
	head   bool  // the ticket's turn has come
	served int64 // the queue's served counter as last read
	fast   int   // attempts at the queue's fast path
	// queued is when the ticket was taken, and queuedServed the served
	// counter then: how fast the queue moves.
	queued       time.Time
	queuedServed int64

	leased  bool     // holds the concurrency lease
	renew   *renewer // renews it while held
	waiting bool     // is registered as a waiting call
	waited  bool     // has slept: a configuration now rejects it
	polls   int
	lates   int   // grants given up as late (see tooLate)
	slot    int64 // the slot held, store milliseconds
	now     int64 // the store's clock at the last batch

	// outageSince is when the store last began to fail this call, zero
	// while it answers; outages counts the failures since.
	outageSince time.Time
	outages     int

	// pending is a request whose outcome is unknown (it failed): it is
	// sent again as it was, under the same operation id, so that the store
	// answers it once. sends counts its sends; resent reports that the
	// last answer of once came after a failure. pendingFast is the ticket
	// the pending request takes on the queue's fast path, 0 otherwise.
	pending     *engine.Request
	sends       int
	resent      bool
	pendingFast int64
	// sent is when the last request of once was sent: its answer, and
	// the store's clock in it, came after.
	sent time.Time
}

// caller carries one call through its attempts.
type caller struct {
	reg  *Registry
	name string
	part string
	set  resolved
	mode mode
}

func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go ≥ 1.24)
	return hex.EncodeToString(b[:])
}

// admit waits until the call may run: it holds a lease (under a cap) and
// its slot has come. A store failure while the call holds a place — a
// ticket, a lease or a reserved slot — is ridden out for as long as the
// place lives; any other is a drop, retried as the drop policy says. Both
// resume where they failed.
func (c *caller) admit(ctx context.Context) (*admission, error) {
	a := &admission{c: c, id: newID()}
	// A drop hook that panics leaves admit with the call's place held:
	// give it back, and stop the renewal that would keep the lease for
	// ever.
	returned := false
	defer func() {
		if !returned {
			a.release(ctx)
		}
	}()
	admitted, err := a.admit(ctx)
	returned = true
	return admitted, err
}

// admit runs the admission a (see caller.admit).
func (a *admission) admit(ctx context.Context) (*admission, error) {
	c := a.c
	drops := 0
	for {
		err := a.advance(ctx)
		if err == nil {
			return a, nil
		}
		if ctx.Err() != nil {
			a.release(ctx)
			return nil, context.Cause(ctx)
		}
		if !isDrop(err) {
			a.release(ctx)
			return nil, err
		}
		if until, ok := a.rideOut(); ok {
			wait := min(pollFloor<<min(max(a.outages-1, 0), 16), pollCeiling, time.Until(until))
			if err := sleep(ctx, wait); err != nil {
				a.release(ctx)
				return nil, err
			}
			continue
		}
		drops++
		retry := drops <= c.set.dropRetries
		if c.set.onDrop != nil {
			c.set.onDrop(Drop{Limiter: c.name, Drops: drops, WillRetry: retry, Err: err})
		}
		if !retry {
			a.release(ctx)
			return nil, fmt.Errorf("%w: limiter %q: %d drop(s): %w", ErrDropped, c.name, drops, err)
		}
		if err := sleep(ctx, a.retry().Delay(drops)); err != nil {
			a.release(ctx)
			return nil, err
		}
	}
}

// rideOut reports whether the call rides out the store's failure rather
// than counting a drop, and until when: it holds a place, and the outage
// has lasted less than the place outlives its caller's silence.
func (a *admission) rideOut() (time.Time, bool) {
	if a.ticket == 0 && !a.leased && a.phase != phaseSlot {
		return time.Time{}, false
	}
	until := a.outageSince.Add(a.placeTTL())
	return until, time.Now().Before(until)
}

// retry returns the call's retry policy under the configuration known so
// far.
func (a *admission) retry() Retry {
	return a.c.set.retry.over(a.cfg.config().Retry).over(DefaultRetry())
}

// advance runs the phases from the current one until the call may run.
func (a *admission) advance(ctx context.Context) error {
	for {
		var err error
		switch a.phase {
		case phaseConfig:
			err = a.learn(ctx)
		case phaseQueue:
			err = a.enqueue(ctx)
		case phaseWait:
			err = a.wait(ctx)
		case phaseGate:
			err = a.gate(ctx)
		case phaseTake:
			var done bool
			if done, err = a.take(ctx); done {
				return nil
			}
		case phaseSlot:
			var done bool
			if done, err = a.claim(ctx); done {
				return nil
			}
		}
		if errors.Is(err, errRestart) {
			a.release(ctx)
			a.phase = a.first()
			continue
		}
		if err != nil {
			return err
		}
	}
}

// first returns the phase after the configuration is known.
func (a *admission) first() int {
	if a.cfg.Concurrency > 0 {
		return phaseQueue
	}
	return phaseTake
}

// learn takes the configuration this process saw last, to be checked by
// the next batch, or reads it.
func (a *admission) learn(ctx context.Context) error {
	if s, ok := a.c.reg.cached(a.c.name); ok {
		a.cfg = s
	} else {
		s, err := a.c.reg.readConfig(ctx, a.c.name)
		if err := a.contact(err); err != nil {
			return err
		}
		a.cfg = s
	}
	a.phase = a.first()
	return nil
}

// check compares the configuration a batch read (its first result) with
// the one the batch was built from.
func (a *admission) check(res engine.Result) error {
	if !res.Found {
		return noSuchLimiter(a.c.name)
	}
	if res.Value == a.cfg.raw {
		return nil
	}
	s, err := decodeStored(a.c.name, res.Value)
	if err != nil {
		return err
	}
	if s.Gen == a.cfg.Gen {
		return nil
	}
	a.c.reg.remember(a.c.name, s)
	if a.waited {
		return fmt.Errorf("%w: limiter %q", ErrReconfigured, a.c.name)
	}
	a.cfg = s
	return errRestart
}

// contact records the outcome of an exchange with the store: an answer
// ends an outage, a failure worth retrying begins one or adds to it.
func (a *admission) contact(err error) error {
	switch {
	case err == nil:
		a.outageSince, a.outages = time.Time{}, 0
		return nil
	case errors.Is(err, ErrNoSuchLimiter): // already names the limiter
		return err
	case isDrop(err):
		if a.outageSince.IsZero() {
			a.outageSince = time.Now()
		}
		a.outages++
	}
	return fmt.Errorf("limiter %q: %w", a.c.name, err)
}

// apply runs one batch on the limiter's partition.
func (a *admission) apply(ctx context.Context, cmds ...engine.Command) ([]engine.Result, error) {
	var out engine.StepResult
	if err := a.contact(a.c.reg.eng.Apply(ctx, a.c.part, &out, cmds...)); err != nil {
		return nil, err
	}
	return out.Results, nil
}

// do runs a request.
func (a *admission) do(ctx context.Context, r *engine.Request) (*engine.Response, error) {
	resp, err := a.c.reg.eng.Do(ctx, r)
	if err := a.contact(err); err != nil {
		return nil, err
	}
	return resp, nil
}

// newPending makes steps the request once sends, under a fresh operation
// id.
func (a *admission) newPending(mode engine.Mode, steps ...engine.Step) {
	a.pending = &engine.Request{OperationID: engine.NewOperationID(), Mode: mode, Steps: steps}
	a.sends = 0
}

// once sends the pending request, one that must not take effect twice (a
// ticket, a take, a claim), and again as it was after a failure with an
// unknown outcome: under the same operation id, the store answers it from
// its record of the first run instead of running it again. A request of
// mode All is sent again with a last step reading the store's clock
// afresh, since a replayed answer carries the clock of its first run (see
// clock).
func (a *admission) once(ctx context.Context) (*engine.Response, error) {
	req := *a.pending
	if a.sends > 0 && req.Mode == engine.All {
		cmds := []engine.Command{a.cfg.pace(keyLog).Claim(probeAt, 1, 0)}
		if i := renewIndex(req.Steps[0].Commands); i >= 0 {
			cmds = append(cmds, req.Steps[0].Commands[i])
		}
		req.Steps = append(slices.Clip(req.Steps), engine.Step{Partition: a.c.part, Commands: cmds})
	}
	a.sends++
	a.sent = time.Now()
	resp, err := a.do(ctx, &req)
	if err != nil {
		return nil, err
	}
	a.resent = a.sends > 1
	a.pending = nil
	return resp, nil
}

// renewIndex returns the index of the renewal of the call's lease among
// cmds, or -1.
func renewIndex(cmds []engine.Command) int {
	return slices.IndexFunc(cmds, func(c engine.Command) bool { return c.Op == engine.OpRenew })
}

// renewal returns the commands renewing the call's lease, sent with every
// take and claim of a call holding one: a call must not start fn on a lease
// that expired while it waited (a store out of its reach, or the process
// stalled, for longer than LeaseTTL), since the lease may be another
// caller's by then.
func (a *admission) renewal() []engine.Command {
	if !a.leased {
		return nil
	}
	return []engine.Command{engine.Renew(keyGate, a.id, a.cfg.LeaseTTLMs)}
}

// leaseLost reports whether the answer resp to a take or a claim, whose
// first step's commands were cmds, says that the call's lease had expired:
// from the step appended on a resend when the first step was a replay,
// whose answer is as old as its first run.
func leaseLost(cmds []engine.Command, resp *engine.Response) bool {
	i := renewIndex(cmds)
	if i < 0 {
		return false
	}
	st := resp.Steps[0]
	if st.Replayed && len(resp.Steps) > 1 {
		st, i = resp.Steps[len(resp.Steps)-1], 1
	}
	return i < len(st.Results) && !st.Results[i].Found
}

// lostLease gives up the lease that expired before the call could start
// fn, and sends the call back to the gate's queue for another. The slot it
// held stays in the log, unused.
func (a *admission) lostLease() error {
	a.c.reg.log.Warn("pace: a lease expired before its call started; waiting for another", "limiter", a.c.name)
	if a.renew != nil {
		a.renew.stop()
		a.renew = nil
	}
	a.leased = false
	a.phase = a.first()
	return nil
}

// clock returns the store's clock when resp was answered, from the probe
// at index probe of its first step ("claiming" a slot that has not come
// is read-only and answers the wait until it), or from the last step when
// the first was a replay.
func clock(resp *engine.Response, probe int) int64 {
	r := resp.Steps[0].Results[probe]
	if resp.Steps[0].Replayed && len(resp.Steps) > 1 {
		r = resp.Steps[len(resp.Steps)-1].Results[0]
	}
	return probeAt - r.RetryAfterMs
}

// take takes a slot in the pacing log: now, or reserved within the wait
// the call allows. It reports whether the call may run.
//
// A slot is used on time or not at all. A grant whose answer reached the
// call only after the store failed it (a replayed take, a claim answered
// on a second try) is late: starting at once would put the call after its
// slot, beside the calls of later slots, in a window the log never
// counted it in. The call takes a new slot instead, and the one it missed
// stays in the log unused: it costs allowance, never admits more than the
// limit.
func (a *admission) take(ctx context.Context) (bool, error) {
	if a.pending == nil {
		p := a.cfg.pace(keyLog)
		cmds := append([]engine.Command{engine.Get(keyConfig), p.Take(1, a.maxWait(ctx)), p.Claim(probeAt, 1, 0)}, a.renewal()...)
		if a.waiting {
			cmds = append(cmds, engine.Release(keyWaiting, a.id))
		}
		if a.c.reg.refreshDue(a.c.name, time.Now()) {
			cmds = append(cmds, engine.Expire(keyConfig, engine.MaxTTLMs))
			a.c.refreshIndex(ctx)
		}
		a.newPending(engine.All, engine.Step{Partition: a.c.part, Commands: cmds})
	}
	sent := a.pending.Steps[0].Commands
	maxWait := sent[1].MaxWaitMs
	resp, err := a.once(ctx)
	if err != nil {
		return false, err
	}
	a.waiting = false
	res := resp.Steps[0].Results
	if err := a.check(res[0]); err != nil {
		return false, err
	}
	a.now = clock(resp, 2)
	t := res[1]
	switch {
	case !t.Allowed:
		return false, a.tooLong(t.RetryAfterMs, maxWait)
	case leaseLost(sent, resp):
		return false, a.lostLease()
	case a.resent && t.At < a.now:
		a.missed("a slot came while the store was unreachable")
		return false, nil
	case t.At <= a.now && a.late(t.At):
		return false, a.tooLate()
	case t.At <= a.now:
		a.slot = t.At
		return true, nil
	case t.At-a.now > a.maxWait(ctx):
		// Sent again after a failure, the take carried the wait the call
		// allowed when it was first sent; the deadline has come nearer
		// since. The slot stays in the log, unused.
		return false, a.tooLong(t.At-a.now, a.maxWait(ctx))
	}
	a.slot, a.phase = t.At, phaseSlot
	a.register(ctx)
	return false, nil
}

// missed records a slot given up as late, for the reason given, and makes
// the call take another.
func (a *admission) missed(reason string) {
	a.c.reg.log.Info("pace: "+reason+"; taking another", "limiter", a.c.name)
	a.phase = phaseTake
}

// maxLate bounds the grants one attempt gives up as late (see tooLate).
const maxLate = 10

// tooLate gives up a slot that came more than the start tolerance before
// the call could start, and makes the call take another; after maxLate
// of them it fails the call with ErrDropped. A process whose every grant
// comes late, its round trips to the store longer than the tolerance,
// would otherwise take slot after slot, each left unused and spending the
// limit of every process, without ever starting.
func (a *admission) tooLate() error {
	if a.lates++; a.lates > maxLate {
		return fmt.Errorf("%w: limiter %q: %d grants in a row reached the call more than the start tolerance (%v) after their slots; is the tolerance below the round trip to the store?",
			ErrDropped, a.c.name, a.lates, time.Duration(a.cfg.StartToleranceMs)*time.Millisecond)
	}
	a.missed("a slot came more than the start tolerance before its call could start")
	return nil
}

// late reports whether a call whose slot has come, as the answer of the
// last request says, may start more than the start tolerance after it.
// The store's clock read a.now (to the millisecond, truncated) after the
// request was sent, so the time elapsed since the slot, when the call
// starts right after this check, is at most a.now+1−slot milliseconds plus
// the time since the request was sent. 0 disables the check.
func (a *admission) late(slot int64) bool {
	tol := a.cfg.StartToleranceMs
	if tol == 0 {
		return false
	}
	since := time.Duration(a.now+1-slot)*time.Millisecond + time.Since(a.sent)
	return since > time.Duration(tol)*time.Millisecond
}

// claim waits for the slot, then claims it: the claim moves a slot that a
// penalty overtook, so the call never runs before its slot nor before a
// penalty's deadline. It reports whether the call may run.
func (a *admission) claim(ctx context.Context) (bool, error) {
	if a.pending == nil { // not resending a claim whose outcome is unknown
		if err := a.waitSlot(ctx); err != nil {
			return false, err
		}
		p := a.cfg.pace(keyLog)
		cmds := append([]engine.Command{engine.Get(keyConfig), p.Claim(a.slot, 1, a.maxWait(ctx)), p.Claim(probeAt, 1, 0)}, a.renewal()...)
		if a.waiting {
			cmds = append(cmds, engine.Release(keyWaiting, a.id))
		}
		a.newPending(engine.All, engine.Step{Partition: a.c.part, Commands: cmds})
	}
	sent := a.pending.Steps[0].Commands
	maxWait := sent[1].MaxWaitMs
	resp, err := a.once(ctx)
	if err != nil {
		return false, err
	}
	a.waiting = false
	res := resp.Steps[0].Results
	if err := a.check(res[0]); err != nil {
		return false, err
	}
	a.now = clock(resp, 2)
	cl := res[1]
	switch {
	case leaseLost(sent, resp) && (cl.Allowed || cl.At == a.slot && a.now < a.slot):
		return false, a.lostLease()
	case cl.Allowed && a.resent && cl.At < a.now: // see take
		a.missed("a slot came while the store was unreachable")
		return false, nil
	case cl.Allowed && cl.At <= a.now && a.late(cl.At):
		return false, a.tooLate()
	case cl.Allowed && cl.At <= a.now:
		a.slot = cl.At
		return true, nil
	case cl.Allowed && cl.At-a.now > a.maxWait(ctx): // moved, beyond the deadline as it stands now (see take)
		return false, a.tooLong(cl.At-a.now, a.maxWait(ctx))
	case cl.Allowed: // moved by a penalty, and reserved again
		a.slot = cl.At
	case cl.At == a.slot && a.now < a.slot: // early: the clocks disagree
	default: // moved by a penalty beyond the wait allowed, and released
		return false, a.tooLong(cl.RetryAfterMs, maxWait)
	}
	a.register(ctx)
	return false, nil
}

// waitSlot sleeps until the slot, as the store's clock last read says.
// A configuration made in this process meanwhile is checked at once.
func (a *admission) waitSlot(ctx context.Context) error {
	for {
		changed, _ := a.c.reg.watch(a.c.name)
		wait := time.Duration(a.slot-a.now) * time.Millisecond
		start := time.Now()
		a.waited = true
		err := a.sleep(ctx, wait, changed, nil)
		if err != errWoken {
			return err
		}
		res, err := a.apply(ctx, engine.Get(keyConfig))
		if err != nil {
			return err
		}
		if err := a.check(res[0]); err != nil {
			return err
		}
		a.now += time.Since(start).Milliseconds()
	}
}

// register counts the call among the limiter's waiting calls until it is
// due at its slot. It is bookkeeping for Stats: a failure is ignored.
func (a *admission) register(ctx context.Context) {
	ttl := max(a.slot-a.now+engine.MinTTLMs, engine.MinTTLMs)
	var out engine.StepResult
	if err := a.c.reg.eng.Apply(ctx, a.c.part, &out, engine.Acquire(keyWaiting, a.id, algo.MaxGateLimit, min(ttl, engine.MaxTTLMs))); err == nil && out.Results[0].Allowed {
		a.waiting = true
	}
}

// maxWait returns the longest the call may wait for a slot, in
// milliseconds: the limiter's MaxWait, or the time left before the
// context's deadline.
func (a *admission) maxWait(ctx context.Context) int64 {
	w := a.cfg.MaxWaitMs
	if dl, ok := ctx.Deadline(); ok {
		w = min(w, max(time.Until(dl).Milliseconds(), 0))
	}
	return w
}

func (a *admission) tooLong(waitMs, limitMs int64) error {
	return &WaitError{Limiter: a.c.name, Wait: time.Duration(waitMs) * time.Millisecond, Limit: time.Duration(limitMs) * time.Millisecond}
}

// errWoken reports a sleep cut short by a configuration in this process.
var errWoken = errors.New("pace: woken")

// sleep waits for d, for ctx, or until changed (a configuration: errWoken)
// or freed (a released lease: nil, to poll again) is closed.
func (a *admission) sleep(ctx context.Context, d time.Duration, changed, freed <-chan struct{}) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-freed:
		return nil
	case <-changed:
		if a.phase == phaseSlot {
			return errWoken
		}
		return nil // the next poll checks the configuration
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// sleep waits for d or for ctx.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// release gives back the lease (also one that a request whose answer was
// lost may have taken), the ticket and the waiter registration, if held,
// retrying through a store outage for up to cleanupTimeout unless the
// store is what the call is giving up on. It is best effort: a lease
// that cannot be released expires at its TTL, and so does the record of an
// abandoned ticket, which is then skipped. A slot already reserved stays
// in the log: given up, it counts as a grant that was never used, which
// costs allowance but never admits more than the limit.
func (a *admission) release(ctx context.Context) {
	if a.renew != nil {
		a.renew.stop()
		a.renew = nil
	}
	// A call at the head of the queue, or sending the queue's fast path,
	// may hold a lease a request took whose answer never reached it; the
	// fast path may also have taken it a ticket, at the head of the queue.
	unknown := a.head || (a.pending != nil && a.pendingFast > 0)
	lost := int64(0)
	if a.pending != nil && a.pendingFast > 0 && a.ticket == 0 {
		lost = a.pendingFast
	}
	a.pending = nil
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	var cmds []engine.Command
	if lost > 0 && a.lostTicket(ctx, lost) {
		// Its record holds this call's id: the ticket is this call's, and
		// its turn had come (the fast path takes a ticket only then).
		a.ticket, a.head = lost, true
	}
	if a.leased || unknown {
		cmds = append(cmds, engine.Release(keyGate, a.id))
	}
	if a.waiting {
		cmds = append(cmds, engine.Release(keyWaiting, a.id))
	}
	if a.ticket > 0 {
		cmds = append(cmds, engine.Set(ticketKey(a.ticket), abandoned, a.placeTTL().Milliseconds()))
		if a.head { // the ticket's turn has come: serve it now
			cmds = append(cmds, serve(a.ticket))
		}
	}
	if len(cmds) == 0 {
		return
	}
	var out engine.StepResult
	err := patiently(ctx, a.outageSince.IsZero(), func() error { return a.c.reg.eng.Apply(ctx, a.c.part, &out, cmds...) })
	if err != nil {
		a.c.reg.log.Warn("pace: could not release a lease or a ticket; they expire at their TTL", "limiter", a.c.name, "err", err)
	}
	if a.leased || a.ticket > 0 {
		a.c.reg.freed(a.c.name)
	}
	a.leased, a.waiting, a.ticket, a.head = false, false, 0, false
}

// lostTicket reports whether ticket n, which a request of the queue's fast
// path whose answer was lost may have taken, is this call's: its record
// holds the call's id. Best effort: a ticket it cannot read is skipped by
// the caller behind once its record expires.
func (a *admission) lostTicket(ctx context.Context, n int64) bool {
	var out engine.StepResult
	err := patiently(ctx, a.outageSince.IsZero(), func() error { return a.c.reg.eng.Apply(ctx, a.c.part, &out, engine.Get(ticketKey(n))) })
	return err == nil && out.Results[0].Found && out.Results[0].Value == a.id
}

// patiently runs f, and while patient runs it again after each store
// failure until ctx is done, backing off from pollFloor to pollCeiling. It
// returns f's last error.
func patiently(ctx context.Context, patient bool, f func() error) error {
	for n := 0; ; n++ {
		err := f()
		if err == nil || !patient || !isDrop(err) {
			return err
		}
		if sleep(ctx, min(pollFloor<<min(n, 16), pollCeiling)) != nil {
			return err
		}
	}
}

// refreshIndex extends the life of the limiter's entry in the registry's
// index, best effort.
func (c *caller) refreshIndex(ctx context.Context) {
	var out engine.StepResult
	_ = c.reg.eng.Apply(ctx, registryPartition, &out, engine.Expire(shardKey(c.name), engine.MaxTTLMs))
}

// renewer keeps a lease alive while its call holds it.
type renewer struct {
	quit chan struct{}
	done chan struct{}
}

// startRenewal renews the lease id every third of its TTL until stopped. A
// renewal the store failed is tried again at once, backing off from
// pollFloor, and at the latest halfway to the lease's expiry as this
// process last knew it, so that a store back before the lease expires
// finds it renewed.
func (c *caller) startRenewal(ctx context.Context, id string, ttlMs int64) *renewer {
	r := &renewer{quit: make(chan struct{}), done: make(chan struct{})}
	ctx = context.WithoutCancel(ctx)
	ttl := time.Duration(ttlMs) * time.Millisecond
	every := ttl / 3
	go func() {
		defer close(r.done)
		expires := time.Now().Add(ttl)
		t := time.NewTimer(every)
		defer t.Stop()
		failures := 0
		for {
			select {
			case <-r.quit:
				return
			case <-t.C:
			}
			sent := time.Now()
			rctx, cancel := context.WithTimeout(ctx, every)
			var out engine.StepResult
			err := c.reg.eng.Apply(rctx, c.part, &out, engine.Renew(keyGate, id, ttlMs))
			cancel()
			switch {
			case err != nil:
				if failures == 0 {
					c.reg.log.Warn("pace: could not renew a lease; trying again", "limiter", c.name, "err", err)
				}
				failures++
				t.Reset(min(pollFloor<<min(failures-1, 16), every, max(time.Until(expires)/2, pollFloor)))
				continue
			case !out.Results[0].Found:
				c.reg.log.Warn("pace: a lease expired before its call ended; the concurrency cap may be exceeded", "limiter", c.name)
				return
			}
			failures = 0
			expires = sent.Add(ttl)
			t.Reset(every)
		}
	}()
	return r
}

func (r *renewer) stop() {
	close(r.quit)
	<-r.done
}
