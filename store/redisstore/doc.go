// Package redisstore is the Sluice store on Redis: a single server, a
// primary watched by Sentinel, or a Redis Cluster, of Redis 5 or later
// (tested with 7.0).
//
// # When to use it
//
// Use it when more processes than one machine holds must share quotas: any
// number of stateless Sluice servers, or applications using the library
// directly, run batches on one Redis and see one set of limits. On one
// machine prefer the embedded store (store/diskstore), which is faster and
// loses nothing on a crash; in a single process, the memory store.
//
// # Clients
//
// New takes any client with the few methods in [Client]:
// redis.UniversalClient, *redis.Client (also for Sentinel, through
// redis.NewFailoverClient), *redis.ClusterClient or *redis.Ring (each
// partition on one of its shards, placed by the same tag as on a cluster).
// The store owns it from then on. The client must honour context deadlines (ContextTimeoutEnabled),
// so that every call ends within Config.Timeout: New refuses a go-redis
// client without it. Turn automatic retries off (MaxRetries: -1): a retry
// after a broken connection may run a batch a second time. (A cluster
// client retries up to MaxRedirects times whatever MaxRetries says; the
// store marks its commands so that go-redis never resends them, and
// follows only MOVED and ASK, which Redis answers without running the
// command.) [ParseURL] turns
// a store URL — redis://, rediss://, redis+cluster://, redis+sentinel:// —
// into options for redis.NewUniversalClient that meet both conditions;
// [TLSFiles] adds a private certificate authority, a client certificate
// (mutual TLS) and a server name to those of a rediss URL.
//
// # Batches
//
// A batch is one call of the batch code (the files under lua/, embedded and
// joined). On Redis 7 and later the code is a function library: the store
// loads it with FUNCTION LOAD the first time a server lacks it (a fresh
// server, a restart without persistence, FUNCTION FLUSH; on every master of
// a cluster) and calls it with FCALL, so Redis builds its functions once,
// not on every call. The library's name carries the code's digest, so that
// versions of Sluice sharing one Redis each call their own; libraries of
// versions no longer running can be removed with FUNCTION DELETE. On a
// server without functions (or whose ACL refuses them) the same code runs
// as a script: EVALSHA, falling back to EVAL when the server answers
// NOSCRIPT. Redis runs a function or a script without interleaving any
// other command, which makes the batch atomic. Lua has no rollback, so the
// code evaluates every command against a table of its own first and
// writes only when none failed: a batch that fails — a key of the wrong
// type, a counter overflow, an operation id reused with other commands —
// leaves every key as it was. Redis refuses a script's first write when it
// is out of memory (and a whole FCALL, which the store then retries as a
// script, so that a batch that only reads still answers); the code makes
// every write after evaluating, so that refusal, too, leaves the batch
// without effect.
//
// The script mirrors the engine's executor and package algo transition for
// transition, and passes the same conformance suite (store/storetest) as
// every other store. Lua's numbers are doubles, exact below 2^53; where the
// Go code needs more — counters spanning int64, GCRA products reaching
// 2^74 — the script computes exactly in parts. Two inputs are bounded
// beyond the engine's own validation, with engine.ErrInvalid: a pace.claim
// slot must lie before 2^52 ms. And a budget's counter, which a kv.set can
// set to anything, is evaluated exactly from −2^52 up (any value above
// every limit is denied, as it is in Go); below −2^52 a reservation fails
// with engine.ErrOverflow.
//
// # Joint steps
//
// On one server, or one primary behind Sentinel, the store runs joint
// steps (engine.JointStore; Joins reports true): the batches of up to
// engine.MaxJointBatches partitions in one call of the batch code, each
// evaluated against the state before the step, their writes all issued or,
// when any batch is denied or fails, none. A Sluice server charges a fair
// RPC's source and principal that way: one round trip, nothing to refund.
// On a Redis Cluster the partitions' keys lie on different slots, which no
// script may span, and on a Ring on different servers, so the store runs
// none there (Joins reports false, and
// ApplyJoint refuses with errors.ErrUnsupported before sending anything);
// the server then charges the two in two batches.
//
// # Pipelines
//
// Each batch costs a round trip, and under load the round trip — system
// calls, scheduling, on both sides — costs more than the batch code. So
// the store coalesces concurrent batches (Config.Pipeline, on by default)
// by natural batching, with no timer: while fewer than Config.Pipeline
// round trips are in flight, a batch is sent at once, alone, as without
// coalescing; a batch arriving while that many are in flight queues, and
// the next round trip to finish takes up to MaxPipelined queued batches
// and sends them as one pipeline — one write and one read on one
// connection (a cluster client splits it by node and sends each node's
// part at once). A lone caller waits for nothing; many callers share round
// trips. Each batch is still one FCALL, run atomically on its own, with its
// own reply: an error answers only its own batch (a key of the wrong type,
// a function missing, an OOM refusal — the store recovers from the last
// two for that batch alone, as for a batch sent alone), and only a broken
// connection fails every batch of the pipeline, each with
// engine.ErrUnavailable. No command is ever sent twice: go-redis does not
// retry a pipeline with MaxRetries -1 on a single node, and the store
// marks every command as not to be retried, which turns off a cluster
// client's retries of a broken or timed-out pipeline; only a command
// answered MOVED or ASK, which Redis did not run, is sent on to the right
// node. A pipeline serves several callers, so Config.Timeout bounds it
// rather than any caller's context; a caller whose context ends while its
// batch is queued returns at once with engine.ErrUnavailable (a batch still
// queued then is dropped, one already in a pipeline may run). Coalescing
// is off with Config.WaitReplicas, which waits per connection. See the
// project's docs/decisions/0035-redis-pipelines.md for the measurements.
//
// # Key layout
//
// Every key of a partition begins with Config.Prefix and the partition's
// hash tag:
//
//	sluice:{<partition>}:k:<key>      a record (window, value, receipt, gate, pace)
//	sluice:{<partition>}:r:<step>:<op> the replay record of one step
//
// In the tag, '%' is written "%25" and '}' "%7D", so that no partition name
// ends the tag early and distinct partitions never share keys. Redis
// Cluster places a key by the tag alone, so all the keys of a partition
// live in one slot, on one node, and a batch never spans slots. Every key a
// batch names is passed in KEYS. A refund also reaches the budgets named
// inside its receipt, which the caller cannot know in advance; they belong
// to the same partition, so the script forms their names from the
// partition's prefix and Redis allows the access because they hash to the
// same slot. Partitions spread over the cluster's slots; a hot partition is
// a hot slot, as it is a hot lock elsewhere.
//
// Each record is a MessagePack array {kind, expireAt, fields...}. Its
// expiry decides whether it exists (a record is absent from its expireAt
// on); Redis's own expiry removes it at the same instant, so an idle
// partition shrinks to nothing without a sweep.
//
// # The clock
//
// The script reads the time from Redis TIME, so every process sharing the
// Redis shares one clock and none needs its own to be right. On a cluster
// each partition's clock is the clock of the node holding its slot; after
// a failover it is the new primary's. A clock that steps backwards never
// grants a window more than it would at the latest instant at which it was
// charged (see package algo). Config.Clock replaces TIME
// with a clock read in the calling process; it exists for tests, which
// drive time by hand, and production leaves it nil.
//
// # Failover and durability
//
// Redis replicates asynchronously: a primary acknowledges a batch before
// its replicas have it. If the primary dies, its last acknowledged batches
// may be missing from the replica that takes over — the windows then hold
// fewer hits than were admitted, so the limit is exceeded by what was lost,
// and replay records written in that interval are gone, so a retry of a
// lost batch is charged again. Persistence (RDB, AOF) decides what a
// restart of a lone server loses in the same way. Size these losses for
// your limits; Sluice does not claim them away.
//
// Config.WaitReplicas closes the gap at a price: after each batch the store
// sends WAIT on the same connection (on a cluster, a connection of the
// master of the batch's slot), and a batch that fewer replicas acknowledge
// within Config.WaitTimeout fails with engine.ErrUnavailable — its outcome
// unknown, since the primary applied it. No admission is then reported that
// a promoted replica lacks, but every batch costs a replication round trip,
// and every batch fails while too few replicas answer, a promoted primary
// included until a replica attaches. The server-side min-replicas-to-write
// narrows the gap without closing it. The measured figures are in the
// project's docs/operations.md ("Redis").
//
// # maxmemory-policy
//
// A Redis allowed to evict keys under memory pressure can drop a full
// window or a replay record and so admit more than a limit. New reads
// maxmemory-policy (on every master of a cluster) and refuses anything but
// noeviction, unless Config.AllowEviction is set. Under noeviction a full
// Redis refuses writes: batches fail with engine.ErrUnavailable, and
// nothing is admitted.
//
// # Errors
//
// A denial is a result. A batch that fails as a batch fails in every
// store — engine.ErrWrongType, engine.ErrOverflow,
// engine.ErrOperationConflict, engine.ErrCorrupt (a key holding a record
// the batch code would never write) — with nothing written. Every other failure —
// a timeout, a refused connection, an unresponsive server, redirections
// exhausted, CROSSSLOT, an OOM or BUSY reply, an ACL refusal (which the
// error names as such), a reply that does not decode — is
// engine.ErrUnavailable (as is a batch its replicas did not acknowledge
// under Config.WaitReplicas): the batch's outcome is unknown, and nothing in
// the StepResult may be read as admitted (Apply leaves it empty). Retry with
// the same operation id.
package redisstore
