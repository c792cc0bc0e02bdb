package pace

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/engine"
)

// Waiting for a concurrency lease is polling: the gate keeps no queue. A
// poller backs off from pollFloor to pollCeiling, and a lease released in
// this process wakes the pollers here at once.
const (
	pollFloor   = 10 * time.Millisecond
	pollCeiling = time.Second
	// pollWaiterTTL keeps a poller counted as waiting between two polls.
	pollWaiterTTL = 3 * time.Second
	// cleanupTimeout bounds the releases made after a call, which run even
	// when the call's context is done.
	cleanupTimeout = 5 * time.Second
)

// errRestart makes an admission start over under a configuration that
// changed before the call began to wait.
var errRestart = errors.New("pace: configuration changed before waiting")

// The phases of an admission. Each resumes from the durable state the
// previous ones left in the store, so a drop is retried from where it
// happened: a call dropped while holding a slot keeps its slot.
const (
	phaseConfig = iota // learn the configuration
	phaseGate          // take a concurrency lease
	phaseTake          // take a slot in the pacing log
	phaseSlot          // wait for the slot, then claim it
)

// admission is one attempt's way through the limiter: a lease (with a cap),
// then a slot, then fn.
type admission struct {
	c     *caller
	id    string // the lease's id, also the waiter registration's
	cfg   stored
	phase int

	leased  bool     // holds the concurrency lease
	renew   *renewer // renews it while held
	waiting bool     // is registered as a waiting call
	waited  bool     // has slept: a configuration now rejects it
	polls   int
	slot    int64 // phaseSlot: the slot held, store milliseconds
	now     int64 // the store's clock at the last batch

	// pending is a take or claim whose outcome is unknown (its batch
	// failed): it is sent again as it was, under the same operation id,
	// so that the store answers it once.
	pending   []engine.Command
	pendingID string
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
// its slot has come. Store failures are drops, retried as the drop policy
// says, each resuming where it failed.
func (c *caller) admit(ctx context.Context) (*admission, error) {
	a := &admission{c: c, id: newID()}
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
		return phaseGate
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
		if err != nil {
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

// apply runs one batch on the limiter's partition.
func (a *admission) apply(ctx context.Context, cmds ...engine.Command) ([]engine.Result, error) {
	var out engine.StepResult
	if err := a.c.reg.eng.Apply(ctx, a.c.part, &out, cmds...); err != nil {
		return nil, fmt.Errorf("limiter %q: %w", a.c.name, err)
	}
	return out.Results, nil
}

// once runs a batch that must not take effect twice (a take, a claim) under
// an operation id, resending the same batch under the same id after a
// failure with an unknown outcome, so that the store answers the resent
// batch from its record of the first run instead of running it again.
func (a *admission) once(ctx context.Context, cmds []engine.Command) ([]engine.Result, error) {
	if a.pending == nil {
		a.pending, a.pendingID = cmds, engine.NewOperationID()
	}
	resp, err := a.c.reg.eng.Do(ctx, &engine.Request{
		OperationID: a.pendingID,
		Steps:       []engine.Step{{Partition: a.c.part, Commands: a.pending}},
	})
	if err != nil {
		return nil, fmt.Errorf("limiter %q: %w", a.c.name, err)
	}
	a.pending, a.pendingID = nil, ""
	return resp.Steps[0].Results, nil
}

// gate takes a concurrency lease, polling while the gate is full.
func (a *admission) gate(ctx context.Context) error {
	changed, freed := a.c.reg.watch(a.c.name)
	cmds := []engine.Command{
		engine.Get(keyConfig),
		engine.Acquire(keyGate, a.id, a.cfg.Concurrency, a.cfg.LeaseTTLMs),
	}
	if a.polls > 0 {
		cmds = append(cmds, engine.Acquire(keyWaiting, a.id, algo.MaxGateLimit, pollWaiterTTL.Milliseconds()))
	}
	res, err := a.apply(ctx, cmds...)
	if err != nil {
		return err
	}
	if len(res) > 2 && res[2].Allowed {
		a.waiting = true
	}
	if res[1].Allowed {
		a.leased = true
		a.renew = a.c.startRenewal(ctx, a.id, a.cfg.LeaseTTLMs)
	}
	if err := a.check(res[0]); err != nil {
		return err
	}
	if a.leased {
		a.phase = phaseTake
		return nil
	}
	wait := min(pollFloor<<min(a.polls, 16), pollCeiling)
	if ra := time.Duration(res[1].RetryAfterMs) * time.Millisecond; ra > 0 {
		wait = min(wait, ra)
	}
	a.polls++
	a.waited = true
	return a.sleep(ctx, wait, changed, freed)
}

// take takes a slot in the pacing log: now, or reserved within the wait
// the call allows. It reports whether the call may run.
func (a *admission) take(ctx context.Context) (bool, error) {
	maxWait := a.maxWait(ctx)
	p := a.cfg.pace(keyLog)
	cmds := []engine.Command{engine.Get(keyConfig), p.Take(1, maxWait), p.Claim(probeAt, 1, 0)}
	if a.waiting {
		cmds = append(cmds, engine.Release(keyWaiting, a.id))
	}
	refresh := a.c.reg.refreshDue(a.c.name, time.Now())
	if refresh {
		cmds = append(cmds, engine.Expire(keyConfig, engine.MaxTTLMs))
	}
	res, err := a.once(ctx, cmds)
	if err != nil {
		return false, err
	}
	a.waiting = false
	if refresh {
		a.c.refreshIndex(ctx)
	}
	if err := a.check(res[0]); err != nil {
		return false, err
	}
	// A replayed answer carries the clock of the first run: the wait it
	// implies is too long, never too short.
	a.now = probeAt - res[2].RetryAfterMs
	t := res[1]
	if !t.Allowed {
		return false, a.tooLong(t.RetryAfterMs, maxWait)
	}
	if t.At <= a.now {
		return true, nil
	}
	a.slot, a.phase = t.At, phaseSlot
	a.register(ctx)
	return false, nil
}

// claim waits for the slot, then claims it: the claim moves a slot that a
// penalty overtook, so the call never runs before its slot nor before a
// penalty's deadline. It reports whether the call may run.
func (a *admission) claim(ctx context.Context) (bool, error) {
	if a.pending == nil { // not resending a claim whose outcome is unknown
		if err := a.waitSlot(ctx); err != nil {
			return false, err
		}
	}
	maxWait := a.maxWait(ctx)
	cmds := []engine.Command{engine.Get(keyConfig), a.cfg.pace(keyLog).Claim(a.slot, 1, maxWait), a.cfg.pace(keyLog).Claim(probeAt, 1, 0)}
	if a.waiting {
		cmds = append(cmds, engine.Release(keyWaiting, a.id))
	}
	res, err := a.once(ctx, cmds)
	if err != nil {
		return false, err
	}
	a.waiting = false
	if err := a.check(res[0]); err != nil {
		return false, err
	}
	a.now = probeAt - res[2].RetryAfterMs // see take
	cl := res[1]
	switch {
	case cl.Allowed && cl.At <= a.now:
		return true, nil
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
	if res, err := a.apply(ctx, engine.Acquire(keyWaiting, a.id, algo.MaxGateLimit, min(ttl, engine.MaxTTLMs))); err == nil && res[0].Allowed {
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

// release gives back the lease and the waiter registration, if held. It
// is best effort: a lease that cannot be released expires at its TTL. A
// slot already reserved stays in the log: given up, it counts as a grant
// that was never used, which costs allowance but never admits more than
// the limit.
func (a *admission) release(ctx context.Context) {
	if a.renew != nil {
		a.renew.stop()
		a.renew = nil
	}
	var cmds []engine.Command
	if a.leased {
		cmds = append(cmds, engine.Release(keyGate, a.id))
	}
	if a.waiting {
		cmds = append(cmds, engine.Release(keyWaiting, a.id))
	}
	if len(cmds) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	if _, err := a.apply(ctx, cmds...); err != nil {
		a.c.reg.log.Warn("pace: could not release a lease; it expires at its TTL", "limiter", a.c.name, "err", err)
	}
	if a.leased {
		a.c.reg.freed(a.c.name)
	}
	a.leased, a.waiting = false, false
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

// startRenewal renews the lease id every third of its TTL until stopped.
func (c *caller) startRenewal(ctx context.Context, id string, ttlMs int64) *renewer {
	r := &renewer{quit: make(chan struct{}), done: make(chan struct{})}
	ctx = context.WithoutCancel(ctx)
	every := time.Duration(ttlMs) * time.Millisecond / 3
	go func() {
		defer close(r.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-r.quit:
				return
			case <-t.C:
			}
			rctx, cancel := context.WithTimeout(ctx, every)
			var out engine.StepResult
			err := c.reg.eng.Apply(rctx, c.part, &out, engine.Renew(keyGate, id, ttlMs))
			cancel()
			switch {
			case err != nil:
				c.reg.log.Warn("pace: could not renew a lease", "limiter", c.name, "err", err)
			case !out.Results[0].Found:
				c.reg.log.Warn("pace: a lease expired before its call ended; the concurrency cap may be exceeded", "limiter", c.name)
				return
			}
		}
	}()
	return r
}

func (r *renewer) stop() {
	close(r.quit)
	<-r.done
}
