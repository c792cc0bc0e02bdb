/*
Package client is the Go client of a Sluice server: a store reached over the
signed RPC (POST /v1/rpc, and POST /v1/rpcs for several at once), with the
fail modes and per-process shortcuts a fleet of callers needs around it.

# A store like any other

A [Client] is an engine.Store and an engine.RequestStore: engine.New(c) runs
every request in one RPC, and everything built on the engine (paced calls,
route quotas, your own code) runs against a server exactly as it runs on an
in-process store. Errors are those of a local store (engine.ErrInvalid,
engine.ErrWrongType, engine.ErrOverflow, engine.ErrOperationConflict), plus
one more: [ErrUnavailable].

	c := client.New(cfg)
	defer c.Close()
	eng := engine.New(c)
	resp, err := eng.Do(ctx, &engine.Request{Steps: …})

For the common "may this caller go ahead?" check use a [Guard], which adds a
denial cache and the family's fail mode to one win.hit.

# Configuration

A [Config] comes from a struct ([DefaultConfig]) or from the environment
([ConfigFromEnv]):

	SLUICE_URL         the server's origin: https://host[:port]; plain http
	                   only on loopback (localhost, 127.0.0.0/8, ::1)
	SLUICE_SECRET      the request-signing secret, ≥ 32 characters
	SLUICE_PEPPER      the key-hashing pepper, ≥ 32 characters, not the secret
	SLUICE_TIMEOUT_MS  per-call timeout: default 750, clamped to 100–2000
	SLUICE_FAMILY      the admission family sent by default ("default")
	SLUICE_FAMILIES    comma list of the families this process assigns to
	                   the server (see Client.Assigned)
	SLUICE_BACKEND     "off" reports the store unavailable to every caller
	SLUICE_HTTP_VERSION
	                   "2" for HTTP/2 with prior knowledge (h2c) on plain
	                   http, "1.1" for HTTP/1.1 everywhere; unset: HTTP/1.1
	                   on plain http, HTTP/2 over https where offered
	SLUICE_COALESCE    the RPCs in flight before concurrent calls are
	                   coalesced into envelopes (default 2), or "off"

The default HTTP version is the cheaper one for each: on plain http
(loopback), HTTP/1.1 over pooled keep-alive connections costs less CPU per
call than h2c in Go's HTTP stack; over https, HTTP/2 keeps one TLS
connection for every call. [HTTP2] asks for h2c, which sluice serve
accepts but a plain HTTP/1.1 server does not.

An invalid configuration — a missing or cleartext URL, a missing or short
secret or pepper, a malformed variable — never falls back to anything: [New]
returns a client that is off, whose every call fails with [ErrUnavailable]
and the reasons ([Client.Err] reports them, [Config.Validate] lists them),
so each caller applies its fail mode and the problem is loud.

# Concurrent calls travel together

A client used by many goroutines at once coalesces their calls, by natural
batching and without any timer. While fewer than [Config.Coalesce] RPCs
(default [DefaultCoalesce]) are in flight, a call is sent at once, on its
own. A call made while that many are in flight waits; the next RPC to
finish takes every call waiting then — up to 32, within the envelope's
48 KiB — and sends them as one envelope (POST /v1/rpcs). Calls heavy
enough to fill half an envelope while they wait (a handful of calls of 32
commands) go at once as one more envelope, up to 4 × Config.Coalesce in
flight: their decisions already share the envelope's cost, and waiting
would only leave the server idle. The server runs each request of an
envelope exactly as if it had come alone — its own
operation id, family, identities, admission — and answers each on its own,
so every caller gets its own result or error, as it would have alone (an
answer naming another operation id than its caller's is refused as
unavailable). An idle client adds no delay; a busy one spends about half
the CPU per call, on both sides, and shares the durable store's fsyncs
among more calls.

Every RPC and envelope asks for a minimal answer (Prefer: return=minimal),
in which a hit of one window, or a reservation of one budget, does not
repeat its result's fields in a window list; the client rebuilds the list
from its request, so callers always get the whole result. A server that
does not know the preference answers in full, which the client reads as
well.

Nothing orders the requests of one envelope. A caller whose context ends
while it waits returns at once with [ErrUnavailable]; its request may
still be sent, and a retry with the same operation id is replay-safe, as
after any unknown outcome. [CoalesceOff] (SLUICE_COALESCE=off) sends every
call alone. Against a server without envelopes — its 404 to the first one,
which it answers without running anything, or a [Client.Ping] without the
feature — the client sends every call alone from then on.

# Raw identifiers never leave the process

Before a request is sent, every partition name and every key a command
names (window, kv, budget, receipt, gate and pace keys) is replaced by its
name: the HMAC-SHA256, keyed with the pepper, of a purpose, a zero byte and
the value ([Client.Hash], with [PurposePartition] or [PurposeKey]), 22
characters of base64url under a pepper from [NewPepper] (one beginning
with [CompactPrefix]) and 64 hex digits under any other.
Values and lease ids are data, not identities, and travel as they are. The
server, its store, its logs and its metrics see only hashes. Every process
sharing a quota must use the same pepper; changing it starts every counter
afresh.

[Client.WithFamily] and [Client.WithFairness] return immutable
request-scoped views: the admission family, and the hashed source and
principal identities that admission fairness charges ([PurposeSource],
[PurposeSourceTier], [PurposePrincipal]; a source address is first reduced
to its bucket and prefix tiers, see [SourceBucket] and [SourceTiers], and a
missing, unspecified or unparsable one is sent as [UnknownSource], the one
bucket every client names alike).

# Operation ids and retries

Every request carries an operation id: the request's own when it has one,
a fresh [engine.NewOperationID] otherwise. A batch given to [Client.Apply]
for a step other than the first of its operation carries an id derived
from the operation's and the step, so each step keeps its own replay
record. The client never retries. After
an unknown outcome (a timeout, any [ErrUnavailable]) a caller that retries a
mutating request passes the same operation id, and the server returns the
recorded results without charging again. The bounds (steps, commands,
windows, value sizes, TTLs, the 16 KiB body) are checked before anything is
sent: a request outside them fails with engine.ErrInvalid and makes no RPC.

# Errors

Every failure that leaves the outcome unknown or the server unusable is one
error wrapping [ErrUnavailable] (which is engine.ErrUnavailable) and its
cause: a transport error, the timeout, an answer 401 (signature), 413
(body), 429 (fairness quota), 503 (stopped, misconfigured or failing), any
other unexpected status, an undecodable answer or one that does not fit
the request (a result missing or extra, a step skipped out of turn), or an
off client. When the server answered a problem document the cause is a
*wire.Error, so errors.Is(err, wire.ErrStopped) tells a stop from a
failure. The server's
400 invalid, wrong_type and overflow answers and its 409 conflict are
engine.ErrInvalid, engine.ErrWrongType, engine.ErrOverflow and
engine.ErrOperationConflict; a 400 or 409 without one of those codes is
unavailability. So is any error answering a whole envelope, whatever its
code: nothing in it ran, and no caller in it made a mistake of its own.

# Configuring paced-call limiters

[Limiters] is the client of the server's /v1/limiters endpoints, with the
operator token or a limits key: it configures, reconfigures, lists and
reports on the paced-call limiters (package pace) that workers reach through
a Client sharing the server's pepper. `sluice limits` is built on it.

# Fail modes

A caller chooses per family what [ErrUnavailable] means ([FailMode]):
[FailClosed] refuses (an HTTP caller answers 503 with Retry-After: 30, see
[WriteUnavailable]); [FailOpen] admits; [Degraded] enforces the same windows
in this process alone, as fixed windows, while the server is unavailable.
A [Guard] applies the mode for you, keeps the degraded counters, and
answers repeated denials from memory until their reset. A hit whose own
context ends before the answer is not an outage: the Guard returns its
error rather than apply the mode. Its caches hold at
most [MaxEntries] (10,000) entries each, evicting the oldest.

A Guard given a Prometheus registerer ([GuardConfig].Registerer) counts
its decisions in sluice_guard_decisions_total, by family, origin and
result: an alert on the fail-closed, fail-open and degraded origins sees
a fleet answering by its fail mode, which the server, unreachable, cannot
report.
*/
package client
