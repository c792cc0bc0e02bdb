/*
Package pace runs your own calls to a rate-limited upstream when a limiter
shared by every process allows: [Call] takes a function, not a request, and
the shared limiter decides when it runs, while the work — payloads,
credentials, the response — stays in your process.

	var billing = pace.Define("billing-api") // package level: no I/O

	reg := pace.NewRegistry(store) // the store every process shares
	inv, err := pace.Call(ctx, billing.Bind(reg), func(ctx context.Context) (*Invoice, error) {
		return fetchInvoice(ctx, id) // builds its request afresh each time
	})

# When to use it

Use pace where many processes — replicas, workers, cron jobs, several
applications on one API key — call one upstream whose limit they must share,
and an in-process limiter would let each of them spend the whole limit. For
an http.Client, [RoundTripper] paces every request without touching the
call sites. To protect your own HTTP routes from clients, use package
httplimit; for a plain "may this caller go ahead?" check against a server,
use the client package's Guard.

The limiter lives in a store, and every process sharing the limit must use
the same store: the embedded store behind `sluice serve`, reached through
the client package, a Redis shared through store/redisstore, or, within
one process, store/memstore or store/diskstore. Nothing here knows which.

# Defining, configuring, binding

A [Limiter] is a name plus the defaults of its calls — hooks, retry and
drop policies — and defining one does no I/O, so it belongs at package
level. Its limits are not part of the definition: they are stored with the
limiter's state by [Registry.Configure], so every process shares them and
a change needs no deploy. There is no default configuration: a call through
a name that was never configured fails at once with [ErrNoSuchLimiter],
because a mistyped name must not silently become a second limiter pacing at
the full rate against the same upstream. [Registry.Reconfigure] patches a
live limiter, [Registry.Stats] reports on one and [Registry.List] names
them all. [Limiter.Bind] joins a limiter to a registry: what [Call] and
[RoundTripper] take.

Set [Config.Limit] and [Config.Window] to the upstream's limit, verbatim:
"100 per minute" is Limit 100 and Window one minute. A rested limiter may
spend all of it at once, and no rolling window of starts ever holds more
(see [Config.StartTolerance] for what that costs).

# How a call waits

A call through a limiter with a concurrency cap first takes a ticket in
the limiter's gate queue, then, when every earlier ticket has been served,
a lease on the cap, then a slot in the limiter's exact sliding log of
grants: at once if the window has room, or a slot reserved in the future
within [Config.MaxWait] (or the context's deadline, if sooner). The lease
comes before the slot so that a call starts at its slot: a call held back
by the cap after its grant would start late, and late starts bunch up into
a window holding more than the limit. The call sleeps until its slot and
claims it; fn runs with the lease held, renewed while fn runs, and released
when it returns, once an upstream rate limit it met pauses every caller
(so the caller the lease goes to next starts under the pause). A renewal
the store fails is tried again until it answers, so an outage or restart
of the store shorter than [Config.LeaseTTL] costs no lease. A crashed
caller's lease expires after LeaseTTL.

The queue is first come, first served, across every process: only the
ticket whose turn has come takes a lease, so a caller that arrived later,
or polls more often, never overtakes the head of the queue. Waiting in it
is polling, the more often the nearer a caller is to its turn (every 10 ms
to 1 s, or a third of LeaseTTL, and at once when a call in the same
process releases a lease); a call finding the queue empty and the gate
open takes its ticket and its lease in one round trip.

Every place a caller holds — its ticket, its lease, its reserved slot —
is in the store, not in a connection or a queue in memory, so a restart of
the store, or of the server in front of it, costs it neither its place nor
a drop: a caller sleeping on its slot does not talk to the store, and one
whose poll or claim meets the store down keeps trying (on the same
backoff) for as long as its place lives, LeaseTTL (at least a second)
after the outage began. When the slot comes the claim checks it again: a
penalty recorded meanwhile moves it, so a call never starts before its
slot nor before a penalty's deadline. Nor does a call start long after its
slot: one whose slot came while the store was unreachable takes a new one
when the store answers again (the slot it missed stays in the log,
unused), since starting at once would put it beside the calls of later
slots, in a window the log never counted it in. So does a call whose
grant reached it more than [Config.StartTolerance] after its slot, ten
times at most in one attempt: at the eleventh late grant the call fails
with [ErrDropped], since a process whose round trips to the store are
longer than the tolerance would otherwise spend slot after slot without
ever starting.

A caller that gives up while waiting in the queue (its context ends, its
limiter is reconfigured) marks its ticket abandoned, and the ticket is
skipped at once; the ticket of a caller that crashed is skipped by the
caller behind it once its record expires, LeaseTTL after the crashed
caller's last poll. A crashed waiter holds the queue up for that long and
a poll, no longer.

# Backpressure

An upstream rate limit seen by one caller pauses every caller of the
limiter, in every process: an [*http.Response] with status 429, or a
[RateLimitHook]'s verdict on a response that hides its limit in a body. The
pause lasts until the Retry-After the upstream gave, in seconds or as an
HTTP date, from an http.Header or a plain map ([RetryAfter],
[RetryAfterMap]), or for the retry policy's backoff when it gave none
or nothing to wait (0, or a date already past): a 429 always pauses.
Concurrent pauses do not stack: the deadline is the latest of them, so
pauses of 5 s, 60 s and 5 s wait 60 s. Nor does a pause reopen a full
window: the window recovering at the deadline offers at most
[Config.RefillFraction] of the limit (one half by default), because a full
window aimed at an upstream that just asked for backoff trips it again.
Callers already waiting on slots the pause overtook are moved past it and
share that fraction with everyone else: they never start all at once when
the pause ends.

Hooks resolve call site first, then the limiter's default, then the
built-in HTTP rules, each falling through on nil; the HTTP rules always
apply, so a hook written for one odd endpoint never disables real 429
handling. Keep the two hooks apart: a rate-limit verdict pauses every
caller, an [ErrorHook]'s failure retries one call.

# Retries and drops

A rate-limited attempt is retried after the pause; a failed one — fn's
error, or an error hook's verdict — after the backoff of [Retry], if it is
retryable (fn's errors are, unless marked [Permanent] or a context error).
A client error other than 429 is an answer, not a failure: it comes back as
it is, once. fn runs again for each retry, so it must build its request
afresh each time.

A call can also be dropped: the store fails it before fn started while it
holds no place in the limiter (it is learning the configuration, taking its
ticket, or taking a slot without a cap), or for longer than its place
lives. Drops are retried ([WithDropRetries], 5 by default, each observed
by [WithOnDrop]), each resuming from the durable state — a dropped call
keeps its ticket and its slot — and when they run out the call fails with
[ErrDropped]. fn never having run, it is always safe to call again. A
failure after fn started is never retried as a drop: it cannot be told
from a finished call, and retrying could send a payment twice. Make such
work idempotent, or reconcile it. [WithOnStart] observes each attempt as
fn starts, with the slot it was admitted at, for metrics of waits.

# Metrics

A Registry given [WithRegisterer] counts its calls in Prometheus metrics
labelled by the limiter's name: sluice_pace_calls_total by result (ok,
rate_limited, failed, dropped, wait_too_long, reconfigured,
no_such_limiter, cancelled, error), sluice_pace_attempts_total (runs of
fn), sluice_pace_upstream_rate_limits_total (the upstream's rate limits,
each of which paused every caller) and the histogram
sluice_pace_wait_seconds (each attempt's wait for its turn, from the
call's start or the previous attempt's end). Registries on one registerer
share the metrics. [WithOnStart] and [WithOnDrop] observe the same events
one by one, for other metric systems.

# Guarantees and limits

  - No rolling window of starts holds more than the limit, across every
    process, and no call starts before its slot. A call starts once its
    grant has reached it, a few milliseconds after its slot, and these
    delays vary, so two slots exactly a window apart could start less
    than a window apart. [Config.StartTolerance] τ (100 ms by default)
    closes that gap: the log counts its grants in windows of Window+τ,
    and a call that could not start within τ after its slot gives the
    slot up and takes another. A saturated limiter so starts Limit calls
    per Window+τ. With τ 0, only the log's windows of slots are exact,
    and an upstream counting arrivals may see a few more than the limit
    in one window.
  - Never more than [Config.Concurrency] leases are live: more calls run
    at once only if a lease expires under a running call that could not
    renew it (a stalled process, a store unreachable until the lease
    expired), which is logged. A call whose lease expired before fn
    started renews it with its take and its claim, finds it gone, and
    queues for another: it never starts without one.
  - Leases are taken in the order callers took their tickets, across
    every process, except that two callers arriving within one round
    trip of each other may be served in either order, and so may a
    caller and the one behind it after it was silent for LeaseTTL (it
    was taken for crashed).
  - The queue's tickets are numbered up to 2^40; the numbering starts
    again only after 120 days in which nobody queued.
  - A call that gives up while holding a reservation (its context ends, or
    its limiter is reconfigured) leaves its grant in the log, unused: it
    costs allowance, never admits more than the limit.
  - Configuring a limiter rejects the calls waiting on it with
    [ErrReconfigured]: those bound to the same Registry at once, others
    when they next reach the store. The log of grants is kept, so configuring never hands
    out a fresh allowance. Configure from one place: several processes
    configuring at once may lose a name from List.
  - The limiter holds no work: if a caller goes away its call goes with it.
    It owns only the timing.

[Registry] is the in-process face of the limiters of one store; a server
exposing it to other processes serves the same methods.
*/
package pace
