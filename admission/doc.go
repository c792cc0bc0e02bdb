// Package admission decides, before any subject command runs, whether an
// authenticated RPC may spend its family's daily allowance and its callers'
// fairness quotas.
//
// # Families and daily budgets
//
// Every RPC names a family. Each family has an allowance of admitted
// commands per UTC day (Config.Total split by Config.Split, or shared
// equally). An RPC reserves its full command count — including steps that
// end up skipped — before its first subject command; nothing is refunded. A
// batch larger than what is left is refused. At Config.WarnPermille of the
// allowance one warning is logged per family and day (across servers: the
// warning is claimed with a durable NX record). When the allowance is gone
// the family is stopped durably until the next UTC day or an operator
// resume; other families are unaffected.
//
// # No hotspot, exact caps
//
// A server leases its family allowance in chunks (Config.Chunk commands,
// capped at 1 % of the allowance: EffectiveChunk) from a durable counter,
// one per family and day, and admits from the leased chunk in memory
// without a lock on the fast path. The cap is exact: a command is admitted
// only from a leased chunk, and leases never exceed the allowance. A chunk
// unspent when a server crashes is lost, never spent twice. The cost is
// latency of a stop: when the allowance is exhausted, a server sharing the
// store keeps admitting from the chunk it already holds (at most one
// chunk), and sees the durable family stop within Config.StateRefresh.
// A fair RPC takes its commands from the chunk before its quotas are
// charged, and gives them back if a quota refuses; a server that finds
// the allowance exhausted while such charges are still running waits for
// them before it refuses and stops the family, so a refused RPC never
// costs another its place. (A command given back to another server's
// chunk stays with that server, and one taken before a new UTC day or a
// resume goes with the chunk it came from, never to the fresh allowance.)
//
// The warning counts admitted commands, as far as the server admitting
// knows them: everything leased as of its last lease, less what it still
// holds. On one server that is exact; with several, the other servers'
// unspent chunks count as admitted, so the warning may come early by at
// most one chunk (1 % of the allowance) per other server, never late.
//
// # Fairness
//
// An RPC may carry a hashed source, its hashed aggregate prefix tiers and a
// hashed principal. Each source bucket (an IPv4 /32, an IPv6 /64, or the
// shared unknown bucket), each prefix tier (IPv4 /24, IPv6 /56 and /48) and
// each principal may spend at most floor(family budget / divisor) commands
// per UTC day (Shares). The source bucket and its tiers live in one
// partition (keyed by the coarsest tier); the principal lives in its own
// partition. Both are charged before any subject command runs, all or
// nothing, so a fairness denial spends nothing: no family allowance, no
// quota, and no subject command runs.
//
// On a store that runs joint steps (engine.Engine.Joins: the embedded
// store, memstore, and Redis on one node or behind Sentinel) the two
// partitions are charged in one atomic step, one commit: either both
// reservations commit or, when any quota refuses, neither does. On any
// other store (Redis Cluster, a server reached through the client) the
// source with its tiers is reserved in one batch and the
// principal in a second; when the principal's quota denies after the
// source's was reserved, the source reservation is refunded. Between the
// two batches a concurrent RPC may see the source reservation and be
// denied — a conservative error, never an over-admission. Either way one
// partition shared by every source and principal of the family, which
// every fair RPC would serialise on, is avoided. When both sides refuse,
// the answer names the source's axis.
//
// # Quota leases
//
// A charge that reaches the store reserves, on each quota it charges, the
// RPC's commands and what fills the quota's lease up to a chunk
// (Config.QuotaChunk, capped at 1 % of the quota's share), which the
// server keeps as that identity's lease: the
// identity's next RPCs take from their leases without a store call, and
// only an RPC some quota's lease cannot cover goes to the store. A share
// is still never exceeded, a refusal still spends nothing (what an RPC
// took from leases goes back), and the last commands of a share are
// admitted exactly: a charge whose chunk does not fit is retried for its
// own commands alone. A lease unspent at a restart, at the end of its day
// or when evicted is lost — the identity is admitted up to one chunk less
// that day, never more. A fairness reset drops the leases of the server
// that made it at once, and those of other servers sharing the store
// within Config.StateRefresh. See leases.go.
//
// # The denial memory
//
// An identity found exhausted is remembered (Config.DenialCache entries at
// most, the oldest forgotten first) with what its quota had left, until
// the end of the UTC day: an RPC needing more is refused without a store
// call. Nothing remembered ever admits — an evicted entry, a restart or
// another server asks the store again. A refund and a fairness reset make
// the memory forget what it learnt before them: at once on the server that
// made them, and, for a reset, on every other server sharing the store
// within Config.StateRefresh.
//
// # The audit trail
//
// Every fairness reset is numbered and recorded in the store before it
// takes effect, for 120 days, and logged; Admitter.Audit lists the trail
// newest first, a bounded page at a time.
//
// # Durability
//
// Usage counters, stops and quotas live in reserved partitions of the
// server's own store, under keys naming the UTC day, with TTLs of two days:
// they survive restarts and expire by the store's own bounded sweep.
package admission
