package httplimit

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/dchest/siphash"

	"github.com/sluicehq/sluice/clientip"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/store/memstore"
)

// Limiter is one rate-limit stage. Its Handler method is the middleware.
// A Limiter is safe for concurrent use, and holds no goroutines or timers:
// it needs no closing (close a Store you passed in yourself).
type Limiter struct {
	routes   routes
	prefix   string
	store    engine.Store
	resolver *clientip.Resolver         // the default key; nil when key is set
	key      func(*http.Request) string // Config.Key, or nil
	policy   Policy
	cpolicy  compiledPolicy // policy, when it keeps its quotas compiled
	static   *compiled      // the quota of every request when policy is nil
	headers  Headers
	onError  func(http.ResponseWriter, *http.Request, error)
	log      *slog.Logger

	scratch sync.Pool // *scratch
	k0, k1  uint64    // the key of the client keys' hash (see hashKey)

	mu       sync.RWMutex
	compiled map[Quota]*compiled // the Policy's quotas seen so far, at most maxCompiled

	failing atomic.Bool // the last check failed

	metrics *stageMetrics // nil without Config.Registerer
}

// New returns the stage cfg describes, or an error wrapping
// ErrInvalidConfig.
func New(cfg Config) (*Limiter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	l := &Limiter{
		routes:  compileRoutes(cfg.Routes),
		prefix:  cfg.Prefix,
		key:     cfg.Key,
		policy:  cfg.Policy,
		headers: cfg.Headers,
		onError: cfg.OnError,
		log:     cfg.Logger,
	}
	if l.log == nil {
		l.log = slog.New(slog.DiscardHandler)
	}
	if l.onError == nil {
		l.onError = WriteUnavailable
	}
	if l.key == nil {
		ipcfg := cfg.ClientIP
		if ipcfg.Logger == nil {
			ipcfg.Logger = l.log
		}
		res, err := clientip.New(ipcfg)
		if err != nil {
			return nil, fmt.Errorf("%w: ClientIP: %w", ErrInvalidConfig, err)
		}
		l.resolver = res
	}
	l.store = cfg.Store
	if l.store == nil {
		mcfg := memstore.DefaultConfig()
		mcfg.MaxKeys = DefaultMaxKeys
		mem, err := memstore.New(mcfg)
		if err != nil {
			return nil, err
		}
		l.store = mem
	}
	l.compiled = make(map[Quota]*compiled)
	l.cpolicy, _ = l.policy.(compiledPolicy)
	if l.policy == nil {
		c, err := compile(cfg.Quota)
		if err != nil {
			return nil, err
		}
		l.static = c
	}
	if cfg.Registerer != nil {
		m, err := newStageMetrics(cfg.Registerer, cfg.Prefix)
		if err != nil {
			return nil, err
		}
		l.metrics = m
	}
	l.k0, l.k1 = hashKey(cfg.Pepper, cfg.Prefix)
	l.scratch.New = func() any { return new(scratch) }
	return l, nil
}

// Handler returns next behind the stage: a request on a selected route is
// counted against its client's quota and runs next only if it is allowed;
// every other request goes straight to next, without touching the store.
//
// A rejected request is answered 429 Too Many Requests with the JSON body
// {"error":"RATE_LIMITED"} and Retry-After: the whole seconds, rounded up
// and at least 1, until the same request would be admitted (for a fixed
// window, the window's end). A request whose quota could not be checked is
// handed to Config.OnError. Allowed and rejected responses carry the fields
// of Config.Headers.
//
// Handler's type is func(http.Handler) http.Handler, the middleware of
// net/http, chi (Use, With), and echo through echo.WrapMiddleware.
func (l *Limiter) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !l.routes.selectsURL(r.URL) {
			next.ServeHTTP(w, r)
			return
		}
		sc := l.scratch.Get().(*scratch)
		d, err := l.check(r, sc)
		sc.release(&l.scratch)
		if err != nil {
			l.metrics.countError()
			l.failed(err)
			l.onError(w, r, err)
			return
		}
		l.metrics.count(d.allowed)
		if l.failing.Load() && l.failing.CompareAndSwap(true, false) {
			l.log.Info("httplimit: quota checks succeed again", "prefix", l.prefix)
		}
		l.writeFields(w.Header(), &d)
		if !d.allowed {
			writeRejection(w, d.retryAfter)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// decision is the outcome of one check, with every delay measured by the
// store's clock.
type decision struct {
	q          *compiled
	allowed    bool
	remaining  int64
	retryAfter int64 // ms until the same request would be admitted; 0 if allowed
	resetIn    int64 // ms until the window is next empty
	resetAt    int64 // the Unix ms of that instant, by the store's clock
}

// check counts r against its quota.
func (l *Limiter) check(r *http.Request, sc *scratch) (decision, error) {
	q := l.static
	if q == nil && l.cpolicy != nil {
		var err error
		if q, err = l.cpolicy.compiledQuota(r); err != nil {
			return decision{}, fmt.Errorf("httplimit: %w", err)
		}
	} else if q == nil {
		quota, err := l.policy.Quota(r)
		if err != nil {
			return decision{}, fmt.Errorf("httplimit: policy: %w", err)
		}
		if q, err = l.compilePolicy(quota); err != nil {
			return decision{}, fmt.Errorf("httplimit: policy: %w", err)
		}
	}
	if l.resolver != nil {
		sc.key = l.resolver.AppendKey(sc.key[:0], r)
	} else {
		sc.key = append(sc.key[:0], l.key(r)...)
	}
	var buf [maxPartitionLen]byte
	partition := string(l.appendPartition(buf[:0], sc.key))
	// The batch is valid by construction, so the store is called directly
	// rather than through engine.Engine, which would validate it again on
	// every request: the commands were validated when the quota was
	// compiled, and the partition, a valid prefix, a colon and 32 hex
	// digits, is always a valid partition name (TestCompiledBatchesAreValid).
	sc.batch = engine.Batch{Partition: partition, Commands: q.cmds}
	err := l.store.Apply(r.Context(), &sc.batch, &sc.out)
	sc.batch = engine.Batch{} // hold no reference to the request's data while pooled
	if err != nil {
		return decision{}, err
	}
	out := &sc.out
	if len(out.Results) != len(q.cmds) {
		return decision{}, fmt.Errorf("%w: httplimit: %d results for %d commands", engine.ErrCorrupt, len(out.Results), len(q.cmds))
	}
	hit, ttl := &out.Results[0], &out.Results[1]
	d := decision{q: q, allowed: hit.Allowed, remaining: hit.Remaining, resetAt: hit.ResetAt}
	// The store reports delays, never its current time: the window's
	// remaining life is read in the same batch (kv.ttl), so the caller's
	// clock is never consulted.
	if ttl.Found {
		d.resetIn = ttl.TTLMs
	} else {
		d.resetIn = q.windowMs
	}
	if !d.allowed {
		d.retryAfter = hit.RetryAfterMs
		d.resetIn = hit.RetryAfterMs
	}
	return d, nil
}

// maxCompiled bounds the quotas of a Policy kept compiled. A policy
// returns a handful of distinct quotas (one per plan or tier); past the
// bound, further ones are compiled for each request.
const maxCompiled = 256

// compilePolicy returns q compiled, from the cache when it was seen before.
func (l *Limiter) compilePolicy(q Quota) (*compiled, error) {
	l.mu.RLock()
	c, ok := l.compiled[q]
	l.mu.RUnlock()
	if ok {
		return c, nil
	}
	c, err := compile(q)
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	if len(l.compiled) < maxCompiled {
		l.compiled[q] = c
	}
	l.mu.Unlock()
	return c, nil
}

// failed logs the first of a run of failed checks. A cancelled request is
// its client's doing, not a failure of the store.
func (l *Limiter) failed(err error) {
	if errors.Is(err, context.Canceled) {
		return
	}
	if !l.failing.Load() && l.failing.CompareAndSwap(false, true) {
		l.log.Warn("httplimit: quota checks failing; requests are refused until they succeed", "prefix", l.prefix, "err", err)
	}
}

// compiled is a validated quota with its commands and static fields built.
type compiled struct {
	quota    Quota
	windowMs int64
	cmds     []engine.Command // win.hit, then kv.ttl of the same window
	item     string           // the quota's name as a Structured Field Item
	policy   string           // the RateLimit-Policy field
	limit    string           // X-RateLimit-Limit
}

func compile(q Quota) (*compiled, error) {
	if err := q.Validate(); err != nil {
		return nil, err
	}
	q.Name, q.Kind = q.name(), q.kind()
	// The window key names the quota and its kind, so that a quota renamed
	// or moved to another algorithm starts afresh instead of meeting a
	// record of another kind.
	key := q.Name + ":" + q.Kind.String()
	win := engine.Window{Key: key, Kind: q.Kind, Limit: q.Limit, WindowMs: q.Window.Milliseconds()}
	c := &compiled{
		quota:    q,
		windowMs: win.WindowMs,
		cmds:     []engine.Command{engine.Hit(1, win), engine.TTL(key)},
		limit:    strconv.FormatInt(q.Limit, 10),
	}
	// Validated once here, as Engine.Apply would on every request; see
	// Limiter.check.
	step := engine.Step{Partition: "p", Commands: c.cmds}
	if err := step.Validate(); err != nil {
		return nil, fmt.Errorf("%w: quota %q: %w", ErrInvalidConfig, q.Name, err)
	}
	var err error
	if c.policy, err = policyField(q); err != nil {
		return nil, fmt.Errorf("%w: quota %q: %w", ErrInvalidConfig, q.Name, err)
	}
	if c.item, err = nameItem(q.Name); err != nil {
		return nil, fmt.Errorf("%w: quota %q: %w", ErrInvalidConfig, q.Name, err)
	}
	return c, nil
}

// Partitions are named by the prefix and a keyed hash of the client key:
//
//	prefix ":" hex(SipHash-2-4-128(k, key))
//	k = HMAC-SHA256(pepper, "sluice/httplimit/v2" 0 prefix)[:16]
//
// so a raw client address never reaches the store, equal keys under two
// prefixes are unrelated (their hashes have different keys), and no two
// prefixes share a partition (the hash has a fixed length and no colon).
// SipHash is a pseudorandom function keyed with 128 bits: without the
// pepper the names cannot be computed, nor tested against guesses, and
// 128 bits make a collision between two clients' quotas negligible. It
// costs a quarter of an HMAC-SHA256 of the same message, which made the
// keyed hash the largest part of a request from a client not seen recently
// (decision 0074); the slower HMAC runs once per stage, in New.
const hashPurpose = "sluice/httplimit/v2"

// hashKey derives the key of a stage's SipHash from its pepper and prefix.
func hashKey(pepper, prefix string) (k0, k1 uint64) {
	mac := hmac.New(sha256.New, []byte(pepper))
	mac.Write(append(append([]byte(hashPurpose), 0), prefix...))
	sum := mac.Sum(nil)
	return binary.LittleEndian.Uint64(sum[:8]), binary.LittleEndian.Uint64(sum[8:16])
}

// scratch is what one check needs besides the request: the client key,
// the batch handed to the store and the store's answer. A Limiter pools
// them, so that a check allocates only the partition's name. The batch
// lives here rather than on the stack because the store is called through
// an interface, which would move a local Batch to the heap on every
// request.
type scratch struct {
	key   []byte // the client key
	batch engine.Batch
	out   engine.StepResult
}

// appendPartition appends the partition name of the client key to dst.
func (l *Limiter) appendPartition(dst, key []byte) []byte {
	h0, h1 := siphash.Hash128(l.k0, l.k1, key)
	var sum [16]byte
	binary.LittleEndian.PutUint64(sum[:8], h0)
	binary.LittleEndian.PutUint64(sum[8:], h1)
	dst = append(dst, l.prefix...)
	dst = append(dst, ':')
	return hex.AppendEncode(dst, sum[:])
}

// maxPartitionLen is the longest partition name of a stage.
const maxPartitionLen = MaxPrefixLen + 1 + 2*16

// release returns sc to pool, unless a huge custom key grew its buffer:
// that one is left to the collector.
func (sc *scratch) release(pool *sync.Pool) {
	if cap(sc.key) <= maxPooledKey {
		pool.Put(sc)
	}
}

// maxPooledKey bounds the key buffer of a pooled scratch.
const maxPooledKey = 1024

// seconds rounds a delay in milliseconds up to whole seconds.
func seconds(ms int64) int64 {
	if ms <= 0 {
		return 0
	}
	return (ms + 999) / 1000
}
