package redisstore

import (
	"context"
	"crypto/sha1"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/engine"
)

// Client is what the store needs of a Redis client. redis.UniversalClient
// satisfies it, and so do *redis.Client (single node, or Sentinel through
// redis.NewFailoverClient) and *redis.ClusterClient.
type Client interface {
	EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd
	Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd
	ConfigGet(ctx context.Context, parameter string) *redis.MapStringStringCmd
	Close() error
}

// masterWalker is implemented by a cluster client: New checks the eviction
// policy of every master, not only of the node that answers first.
type masterWalker interface {
	ForEachMaster(ctx context.Context, fn func(ctx context.Context, client *redis.Client) error) error
}

// The batch script is the files under lua/ joined in this order (see
// lua/prelude.lua): one chunk, split by concept.
var scriptParts = [...]string{"prelude", "values", "counters", "windows", "budgets", "gates", "pace", "batch"}

//go:embed lua/*.lua
var luaFiles embed.FS

// batchScript is the script that runs one batch, and batchSHA its digest
// for EVALSHA.
var (
	batchScript = joinScript()
	batchSHA    = func() string {
		h := sha1.Sum([]byte(batchScript))
		return hex.EncodeToString(h[:])
	}()
)

func joinScript() string {
	var b strings.Builder
	for _, name := range scriptParts {
		part, err := luaFiles.ReadFile("lua/" + name + ".lua")
		if err != nil {
			panic("redisstore: the embedded script lacks " + name + ".lua") // a build defect
		}
		b.Write(part)
		b.WriteByte('\n')
	}
	return b.String()
}

// Store is the Redis store. It is safe for concurrent use.
type Store struct {
	client Client
	cfg    Config
	closed atomic.Bool
	calls  sync.Pool // *call
}

// New returns a store running on client, which it owns from then on: Close
// closes it.
//
// The client must honour context deadlines (ContextTimeoutEnabled in the
// go-redis options), or a call to an unresponsive server would outlive
// Config.Timeout: New refuses a go-redis client without it. Automatic
// retries (MaxRetries) should be off: go-redis retries a command whose
// connection broke, which may run a batch twice — for limits that only
// ever charges more, and a batch with an operation id replays its record,
// but a counter without one would count twice.
//
// Unless Config.AllowEviction is set, New reads maxmemory-policy from the
// server (from every master of a cluster) and refuses anything but
// noeviction.
func New(client Client, cfg Config) (*Store, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: redisstore: nil client", engine.ErrInvalid)
	}
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := checkClient(client); err != nil {
		return nil, err
	}
	if !cfg.AllowEviction {
		ctx, cancel := context.WithTimeout(context.Background(), cfg.Timeout)
		defer cancel()
		if err := checkEviction(ctx, client); err != nil {
			return nil, err
		}
	}
	s := &Store{client: client, cfg: cfg}
	s.calls.New = func() any { return new(call) }
	return s, nil
}

// checkClient refuses a go-redis client that ignores context deadlines.
func checkClient(client Client) error {
	var honours bool
	switch c := client.(type) {
	case *redis.Client:
		honours = c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		honours = c.Options().ContextTimeoutEnabled
	case *redis.Ring:
		honours = c.Options().ContextTimeoutEnabled
	default:
		return nil // another implementation: its deadlines are its own
	}
	if !honours {
		return fmt.Errorf("%w: redisstore: the client must set ContextTimeoutEnabled, or a call to an unresponsive Redis would outlive the store's timeout", engine.ErrInvalid)
	}
	return nil
}

// checkEviction refuses a server whose maxmemory-policy may evict keys.
func checkEviction(ctx context.Context, client Client) error {
	check := func(ctx context.Context, c interface {
		ConfigGet(context.Context, string) *redis.MapStringStringCmd
	}) error {
		conf, err := c.ConfigGet(ctx, "maxmemory-policy").Result()
		if err != nil {
			return fmt.Errorf("%w: redisstore: reading maxmemory-policy (set AllowEviction if the server forbids CONFIG and never evicts): %w", engine.ErrUnavailable, err)
		}
		if policy := conf["maxmemory-policy"]; policy != "noeviction" {
			return fmt.Errorf("%w: redisstore: maxmemory-policy is %q; it must be noeviction, or an evicted window or replay record would admit more than its limit (set AllowEviction to accept that)", engine.ErrInvalid, policy)
		}
		return nil
	}
	w, ok := client.(masterWalker)
	if !ok {
		return check(ctx, client)
	}
	err := w.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return check(ctx, c) })
	if err != nil && !errors.Is(err, engine.ErrInvalid) {
		return unavailable(err) // the cluster's layout could not be read
	}
	return err
}

// Close closes the store and its client. Later calls fail with
// engine.ErrClosed. Close is idempotent.
func (s *Store) Close() error {
	if !s.closed.CompareAndSwap(false, true) {
		return nil
	}
	return s.client.Close()
}

// Apply runs b atomically on its partition: one script call, all of its
// effects or none. See engine.Store. On error out holds no results.
func (s *Store) Apply(ctx context.Context, b *engine.Batch, out *engine.StepResult) error {
	resetStep(out)
	if s.closed.Load() {
		return engine.ErrClosed
	}
	c := s.calls.Get().(*call)
	defer s.calls.Put(c)
	if err := c.encode(b, &s.cfg); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	reply, err := s.eval(ctx, c)
	c.clear()
	if err != nil {
		return unavailable(err)
	}
	if err := decodeReply(reply, b, out); err != nil {
		resetStep(out)
		return err
	}
	return nil
}

// eval runs the batch script by digest, loading it with EVAL when the
// server does not have it (after a restart, a failover or SCRIPT FLUSH).
func (s *Store) eval(ctx context.Context, c *call) (any, error) {
	reply, err := s.client.EvalSha(ctx, batchSHA, c.keys, c.args...).Result()
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		reply, err = s.client.Eval(ctx, batchScript, c.keys, c.args...).Result()
	}
	return reply, err
}

// unavailable wraps a Redis or network error. Whatever it was — a timeout,
// a refused connection, an OOM or BUSY reply, redirections exhausted — the
// batch's outcome is unknown and nothing was admitted.
func unavailable(err error) error {
	if errors.Is(err, engine.ErrUnavailable) {
		return err
	}
	return fmt.Errorf("%w: redis: %w", engine.ErrUnavailable, err)
}

// overrideGrace lengthens the physical lifetime of records when
// Config.Clock replaces Redis TIME: Redis expires keys by its own clock,
// which then runs apart from the store's. The script decides liveness from
// each record's own expiry, so the extra lifetime only delays the removal
// of records the store already treats as absent.
const overrideGrace = time.Hour
