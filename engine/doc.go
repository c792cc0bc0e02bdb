/*
Package engine defines what Sluice does: its commands, how they are grouped
into atomic batches and requests, the bounds every request must respect, the
replay records that make a request safe to retry, and the Store and Clock
interfaces every store implements.

# One engine, three faces

Sluice has three faces: a guard store (atomic batches of commands on
partitions, reached over a signed RPC), paced calls (a shared limiter and
concurrency gate deciding when a caller's own function runs) and route quotas
(net/http middleware). All three speak this package's Request and Command
types and run on an [Engine], which validates a request and hands its steps
to a [Store]. The store below may be in-process memory, an embedded durable
store, Redis, or a Sluice server reached over the network; nothing above this
package knows which.

The arithmetic of every command lives in package algo, as pure functions of
the current instant. This package adds validation, atomic batches, replay
records and errors; it performs no I/O of its own and imports no store or
transport.

# Partitions, batches and requests

A partition is the unit of atomicity and of placement, named by an opaque
key. Callers hash raw identifiers (addresses, e-mail addresses, user ids,
tokens) with a keyed hash before building partition names or keys, so raw
identifiers never reach a store.

A batch is up to 8 commands run atomically on one partition: every effect or
none, with no other batch on that partition interleaved. A denial inside a
batch is a result, not a failure: the batch's other commands still run and
commit. An error (see Errors) rolls the whole batch back.

A [Request] carries 1 to 16 [Step]s, each one batch on a partition (steps may
name different partitions or the same one), run in order. Its [Mode] decides
what follows a denial:

  - [Sequential] (the default, also selected by an empty Mode): once a step
    holds a denial, every later step is skipped and reported with Skipped set.
  - [All]: every step runs regardless of denials.

A step holds a denial when any of its commands reports Allowed == false: a
denied win.hit, res.reserve, gate.acquire, pace.take or pace.claim, and also
a kv.set whose nx or xx condition did not hold.

No snapshot consistency across partitions is promised: steps are separate
batches, and a failed step does not undo the steps before it.

[Engine.Do] runs a whole request: step by step through [Store.Apply], or in
one call to a store that implements [RequestStore] (a remote server reached
in one round trip), which must give the same results (except that a failed
request may come back with no results for the steps before the failure). [Engine.Apply] runs
one batch without a replay record, reusing the caller's [StepResult] so that
a steady-state caller allocates nothing. [Engine.ApplyReserved] does the same
on a reserved partition ([ReservedPartition]), which no request can name:
servers keep their own state there, beside their callers' data.

Optional store interfaces let a server spend less on its own state.
A [DeferredSyncStore] (the embedded store, whose commits wait for an fsync)
runs a batch without that wait and makes everything so far durable with one
Sync ([Engine.DoDeferred], [Engine.ApplyReservedPartitionDeferred],
[Engine.Sync]). A [JointStore] runs batches on up to [MaxJointBatches]
distinct partitions as one atomic step: all of their writes commit, or, when
any batch holds a denial, none do ([Engine.ApplyReservedJointDeferred], on
reserved partitions only). A caller asks the engine whether its store can
([Engine.Joins]), never which store it is, and falls back to one batch per
partition where it cannot (Redis Cluster keeps partitions on different
slots, which no script may span). This is the one exception to "no
snapshot consistency across partitions", and requests cannot reach it. On
any other store DoDeferred is Do and Sync does nothing, so a caller needs
no check to use them. A [RemoteStore] (Redis, a server through its client)
is one whose calls are network round trips: a caller with many independent
requests runs them concurrently there ([Engine.Remote]) and one after
another elsewhere.

# Commands

Every command is a [Command] whose Op selects the fields it uses; the
constructors ([Hit], [Get], [Set], [SetIf], [Del], [TTL], [Expire], [Incr],
[Reserve], [Refund], [Acquire], [Renew], [Release] and the methods of [Pace])
fill the right ones. Setting a field the Op does not take is invalid. Each
command yields one [Result]; fields not listed for a command are zero.
Instants (ResetAt, At) are Unix milliseconds by the store's clock; durations
(RetryAfterMs, TTLMs) are milliseconds.

win.hit ([Hit]) charges cost (1 … the smallest limit) to 1–4 windows on
distinct keys, all or nothing: it is allowed only if every window admits the
cost, and a denial charges no window. Window kinds are fixed (epoch-aligned
buckets), sliding (the weighted estimate prev·(1−elapsed/W) + cur), log (an
exact sliding log: no rolling window ever holds more than the limit) and gcra
(burst = limit, emission interval = W/limit). Allowed reports the decision;
Remaining is the smallest allowance left across the windows after the hit
(for a denial, each window reports what it had, uncharged); ResetAt is the
latest instant at which a window will be empty; RetryAfterMs is, for a
denial, the delay after which the same hit would first be admitted if nothing
else arrived (the largest of the windows' delays), and 0 when allowed.
Windows holds the same four values for each window, in order. A window key
holding any other kind of record, including a window of another kind, is an
[ErrWrongType].

kv.get ([Get]) reads a value record: Found and Value. An expired record reads
as absent (Found false), which is distinct from a stored "0" (Found true,
Value "0"). Reading a key that holds a window, receipt, gate or pacing log is
an [ErrWrongType].

kv.set ([Set], [SetIf]) writes a value of at most 2 KiB of UTF-8 with a TTL.
Mode always (or empty) writes unconditionally; nx writes only if the key
holds no live record; xx only if it does. When the condition fails, nothing
is written and Allowed is false, which counts as a denial. Found reports
whether a live record existed before. KeepTTL keeps an existing record's
expiry; the TTL is still required and applies when the key was absent.

kv.del ([Del]) removes the record at the key, whatever its kind; Found
reports whether a live one existed.

kv.ttl ([TTL]) reads the remaining lifetime of the record at the key,
whatever its kind: Found and TTLMs.

kv.expire ([Expire]) gives a live value record a new TTL counted from now;
Found reports whether there was one. An absent key stays absent.

kv.incr ([Incr]) adds delta (which may be zero or negative) to the base-10
integer stored at the key and reports the sum in Int. An absent key counts as
0 and is created with the given TTL; an existing counter keeps its expiry, so
the TTL applies only when the counter is created. Found reports whether it
existed. A sum outside the int64 range is an [ErrOverflow], never a wrap; a
stored value that is not a canonical integer is an [ErrWrongType].

res.reserve ([Reserve]) charges cost to 1–4 budgets, all or none. A budget is
a counter (a value record holding its count, readable with kv.get) admitting
at most Limit units per window of WindowMs. The window is anchored to the
first reservation made while the budget was empty or expired: later
reservations and refunds keep its expiry, so a refund to zero does not start
a fresh window. If any budget is Refundable, the command writes a receipt at
Receipt recording the cost and the refundable budgets; the receipt expires
with the earliest of their windows. A receipt replaces an earlier receipt at
the same key; a key holding any other record is an [ErrWrongType]. Results
are those of win.hit, with Windows holding one entry per budget.

res.refund ([Refund]) consumes the receipt at the key: it returns the
receipt's cost to each of its budgets whose window is still live (never below
zero, keeping the window's expiry) and deletes the receipt, so a receipt
refunds at most once. Found reports whether a live receipt was there.

gate.acquire ([Acquire]) takes a lease for TTLMs on a gate admitting at most
Limit live leases. Acquiring a lease already held renews it and is allowed,
so a retried acquire never takes two slots. Remaining is the free slots left,
ResetAt the latest lease expiry and, for a denial, RetryAfterMs the time until
the earliest live lease expires. A crashed holder's lease simply expires.
gate.renew ([Renew]) extends a live lease to now+TTL, never shortening it;
Found reports whether the lease was held, ResetAt the latest lease expiry. gate.release ([Release]) drops a
lease and is idempotent; Found reports whether it was live.

pace.take, pace.claim and pace.penalize ([Pace]) drive a paced limiter: an
exact sliding log of at most Limit grants per WindowMs. pace.take asks for
cost grants: At is the earliest slot (never before an earlier reservation nor
before a penalty deadline); if At is within MaxWaitMs of now the slot is
reserved in the log and Allowed is true, and the caller must not run before
At; otherwise nothing is recorded, Allowed is false and RetryAfterMs is
At−now. Remaining is the allowance the log has left at now, and ResetAt the
instant it will hold no grant. pace.claim is called by the holder of the slot
At once its time has come: before At it is denied with the remaining wait; if
a penalty arrived after the slot was reserved and ends later, the slot is
moved (At changes, or the claim is denied if the new wait exceeds MaxWaitMs),
so a penalty never lets a caller run early. pace.penalize records an upstream
rate limit: no slot is granted before now+DelayMs (deadlines take the
maximum), and the window recovering at the deadline reopens with at most
RefillPermille/1000 of the limit (default one half); At is the deadline in
force and Remaining the allowance left at now. Slots the penalty moves are
new grants in that window: they share its refill with every other caller.

# Bounds

[Request.Validate] checks every bound, and [Engine.Do] and [Engine.Apply]
check them before any store is called: a request outside them fails with
[ErrInvalid] and changes nothing. Clients validate before sending, servers on
receipt.

  - steps: 1 … [MaxSteps] (16); commands in a step: 1 … [MaxCommandsPerStep]
    (8); commands in a request: at most [MaxCommands] (32);
  - windows in a win.hit: 1 … [MaxWindowsPerHit] (4), on distinct keys;
    budgets in a res.reserve: 1 … [MaxBudgets] (4), on distinct keys other
    than the receipt's;
  - partitions, keys, window and budget keys, receipts: 1 … [MaxKeyBytes]
    (512) bytes of valid UTF-8, not starting with a NUL byte (reserved for
    replay records and reserved partitions); operation ids: at most
    [MaxOperationID] (128) bytes of valid UTF-8; lease ids: 1 … 64 bytes of
    valid UTF-8;
  - values: at most [MaxValueBytes] (2 KiB) of valid UTF-8;
  - TTLs: [MinTTLMs] (1 s) … [MaxTTLMs] (120 days);
  - window limits: 1 … 2^40 (a log window 1 … 4,096); window lengths: 1 ms …
    120 days; budget limits 1 … 2^40 over 1 s … 120 days; gate limits
    1 … 1,024; pace limits 1 … 4,096 over 1 ms … 120 days, refill 0 … 1,000 ‰;
  - costs: 1 … the smallest limit they are charged to (a larger cost could
    never be admitted); MaxWaitMs 0 … 120 days; penalties 1 ms … 120 days;
    claimed slots positive;
  - a receipt is given exactly when a budget is refundable.

Zero or negative limits, windows and costs are rejected, and so is every
number large enough to overflow the arithmetic (a cost of 2^63−1, a window of
2^62 ms): out-of-range input is an error, never a wrap and never an allow.
The 16 KiB bound on a request's encoded size belongs to the RPC layer.

# Replay safety

A Request with an OperationID is replay-safe. Use a fresh random id per
logical operation ([NewOperationID]) and the same id when retrying after an
unknown outcome, such as a timeout or [ErrUnavailable].

Every step that changes state writes a replay record in the same atomic batch
as its changes: the step's results and [Step.Hash] (a SHA-256 of its
partition and commands), kept for [ReplayTTL] (180 seconds, covering a ±60 s
signature skew on both sides) under a reserved key of the step's partition
named by the operation id and the step's index. When a step with a live
record runs again:

  - with the same hash, nothing runs: the recorded results come back with
    Replayed set, and nothing is charged, reserved or refunded again. A
    concurrent duplicate is serialised by the partition and replays too;
  - with a different hash, the step fails with [ErrOperationConflict] and
    nothing changes.

A step that changed nothing writes no record: read-only steps (kv.get,
kv.ttl), steps whose commands were all denied, and steps whose commands found
nothing to do (deleting an absent key, releasing a lease not held). Such a
step simply runs again on a retry; it charged nothing the first time. A
record is looked up in the partition the step names, so a retry that moves a
step to another partition is not recognised. Replay records count against a
store's capacity and are never evicted while live. [Engine.Apply] writes no
replay record.

# Time

Time is never the caller's. Each store reads one clock of its own (the
injected [Clock] for in-process stores, the server's TIME inside Redis) once
per batch, so callers need no clock synchronisation. Every instant is a Unix
millisecond by that clock; use RetryAfterMs and TTLMs rather than comparing
ResetAt or At with a local clock.

A clock that steps backwards never yields a negative Remaining or
RetryAfterMs, and never grants a window more than it would at the latest
instant at which it was charged: each window remembers that instant. A denial
leaves no trace, so a hit admitted after the clock steps back behind a denied
one is charged at the earlier instant (see package algo). Record expiry
(TTLs, replay records) follows the store's clock as it reads.

# Errors

Every error wraps one of the sentinel errors below, to be tested with
errors.Is, except that a store may return the context's own error once the
context is done. A denial is never an error.

  - [ErrInvalid]: the request broke a bound or a command was malformed.
    Returned by Validate before any store call; nothing changed.
  - [ErrWrongType]: a command met a key holding another kind of record, or
    kv.incr met a value that is not an integer. The batch was rolled back.
  - [ErrOverflow]: kv.incr would leave the int64 range. The batch was rolled
    back.
  - [ErrOperationConflict]: an operation id was reused with different
    commands within the replay window. Nothing changed.
  - [ErrCapacity]: the store is full and refuses new keys; it never evicts a
    live quota to make room. Nothing changed.
  - [ErrCorrupt]: stored state could not be decoded.
  - [ErrClosed]: the store was closed.
  - [ErrUnavailable]: the store could not be reached or failed. The outcome is
    unknown: retry with the same operation id.

When a step fails, [Engine.Do] returns the results of the steps before it
together with an error of the form "step k: command j (op): …". Earlier steps
stay committed; the failing step changed nothing.

# Choosing a store

  - store/memstore: one process, tests and development. Fast and bounded,
    but its state dies with the process, and separate processes hold separate
    quotas.
  - store/diskstore: the embedded durable default behind a single Sluice
    server; an acknowledged grant survives a crash.
  - store/redisstore: a fleet already sharing Redis (standalone, Sentinel or
    Cluster); durability and failover are Redis's.
  - the client package: a Sluice server reached over the signed RPC, so
    applications need neither Redis nor shared disks.

A store keeping its records in Go runs each batch with an [Executor], which
reads the partition through a [View] and returns the writes to commit, and
every store passes the conformance suite in store/storetest.
*/
package engine
