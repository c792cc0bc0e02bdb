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
	Process(ctx context.Context, cmd redis.Cmder) error
	FunctionLoadReplace(ctx context.Context, code string) *redis.StringCmd
	ConfigGet(ctx context.Context, parameter string) *redis.MapStringStringCmd
	Close() error
}

// masterWalker is implemented by a cluster client: New checks the eviction
// policy of every master, not only of the node that answers first, and the
// function library is loaded on every master.
type masterWalker interface {
	ForEachMaster(ctx context.Context, fn func(ctx context.Context, client *redis.Client) error) error
}

// ringShards walks a Ring's shards as a cluster's masters are walked: a
// Ring places each partition on one of several independent servers.
type ringShards struct{ *redis.Ring }

func (r ringShards) ForEachMaster(ctx context.Context, fn func(ctx context.Context, client *redis.Client) error) error {
	return r.ForEachShard(ctx, fn)
}

// nodes returns the walker over the servers holding the client's keys, or
// nil for a client of one server (or of one primary behind Sentinel).
func nodes(client Client) masterWalker {
	switch c := client.(type) {
	case masterWalker:
		return c
	case *redis.Ring:
		return ringShards{c}
	}
	return nil
}

// The batch code is the files under lua/ joined in this order (see
// lua/prelude.lua): one chunk, split by concept, defining batch(keys, argv).
var scriptParts = [...]string{"prelude", "values", "counters", "windows", "budgets", "gates", "pace", "batch"}

//go:embed lua/*.lua
var luaFiles embed.FS

// The batch code in its two forms (see lua/prelude.lua). The chunk is
// wrapped in a function, sluice(), that defines everything and returns the
// entry point: a function library may not touch Redis's standard libraries
// (math, string, cmsgpack) while it loads, only once it is called, so the
// library builds its batch on its first call and keeps it. The library's
// and the function's names carry the code's digest, so that two versions
// of Sluice sharing one Redis each call their own. The script form, for
// EVALSHA (batchSHA), builds and runs it on every call.
var (
	batchCode    = "local function sluice()\n" + joinScript() + "return batch\nend\n"
	codeVersion  = digest(batchCode)[:16]
	functionName = "sluice_batch_" + codeVersion
	batchLibrary = "#!lua name=sluice_" + codeVersion + "\n" + batchCode +
		"local batch\nredis.register_function('" + functionName + "', function(keys, args)\n" +
		"\tbatch = batch or sluice()\n\treturn batch(keys, args)\nend)\n"
	batchScript = batchCode + "return sluice()(KEYS, ARGV)\n"
	batchSHA    = digest(batchScript)
)

func digest(s string) string {
	h := sha1.Sum([]byte(s))
	return hex.EncodeToString(h[:])
}

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
	// scripts is set once the server has shown it cannot run the function
	// library (Redis before 7, or FCALL or FUNCTION LOAD refused): batches
	// then run as scripts.
	scripts atomic.Bool
	// loads counts the library loads, and loading (a lock held by sending
	// to it) lets one caller load it while the others that found it
	// missing wait, each no longer than its context: a fresh server met by
	// many callers at once compiles the library once, not once per caller.
	loads   atomic.Uint64
	loading chan struct{}
	// co coalesces concurrent batches into pipelines (Config.Pipeline),
	// or is nil.
	co *coalescer
	// joins: the client reaches one node (or one primary behind
	// Sentinel), where a joint step's partitions share a script.
	joins bool
}

// New returns a store running on client, which it owns from then on: Close
// closes it. If New fails, the client is still the caller's to close.
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
// server (from every master of a cluster, every shard of a Ring) and refuses anything but
// noeviction, with an *EvictionError.
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
	if cfg.WaitReplicas > 0 && !canWait(client) {
		return nil, fmt.Errorf("%w: redisstore: WaitReplicas needs a client that can hold one connection for a batch and its WAIT (*redis.Client or *redis.ClusterClient), not %T", engine.ErrInvalid, client)
	}
	if !cfg.AllowEviction {
		ctx, cancel := context.WithTimeout(context.Background(), cfg.Timeout)
		defer cancel()
		if err := checkEviction(ctx, client); err != nil {
			return nil, err
		}
	}
	s := &Store{client: client, cfg: cfg, joins: onOneNode(client), loading: make(chan struct{}, 1)}
	s.calls.New = func() any { return new(call) }
	if _, ok := client.(pipeliner); ok && cfg.Pipeline > 0 && cfg.WaitReplicas == 0 {
		s.co = newCoalescer(cfg.Pipeline)
	}
	return s, nil
}

// onOneNode reports whether every key the client reaches lives on one
// server, so that one call of the batch code may name the keys of several
// partitions: not a cluster, whose partitions lie on slots of their own,
// nor a Ring, whose partitions lie on shards of their own.
func onOneNode(client Client) bool {
	if _, cluster := client.(slotMaster); cluster {
		return false
	}
	return nodes(client) == nil
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
			return &EvictionError{Policy: policy}
		}
		return nil
	}
	w := nodes(client)
	if w == nil {
		return check(ctx, client)
	}
	err := w.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return check(ctx, c) })
	if err != nil && !errors.Is(err, engine.ErrInvalid) {
		return unavailable(err) // the cluster's layout could not be read
	}
	return err
}

// EvictionError is New's error when a server's maxmemory-policy may evict
// keys and Config.AllowEviction is not set. It wraps engine.ErrInvalid.
type EvictionError struct {
	// Policy is the maxmemory-policy the server reported.
	Policy string
}

// Error names the eviction policy and why it must be noeviction.
func (e *EvictionError) Error() string {
	return fmt.Sprintf("%v: redisstore: maxmemory-policy is %q; it must be noeviction, or an evicted window or replay record would admit more than its limit (set AllowEviction to accept that)", engine.ErrInvalid, e.Policy)
}

// Unwrap returns engine.ErrInvalid.
func (e *EvictionError) Unwrap() error { return engine.ErrInvalid }

var _ engine.RemoteStore = (*Store)(nil)

// Remote marks the store as an engine.RemoteStore: every batch is a round
// trip to Redis.
func (*Store) Remote() {}

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
	if err := c.encode(b, &s.cfg, true); err != nil {
		c.clear()
		s.calls.Put(c)
		return err
	}
	reply, err := s.send(ctx, c)
	if err != nil {
		return err
	}
	if err := decodeReply(reply, b, out); err != nil {
		resetStep(out)
		return err
	}
	return nil
}

// send runs the call c within Config.Timeout, with WAIT, in a pipeline or
// alone as the store is configured, and returns its reply. It returns c
// to the pool, except when the caller's ctx ended while c was queued for
// a pipeline: the call may still be sent, and is its sender's then. Every
// error wraps engine.ErrUnavailable.
func (s *Store) send(ctx context.Context, c *call) (any, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	var reply any
	var err error
	switch {
	case s.cfg.WaitReplicas > 0:
		reply, err = s.evalWait(ctx, c)
	case s.co != nil:
		var abandoned bool
		reply, err, abandoned = s.coalesced(ctx, c)
		if abandoned {
			return nil, unavailable(err)
		}
	default:
		reply, err = s.eval(ctx, s.client, c)
	}
	c.clear()
	s.calls.Put(c)
	if err != nil {
		return nil, unavailable(err)
	}
	return reply, nil
}

// eval runs the batch: by FCALL of the function library (built in the
// call's reused slice, and sent as a command go-redis never resends; see
// noRetryCmd), loading it where
// the server lacks it (a fresh server, a restart without persistence,
// FUNCTION FLUSH); on a server without functions, by EVALSHA of the script,
// loading it with EVAL on NOSCRIPT. Loading the library costs one call per
// server and version; after it, a call runs only the batch, where a script
// first rebuilds every function of the chunk (see lua/prelude.lua).
func (s *Store) eval(ctx context.Context, r runner, c *call) (any, error) {
	if s.scripts.Load() {
		reply, err := do(ctx, r, c.evalshaArgs()...)
		if err != nil {
			return s.afterEvalSha(ctx, r, c, err)
		}
		return reply, nil
	}
	loads := s.loads.Load()
	reply, err := do(ctx, r, c.fcallArgs()...)
	if err != nil {
		return s.afterFcall(ctx, r, c, reply, err, loads)
	}
	return reply, nil
}

// afterFcall finishes a batch whose FCALL answered err (loads read before
// it): by loading the library and calling it again, or by running the
// batch as a script, where err says Redis did not run it; otherwise err is
// the batch's.
func (s *Store) afterFcall(ctx context.Context, r runner, c *call, reply any, err error, loads uint64) (any, error) {
	switch {
	case redis.HasErrorPrefix(err, "OOM"):
		// Over maxmemory Redis refuses a whole FCALL, where it refuses
		// only a script's first write: run the batch as a script, so
		// that a read-only batch still answers.
	case !s.functionsMissing(ctx, err, loads):
		return reply, err
	case !s.scripts.Load():
		// The library is loaded now.
		reply, err = do(ctx, r, c.fcallArgs()...)
		if err == nil || !redis.HasErrorPrefix(err, "Function not found") {
			return reply, err
		}
		// Not on the node that answered (a cluster changing under
		// us): run this batch as a script.
	}
	reply, err = do(ctx, r, c.evalshaArgs()...)
	if err != nil {
		return s.afterEvalSha(ctx, r, c, err)
	}
	return reply, nil
}

// afterEvalSha finishes a batch whose EVALSHA answered err: by EVAL where
// the server lacks the script; otherwise err is the batch's.
func (s *Store) afterEvalSha(ctx context.Context, r runner, c *call, err error) (any, error) {
	if !redis.HasErrorPrefix(err, "NOSCRIPT") {
		return nil, err
	}
	return do(ctx, r, c.evalArgs()...)
}

// runner runs the batch code: the store's client, or one connection of it.
type runner interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

// The clients that can hold one connection for a batch and its WAIT: a
// single node's or Sentinel's client, and a cluster client, through the
// master of the batch's slot.
type (
	connPinner interface{ Conn() *redis.Conn }
	slotMaster interface {
		MasterForKey(ctx context.Context, key string) (*redis.Client, error)
		ReloadState(ctx context.Context)
	}
)

// canWait reports whether client can run a batch and its WAIT on one
// connection.
func canWait(client Client) bool {
	switch client.(type) {
	case connPinner, slotMaster:
		return true
	}
	return false
}

// evalWait runs the batch and then WAIT on the same connection, which
// waits for the replicas to acknowledge that connection's writes. On a
// cluster the connection is one to the master of the batch's slot, taken
// outside the cluster client, so a redirection (the slot moved) is not
// followed: it fails the batch and refreshes the client's view of the
// cluster.
func (s *Store) evalWait(ctx context.Context, c *call) (any, error) {
	var conn *redis.Conn
	switch cl := s.client.(type) {
	case slotMaster:
		node, err := cl.MasterForKey(ctx, c.keys[0])
		if err != nil {
			return nil, err
		}
		conn = node.Conn()
	case connPinner:
		conn = cl.Conn()
	}
	defer conn.Close()
	reply, err := s.eval(ctx, conn, c)
	if err != nil {
		if sm, ok := s.client.(slotMaster); ok && (redis.HasErrorPrefix(err, "MOVED") || redis.HasErrorPrefix(err, "ASK")) {
			sm.ReloadState(ctx)
		}
		return nil, err
	}
	acked, err := conn.Wait(ctx, s.cfg.WaitReplicas, s.cfg.WaitTimeout).Result()
	if err != nil {
		return nil, err
	}
	if acked < int64(s.cfg.WaitReplicas) {
		return nil, fmt.Errorf("%w: redisstore: the batch reached %d of %d replicas within %v; the primary applied it, so its outcome is unknown", engine.ErrUnavailable, acked, s.cfg.WaitReplicas, s.cfg.WaitTimeout)
	}
	return reply, nil
}

// functionsMissing reports whether err, the error of an FCALL, means that
// the library must be loaded or that functions cannot be used; in the first
// case it loads the library (unless another caller has since the FCALL,
// when loads was read), in the second it turns to scripts for good. Any
// other error is the batch's: an ACL refusing a key, or a command the
// library calls, refuses a script all the same, and says so.
func (s *Store) functionsMissing(ctx context.Context, err error, loads uint64) bool {
	switch {
	case redis.HasErrorPrefix(err, "Function not found"):
		select {
		case s.loading <- struct{}{}:
			defer func() { <-s.loading }()
		case <-ctx.Done():
			return false // the batch did not run, and its caller gives up
		}
		if s.loads.Load() != loads {
			return true
		}
		if lerr := s.loadLibrary(ctx); lerr == nil {
			s.loads.Add(1)
		} else if loadRefused(lerr) {
			s.scripts.Store(true) // refused (an ACL, a defect): scripts it is
		}
		return true
	case redis.HasErrorPrefix(err, "unknown command"), fcallRefused(err):
		s.scripts.Store(true)
		return true
	}
	return false
}

// fcallRefused reports whether err is the ACL refusing FCALL itself
// ("NOPERM ... no permissions to run the 'fcall' command"), not a key of
// the call nor a command the library runs.
func fcallRefused(err error) bool {
	return redis.HasErrorPrefix(err, "NOPERM") && strings.Contains(err.Error(), "'fcall' command")
}

// loadRefused reports whether err, the error of FUNCTION LOAD, refuses the
// library for good — the ACL, a server without FUNCTION, a library it
// rejects — rather than for the moment (OOM, BUSY, LOADING, READONLY, a
// cluster changing) or for want of a connection: then the batch runs as a
// script, and the next one tries the load again.
func loadRefused(err error) bool {
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return false
	}
	msg := rerr.Error()
	return strings.HasPrefix(msg, "NOPERM") || strings.HasPrefix(msg, "ERR")
}

// aclRefused reports whether err is Redis's ACL refusing the store's user
// a command or a key: NOPERM for a command sent, and for one the batch
// code calls, "ERR The user executing the script can't ..." (Redis 7.0) or
// "ERR ACL failure in script: ..." (7.2 and later).
func aclRefused(err error) bool {
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return false
	}
	msg := rerr.Error()
	return strings.HasPrefix(msg, "NOPERM") || strings.Contains(msg, "The user executing the script can't") ||
		strings.Contains(msg, "ACL failure in script")
}

// loadLibrary loads the function library on the server, on every master of
// a cluster or every shard of a Ring. Replicas receive it from their primary, and persistence keeps
// it across restarts.
func (s *Store) loadLibrary(ctx context.Context) error {
	if w := nodes(s.client); w != nil {
		return w.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			return c.FunctionLoadReplace(ctx, batchLibrary).Err()
		})
	}
	return s.client.FunctionLoadReplace(ctx, batchLibrary).Err()
}

// unavailable wraps a Redis or network error. Whatever it was — a timeout,
// a refused connection, an OOM or BUSY reply, redirections exhausted — the
// batch's outcome is unknown and nothing was admitted. An ACL refusal says
// so, since Redis's own words may not name the cause (Redis 7.0 names no
// command refused inside the batch code).
func unavailable(err error) error {
	if errors.Is(err, engine.ErrUnavailable) {
		return err
	}
	if aclRefused(err) {
		return fmt.Errorf("%w: redis: the ACL refuses the store's user a command or key it needs "+
			"(ACL LOG names which; docs/operations.md, \"Functions and ACLs\", lists them): %w", engine.ErrUnavailable, err)
	}
	return fmt.Errorf("%w: redis: %w", engine.ErrUnavailable, err)
}

// overrideGrace lengthens the physical lifetime of records when
// Config.Clock replaces Redis TIME: Redis expires keys by its own clock,
// which then runs apart from the store's. The script decides liveness from
// each record's own expiry, so the extra lifetime only delays the removal
// of records the store already treats as absent.
const overrideGrace = time.Hour
