// Package diskstore is Sluice's embedded durable store: the default behind
// `sluice serve`, and the store to use in a single process whose quotas must
// survive a restart. It keeps hot partitions in memory, writes every change
// through to Pebble (github.com/cockroachdb/pebble/v2) in the same batch as
// its replay record, and answers only once the write is in Pebble's
// write-ahead log. A restart never hands out a fresh allowance.
//
// For a quota shared by several machines use the Redis store; for tests
// and quotas that may be forgotten, memstore.
//
// # Durability
//
// Config.Sync decides when the write-ahead log is fsynced, and so what an
// acknowledged batch survives:
//
//	policy     answer after                  kill -9 loses              power loss loses
//	always     the log record is fsynced     nothing acknowledged       nothing acknowledged
//	interval   the record is written to      nothing acknowledged       the last SyncInterval of
//	           the OS; fsync every                                      acknowledged batches
//	           SyncInterval
//	never      the record is in Pebble's     what Pebble had not yet    also what the OS had
//	           log buffer                    written to the OS          not written back
//
// The default is always. Pebble's commit pipeline shares one fsync among
// every batch waiting for one, so with many callers in flight always costs
// little: on a two-core machine with 64 writers the store runs at about
// Pebble's own synced group-commit rate (see bench_test.go and
// docs/decisions/0001-embedded-engine.md). But each answer still waits
// for an fsync, which on a virtual disk takes up to a millisecond or more.
// Interval answers once the record is with the operating system: a process
// crash loses nothing, and only a power loss or a kernel crash loses the
// batches of the last SyncInterval (docs/decisions/0089). Choose it for
// quotas that may forget a fraction of a second after a power loss, and
// never only for quotas that may be forgotten: under never even a process
// crash loses acknowledged batches, since Pebble hands its log to the
// operating system a 32 KiB block at a time, or when an fsync is asked for.
//
// # Batches
//
// Each batch is evaluated by engine.Executor against its partition's
// records in memory; its writes (record rows, deletes, the replay record,
// and an expiry index entry for each record created or whose expiry moved
// to another minute) go to Pebble as one journal row, in one pebble.Batch,
// and only once Pebble has accepted that batch are they applied to memory,
// so a batch Pebble refuses changes nothing.
//
// The rows themselves are written by a checkpoint, about once a second
// (before each sweep pass) and sooner when 64 MiB of changes are pending:
// each changed record's row once, as the partition holds it then, however
// many commits changed it, and in key order; the checkpoint deletes the
// journal rows it covers in the same Pebble batch. Until then the
// partition keeps the pending rows in memory and is not evicted (evicting
// an idle one writes its rows first). Opening a store applies the journal
// rows a crash left. A journal row is in the write-ahead log exactly when
// the rows were before, so durability is unchanged; what changes is the
// cost: a hot record's every hit inserted a new version of its row into
// Pebble's memtable, at a random place, and now a commit inserts one
// journal row at the end of the journal (see journal.go).
//
// Batches that arrive on a partition while another is being run are
// combined into the next round: one caller evaluates them all in arrival
// order, each seeing the writes of those before it, and commits them in one
// Pebble batch (see commit.go). Under the always policy the next round
// starts as soon as Pebble has sequenced this one in its log, before the
// fsync, and the callers wait for the fsync after: a hot partition costs
// one Pebble commit per round, not per batch, and its rounds share fsyncs.
// No answer rests on state a crash could lose: the log is fsynced in
// order, so a batch that read an earlier batch's writes is durable only
// after them, and a round that writes nothing (denials, reads, replayed
// results) but saw unsynced state waits for that state's fsync.
//
// A request of several steps does not wait for each step's fsync in turn:
// the Store is an engine.DeferredSyncStore, so engine.Engine.Do runs every
// step with ApplyDeferred (which returns once the step is in the log and
// in memory) and then calls Sync once, which returns when the log is
// fsynced past everything the steps wrote or read. A round whose callers
// all deferred its fsync asks Pebble for none: asking would start an fsync
// covering that round alone while the rest of the request still runs, and
// the request's Sync would wait for a second one. The round is durable
// with the next fsync anyone asks for (a Sync, a synced round), and a
// goroutine of the store asks for one itself if none comes within a few
// milliseconds (see durability.go). The request is answered after that, so it costs one
// fsync wait instead of one per step, with the same guarantee. A partition
// holding state not yet fsynced is not evicted from memory meanwhile.
//
// The Store is also an engine.JointStore: ApplyJoint runs batches on
// several partitions as one atomic step (admission charges a fair RPC's
// source and principal so). It locks the partitions in a fixed order (by
// hash, then name), evaluates every batch, and unless one is denied commits
// all of their writes in one Pebble batch, which the write-ahead log keeps
// or loses whole; it is deferred like ApplyDeferred, each written partition
// counted unsynced until its fsync (see joint.go).
//
// If an fsync fails, memory is ahead of the disk, and Pebble's log takes a
// few more records before it panics on a commit: the store fails stop and
// commits nothing more, not even the calls already inside it. Every later
// call returns an error wrapping engine.ErrUnavailable, and reopening the
// directory recovers exactly what reached the disk.
//
// # Log files
//
// Pebble's write-ahead log is fsynced faster into blocks written before
// than into new ones. So the store keeps a spare log file of zeros,
// sluice-wal-spare in Config.Dir, written in the background, and gives it
// to Pebble in place of each new log file, or of a recycled one shorter
// than the spare (see walfs.go). The spare grows with the logs, up to
// 110 % of Config.MemTableBytes, and is kept between runs. If it cannot be
// written, the store logs a warning and goes on without it.
//
// # Memory
//
// At most Config.MaxResident partitions are held in memory (about 170 bytes
// for a partition of one record, so the default of 1,048,576 holds about
// 180 MiB), each with an 8-byte fingerprint of every replay record it
// holds until the record expires (the records themselves are read from
// disk only when a step is retried); past it the least recently used idle
// partition is evicted, and a partition idle for Config.IdleTimeout is
// evicted by the background loop. An evicted partition is reloaded on its
// next batch with one prefix scan of its records and a seek in each
// second of each minute that may hold some of its replay records. A fixed 4 MiB Bloom
// filter of the partitions that have rows on disk lets a partition never
// written skip those reads; eight more, of 512 KiB each, one per minute,
// of the partitions that may have replay records expiring in it, let a
// partition that has none (not written with an operation id in the last
// engine.ReplayTTL) skip the seeks (see replaymarks.go). A partition
// written since the last checkpoint also holds the journal ops of its
// commits since then (up to 64 MiB across the store), and evicting it
// writes its rows first. A checkpoint keeps the
// buffers of what it wrote while the load that filled them lasts (past
// 4 MiB they are let go once a checkpoint needs less than half of them),
// and the store keeps the ops buffers of partitions a checkpoint left
// clean (those of 256 bytes to 64 KiB), for the next partitions to turn
// dirty: up to twice the ops that checkpoint wrote, so about 128 MiB at most
// under a load that fills the 64 MiB, and 4 MiB once a checkpoint finds
// nothing to write. The first retry of a step on a partition
// written since the last checkpoint indexes the replay records among its
// pending ops (a map entry each), so that later retries do not read them
// all again; a partition keeps an index of up to 1,024 entries for its
// next ops, and drops a larger one.
//
// # Expiry
//
// Expired records read as absent at once (the Executor ignores them). On
// disk, an index of records by the minute their expiry falls in (see
// layout.go) lets a background sweep every Config.SweepInterval find them:
// once a minute has passed, it deletes up to Config.SweepLimit (at most
// 1,000) of that minute's index entries a pass, oldest minute first, with
// the records they name that have expired. It locks each partition and
// checks each record's expiry again before deleting it, so a record renewed
// since survives, and a partition nobody touches shrinks to nothing on disk
// within about a minute of its last record's expiry. Replay records carry
// no index entries: they are kept by the minute their expiry falls in, in
// the order of their expiry (so Pebble moves them down its levels rather
// than merging them again and again), and the sweep deletes each minute's
// with one range deletion once it has passed. The sweep's deletes are not fsynced: one lost to a crash is
// redone by a later pass.
//
// # Time
//
// The store's clock (Config.Clock, the system clock by default) is the only
// time authority: each batch reads it once, under its partition's lock.
// Idle eviction and the sweep use it too.
//
// # On-disk format
//
// The key layout is described in layout.go. A format version is written
// when a store is created and checked when it is opened. A directory of
// version 5 (before replay records left out the windows that repeat their
// results) is opened as version 6 as it is. One of versions 2 to 4 (before
// the journal, before the journal's opSetRecord, and before replay records
// were kept in the order of their expiry) is opened as version 6 too: its
// journal is applied, then its live replay records are moved, in one pass
// over them. One of version 1 (before the index by minute) is migrated when
// it is opened, in one pass over its records. A directory of another
// version, or a Pebble database that is not a store, is refused with an
// error wrapping ErrFormat. A build that reads versions 2 to 4 refuses a
// directory of version 5 or 6, and one that reads version 5 a directory of
// version 6.
package diskstore
