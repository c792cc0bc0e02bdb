package redisstore

import (
	"fmt"
	"strings"
	"time"

	"github.com/sluicehq/sluice/engine"
)

// Config configures a Store. New fills a zero Prefix or Timeout from
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
	// Clock, when set, replaces Redis TIME as the store's clock, read once
	// per batch in the calling process and passed to the script. It exists
	// for tests, which drive time by hand; production leaves it nil, so
	// that every process sharing the Redis shares its clock.
	Clock engine.Clock
}

// DefaultConfig returns the default configuration: keys under "sluice", a
// 750 ms timeout, noeviction required, no wait for replicas, Redis TIME as
// the clock.
func DefaultConfig() Config {
	return Config{Prefix: "sluice", Timeout: 750 * time.Millisecond}
}

// MaxTimeout is the longest Config.Timeout.
const MaxTimeout = time.Minute

// DefaultWaitTimeout is the WaitTimeout of a Config with WaitReplicas and
// none.
const DefaultWaitTimeout = 100 * time.Millisecond

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
	if c.WaitReplicas > 0 && (c.WaitTimeout < time.Millisecond || c.WaitTimeout >= c.Timeout) {
		return fmt.Errorf("%w: redisstore WaitTimeout %v must be at least 1ms and shorter than Timeout %v", engine.ErrInvalid, c.WaitTimeout, c.Timeout)
	}
	return nil
}
