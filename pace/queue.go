package pace

import (
	"context"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/engine"
)

// The gate's queue. A call through a limiter with a concurrency cap takes a
// ticket before it may take a lease: a number from the counter at keyTail,
// in order of arrival. The counter at keyServed counts the tickets served —
// admitted to the gate, abandoned or skipped — in order, and ticket n may
// take a lease once served ≥ n−1: its turn has come, and stays come, since
// served never goes back. Only the ticket whose turn has come polls the
// gate, so a caller that arrived later, or polls more often, can never take
// a lease before it: the head of the queue cannot be overtaken.
//
// Both counters are records of the limiter's partition, changed only in
// its atomic batches, so the queue is as durable as the store: a restart of
// the store or of the server in front of it costs no caller its place.
//
// The served counter moves only from n−1 to n (see serve), so callers
// serving one ticket at once serve it once. A waiting ticket keeps a record
// at ticketKey(n), written again at every poll of its caller and expiring
// LeaseTTL after the last one. A caller that gives up marks its record
// abandoned, and the ticket is skipped at once when its turn comes; a ticket
// whose record has gone (its caller crashed, or never wrote it) is first
// marked suspect by the caller behind it, and skipped by that caller at its
// next poll unless the ticket's owner has written its record again
// meanwhile. A crashed waiter therefore holds the queue up for at most
// LeaseTTL and a poll.
//
// Ticket numbers run to algo.MaxLimit (2^40): the counters expire together
// after 120 days without a ticket taken, which starts them again from 0.
const (
	keyTail      = "queue.tail"   // a counter: the last ticket issued
	keyServed    = "queue.served" // a counter: the tickets served, in order
	ticketPrefix = "queue/"       // + a ticket's number: its record while it waits

	// abandoned is the record of a ticket whose caller gave up.
	abandoned = "-"
	// suspectMark prefixes the record a caller writes for a ticket ahead of
	// it whose record it found gone, followed by its own id.
	suspectMark = "?"
)

func ticketKey(n int64) string { return ticketPrefix + strconv.FormatInt(n, 10) }

// serve returns the command serving ticket n: it moves the served counter
// from n−1 to n and is denied, changing nothing, at any value above n−1. A
// reservation of 1 under a limit of n is allowed only while the counter is
// at most n−1; the caller must know that it is at least n−1 (it has seen
// it so: the counter never goes back), or the reservation would serve
// another ticket.
func serve(n int64) engine.Command {
	return engine.Reserve("", 1, engine.Budget{Key: keyServed, Limit: n, WindowMs: engine.MaxTTLMs})
}

// counterValue reads a counter from a kv.get: an absent counter is 0.
func counterValue(r engine.Result) int64 {
	if !r.Found {
		return 0
	}
	n, ok := algo.ParseCounter([]byte(r.Value))
	if !ok {
		return 0
	}
	return n
}

// keepQueue returns the commands extending the life of the queue's
// counters, sent with every batch that reads them: they expire together,
// and only 120 days after the queue was last used, so a served counter a
// process saw less than a day ago (see Registry.served) has not started
// again from 0 since.
func keepQueue() []engine.Command {
	return []engine.Command{engine.Expire(keyTail, engine.MaxTTLMs), engine.Expire(keyServed, engine.MaxTTLMs)}
}

// fastTries bounds the attempts at the fast path of enqueue before a call
// takes a ticket the plain way.
const fastTries = 2

// enqueue takes a ticket in the gate's queue.
//
// When the queue is empty a call takes a ticket, the lease and serves its
// ticket in one request of three steps: the first takes ticket s+1 only if
// the last ticket issued is s, where s is the served counter as this
// process last saw it (the counter never goes back, so the queue was empty
// and the ticket's turn has come); the second writes the ticket's record
// and takes the lease; the third serves the ticket if the lease was taken.
// A denial skips the steps after it, so a call finding the queue busy takes
// nothing, and one finding the gate full keeps its ticket, at the head of
// the queue. Otherwise the call takes the next ticket from the tail.
func (a *admission) enqueue(ctx context.Context) error {
	changed, freed := a.c.reg.watch(a.c.name)
	if a.pending == nil && a.fast < fastTries {
		a.fast++
		s := a.c.reg.served(a.c.name)
		if s+1 <= algo.MaxLimit {
			a.pendingFast = s + 1
			a.newPending(engine.Sequential,
				engine.Step{Partition: a.c.part, Commands: append([]engine.Command{
					engine.Get(keyConfig),
					engine.Reserve("", 1, engine.Budget{Key: keyTail, Limit: s + 1, WindowMs: engine.MaxTTLMs}),
					engine.Get(keyTail),
					engine.Get(keyServed),
				}, keepQueue()...)},
				engine.Step{Partition: a.c.part, Commands: []engine.Command{
					engine.Set(ticketKey(s+1), a.id, a.cfg.LeaseTTLMs),
					engine.Acquire(keyGate, a.id, a.cfg.Concurrency, a.cfg.LeaseTTLMs),
				}},
				engine.Step{Partition: a.c.part, Commands: []engine.Command{
					serve(s + 1),
					engine.Del(ticketKey(s + 1)),
				}},
			)
		}
	}
	if a.pending == nil {
		a.pendingFast = 0
		a.newPending(engine.Sequential, engine.Step{Partition: a.c.part, Commands: append([]engine.Command{
			engine.Get(keyConfig),
			engine.Incr(keyTail, 1, engine.MaxTTLMs),
			engine.Get(keyServed),
		}, keepQueue()...)})
	}
	fast := a.pendingFast
	resp, err := a.once(ctx)
	if err != nil {
		return err
	}
	// What the request took is recorded before the configuration is
	// checked, so that a call starting over releases it.
	res := resp.Steps[0].Results
	switch {
	case fast == 0: // a ticket from the tail
		a.ticket, a.served = res[1].Int, counterValue(res[2])
		a.queued, a.queuedServed = time.Now(), a.served
		a.c.reg.sawServed(a.c.name, a.served)
		a.head = a.ticket <= a.served+1
		a.phase, a.polls = phaseWait, 0
		if a.head {
			a.phase = phaseGate
		}
		return a.check(res[0])
	case !res[1].Allowed: // the queue was not empty, or this process's view was old
		tail, served := counterValue(res[2]), counterValue(res[3])
		a.c.reg.sawServed(a.c.name, served)
		if tail != served {
			a.fast = fastTries
		}
		return a.check(res[0])
	}
	a.ticket, a.served, a.head = fast, fast-1, true
	acquire := resp.Steps[1].Results[1]
	if acquire.Allowed {
		a.admitted(ctx)
	}
	if err := a.check(res[0]); err != nil {
		return err
	}
	if a.leased {
		return nil
	}
	// The gate is full: wait at the head of the queue.
	a.queued, a.queuedServed = time.Now(), a.served
	a.phase, a.polls, a.waited = phaseGate, 0, true
	return a.sleep(ctx, a.backoff(1, retryAfter(acquire)), changed, freed)
}

// admitted records that the call holds its lease and its ticket is served.
func (a *admission) admitted(ctx context.Context) {
	a.leased, a.head = true, false
	a.c.reg.sawServed(a.c.name, a.ticket)
	a.ticket = 0
	a.renew = a.c.startRenewal(ctx, a.id, a.cfg.LeaseTTLMs)
	a.c.reg.freed(a.c.name) // the next ticket's turn has come
	a.phase = phaseTake
}

// wait polls the queue until the ticket's turn comes. Each poll writes the
// ticket's record again and reads the record of the ticket at the head, so
// that a caller behind a crashed or departed one skips it.
func (a *admission) wait(ctx context.Context) error {
	changed, freed := a.c.reg.watch(a.c.name)
	head := a.served + 1 // the ticket whose turn has come, as last seen
	res, err := a.apply(ctx, append([]engine.Command{
		engine.Get(keyConfig),
		engine.Get(keyServed),
		engine.Set(ticketKey(a.ticket), a.id, a.cfg.LeaseTTLMs),
		engine.Get(ticketKey(head)),
	}, keepQueue()...)...)
	if err != nil {
		return err
	}
	if err := a.check(res[0]); err != nil {
		return err
	}
	served := counterValue(res[1])
	a.c.reg.sawServed(a.c.name, served)
	if a.ticket <= served+1 {
		a.served, a.head = served, true
		a.phase, a.polls = phaseGate, 0
		return nil
	}
	if served == a.served { // the record read is the head's
		rec := res[3]
		switch {
		case rec.Found && (rec.Value == abandoned || rec.Value == suspectMark+a.id):
			return a.skip(ctx, head)
		case !rec.Found:
			// Mark it suspect; skip it at the next poll unless its owner
			// writes it again meanwhile. A failure costs only a poll.
			_, _ = a.apply(ctx, engine.SetIf(ticketKey(head), suspectMark+a.id, a.cfg.LeaseTTLMs, engine.SetNX))
		}
	}
	a.served = served
	a.waited = true
	return a.sleep(ctx, a.backoff(a.ticket-1-served, 0), changed, freed)
}

// skip serves the ticket head on behalf of its gone caller.
func (a *admission) skip(ctx context.Context, head int64) error {
	if _, err := a.apply(ctx, serve(head), engine.Del(ticketKey(head))); err != nil {
		return err
	}
	a.c.reg.log.Info("pace: skipped a ticket whose caller left the gate's queue", "limiter", a.c.name, "ticket", head)
	a.c.reg.freed(a.c.name)
	return nil
}

// gate polls the gate for a lease: the ticket's turn has come. The lease
// taken, the ticket is served in the same request.
func (a *admission) gate(ctx context.Context) error {
	changed, freed := a.c.reg.watch(a.c.name)
	resp, err := a.do(ctx, &engine.Request{Steps: []engine.Step{
		{Partition: a.c.part, Commands: append([]engine.Command{
			engine.Get(keyConfig),
			engine.Set(ticketKey(a.ticket), a.id, a.cfg.LeaseTTLMs),
			engine.Acquire(keyGate, a.id, a.cfg.Concurrency, a.cfg.LeaseTTLMs),
		}, keepQueue()...)},
		{Partition: a.c.part, Commands: []engine.Command{
			serve(a.ticket),
			engine.Del(ticketKey(a.ticket)),
		}},
	}})
	if err != nil {
		return err
	}
	res := resp.Steps[0].Results
	if res[2].Allowed {
		a.admitted(ctx)
	}
	if err := a.check(res[0]); err != nil {
		return err
	}
	if a.leased {
		return nil
	}
	// The next poll comes after the backoff, or sooner if a lease expires
	// or a call in this process releases one.
	a.waited = true
	return a.sleep(ctx, a.backoff(1, retryAfter(res[2])), changed, freed)
}

// retryAfter returns a denial's RetryAfterMs as a duration.
func retryAfter(r engine.Result) time.Duration {
	return time.Duration(r.RetryAfterMs) * time.Millisecond
}

// backoff returns the wait before the next poll of a caller that needs
// servings more tickets served for its turn to come (1 at the head of the
// queue, where it needs a lease to free): half the time the queue takes to
// serve them at the pace it has been served since the caller took its
// ticket, or, while it has not moved, a backoff doubling from pollFloor.
// Either is at most pollCeiling or a third of the ticket's lifetime, and
// no more than hint when hint is positive. Callers near the head poll
// often, the rest rarely.
func (a *admission) backoff(servings int64, hint time.Duration) time.Duration {
	ceiling := min(pollCeiling, a.placeTTL()/3)
	d := min(pollFloor<<min(a.polls, 16), ceiling)
	if moved, elapsed := a.served-a.queuedServed, time.Since(a.queued); moved > 0 && elapsed > 0 {
		d = min(max(time.Duration(float64(elapsed)*float64(servings)/float64(2*moved)), pollFloor), ceiling)
	}
	if hint > 0 {
		d = min(d, hint)
	}
	a.polls++
	return d
}

// placeTTL is how long a place in the limiter outlives its caller's last
// word: a ticket or a lease lives LeaseTTL after it was last written, and
// a call keeps its place through a store outage for as long.
func (a *admission) placeTTL() time.Duration {
	return time.Duration(max(a.cfg.LeaseTTLMs, engine.MinTTLMs)) * time.Millisecond
}
