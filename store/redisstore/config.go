package redisstore

import (
	"fmt"
	"strings"
	"time"

	"github.com/sluicehq/sluice/engine"
)

// Config configures a Store. New fills a zero Prefix, Timeout or Pipeline from
// DefaultConfig, so the zero Config is the default one.
type Config struct {
	// Prefix starts every key the store writes (see the package
	// documentation for the layout), so that several stores, or Sluice
	// and other applications, can share one Redis. It must not contain
	// '{' or '}', which would move the hash tag.
	Prefix string
	// Timeout bounds every Apply, from the call to the decoded reply. A
	// batch that cannot finish in time fails with engine.ErrUnavailable
	// (its outcome unknown). The client must honour context deadlines
	// (see New).
	Timeout time.Duration
	// AllowEviction lets New accept a server whose maxmemory-policy is
	// not noeviction, or whose policy it cannot read (CONFIG disabled).
	// An evicting server can drop a full window or a replay record under
	// memory pressure and so admit more than a limit: set it only when the
	// memory is sized so that eviction never happens.
	AllowEviction bool
	// WaitReplicas, when above zero, makes every batch wait until that
	// many replicas have acknowledged its writes (Redis WAIT, on the same
	// connection, after the batch): a batch they do not acknowledge within
	// WaitTimeout fails with engine.ErrUnavailable, its outcome unknown,
	// though the primary applied it. So no admission is reported before it
	// reached the replicas, and a failover to one of them loses none — at
	// the price of a replication round trip per batch, and of failing every
	// batch while fewer replicas answer. See the package documentation.
	WaitReplicas int
	// WaitTimeout bounds the wait of WaitReplicas (default 100 ms). It
	// must be shorter than Timeout, which bounds the whole batch.
	WaitTimeout time.Duration
	// Pipeline coalesces concurrent batches into pipelines, by natural
	// batching with no timer: while fewer than Pipeline round trips to
	// Redis are in flight, a batch is sent at once, alone; a batch
	// arriving while Pipeline are in flight queues, and the next round
	// trip to finish sends up to MaxPipelined queued batches as one
	// pipeline (one write and one read; on a cluster, one per node). So
	// an idle store adds no delay, and a busy one makes fewer, larger
	// round trips. Each batch keeps its own reply or error, and none is
	// ever sent twice. A caller whose context ends while its batch is
	// queued returns at once with engine.ErrUnavailable (the batch may
	// still run, as after a timeout). Zero means DefaultPipeline; -1 sends
	// every batch alone. Ignored with WaitReplicas, and with a client that
	// cannot pipeline. See the package documentation.
	Pipeline int
	// Clock, when set, replaces Redis TIME as the store's clock, read once
	// per batch in the calling process and passed to the script. It exists
	// for tests, which drive time by hand; production leaves it nil, so
	// that every process sharing the Redis shares its clock.
	Clock engine.Clock
}

// DefaultConfig returns the default configuration: keys under "sluice", a
// 750 ms timeout, noeviction required, no wait for replicas, concurrent
// batches coalesced into pipelines behind DefaultPipeline round trips,
// Redis TIME as the clock.
func DefaultConfig() Config {
	return Config{Prefix: "sluice", Timeout: 750 * time.Millisecond, Pipeline: DefaultPipeline}
}

// MaxTimeout is the longest Config.Timeout.
const MaxTimeout = time.Minute

// DefaultWaitTimeout is the WaitTimeout of a Config with WaitReplicas and
// none.
const DefaultWaitTimeout = 100 * time.Millisecond

// DefaultPipeline is the Config.Pipeline of a Config with none: the round
// trips in flight before batches queue into pipelines, chosen by
// measurement (docs/decisions/0035-redis-pipelines.md).
const DefaultPipeline = 2

// MaxPipeline is the largest Config.Pipeline.
const MaxPipeline = 1024

// MaxPipelined is the most batches one pipeline carries.
const MaxPipelined = 64

// MaxWaitReplicas is the largest Config.WaitReplicas.
const MaxWaitReplicas = 16

// withDefaults returns c with its zero Prefix and Timeout filled in.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.Prefix == "" {
		c.Prefix = d.Prefix
	}
	if c.Timeout == 0 {
		c.Timeout = d.Timeout
	}
	if c.WaitReplicas > 0 && c.WaitTimeout == 0 {
		c.WaitTimeout = DefaultWaitTimeout
	}
	if c.Pipeline == 0 {
		c.Pipeline = d.Pipeline
	}
	return c
}

// Validate reports whether c is usable as New would use it (after filling
// its zero fields).
func (c Config) Validate() error {
	c = c.withDefaults()
	if c.Prefix == "" || len(c.Prefix) > 64 {
		return fmt.Errorf("%w: redisstore Prefix of %d bytes (want 1…64)", engine.ErrInvalid, len(c.Prefix))
	}
	if strings.ContainsAny(c.Prefix, "{}") {
		return fmt.Errorf("%w: redisstore Prefix %q contains a brace, which would move the hash tag", engine.ErrInvalid, c.Prefix)
	}
	if c.Timeout <= 0 || c.Timeout > MaxTimeout {
		return fmt.Errorf("%w: redisstore Timeout %v outside (0, %v]", engine.ErrInvalid, c.Timeout, MaxTimeout)
	}
	if c.WaitReplicas < 0 || c.WaitReplicas > MaxWaitReplicas {
		return fmt.Errorf("%w: redisstore WaitReplicas %d outside 0…%d", engine.ErrInvalid, c.WaitReplicas, MaxWaitReplicas)
	}
	if c.Pipeline < -1 || c.Pipeline > MaxPipeline {
		return fmt.Errorf("%w: redisstore Pipeline %d outside -1…%d", engine.ErrInvalid, c.Pipeline, MaxPipeline)
	}
	if c.WaitReplicas > 0 && (c.WaitTimeout < time.Millisecond || c.WaitTimeout >= c.Timeout) {
		return fmt.Errorf("%w: redisstore WaitTimeout %v must be at least 1ms and shorter than Timeout %v", engine.ErrInvalid, c.WaitTimeout, c.Timeout)
	}
	return nil
}
