package httplimit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/engine"
)

// Where Policies keeps its policies in a store. Every policy is one value
// in one partition, PolicyPartition, under PolicyKeyPrefix and its name;
// the names of all of them are kept in PolicyIndexShards values of the
// same partition, PolicyIndexPrefix and a shard number, so that List needs
// no scan. Every record is written with the longest TTL a store keeps
// (engine.MaxTTLMs, 120 days) and extended by the processes reading it.
//
// A program writing policies without this package (an operator command, a
// deploy step) writes the same records through the same kind of store:
// through the client package, which hashes partition and key names with
// the fleet's pepper, when the stages read a Sluice server.
const (
	// PolicyPartition is the partition of every stored policy. No stage
	// writes there: a stage's partitions end in a colon and 32 hex digits.
	PolicyPartition = "httplimit:policies"
	// PolicyKeyPrefix begins the key of each policy: "policy/login". Its
	// value is the policy's quota as JSON, for instance
	// {"limit":10,"windowMs":60000,"kind":"fixed"}, with an optional
	// "name" naming the quota in the RateLimit fields (the policy's own
	// name when absent). Unknown fields are ignored.
	PolicyKeyPrefix = "policy/"
	// PolicyIndexPrefix begins the keys of the index of names, "names/0"
	// to "names/7": each holds the names of its shard, sorted and
	// separated by newlines. A name belongs to shard fnv32a(name) mod
	// PolicyIndexShards.
	PolicyIndexPrefix = "names/"
	// PolicyIndexShards is the number of index values. Each holds at least
	// 31 names of the longest kind, so the index holds at least 248.
	PolicyIndexShards = 8
	// MaxPolicyNameLen is the longest policy name, in bytes.
	MaxPolicyNameLen = 64
	// DefaultRefresh is how long a stage enforces a policy it read before
	// reading it again.
	DefaultRefresh = 10 * time.Second
	// MinRefresh and MaxRefresh bound PoliciesConfig.Refresh.
	MinRefresh = 100 * time.Millisecond
	MaxRefresh = time.Hour
	// maxPolicyHandles bounds the policies one Policies caches.
	maxPolicyHandles = 1024
	// extendAfter is how long a process reading a policy leaves between
	// extensions of its records' lifetime.
	extendAfter = 24 * time.Hour
)

// ErrNoPolicy is wrapped by the errors of a policy that is not in the
// store.
var ErrNoPolicy = errors.New("httplimit: no such policy")

// PoliciesConfig configures a Policies.
type PoliciesConfig struct {
	// Store holds the policies: the store the stages' counters live in, or
	// any other. Every process of a fleet reads the same policies from
	// the same store: a Sluice server through the client package, Redis,
	// or the embedded store behind one server. Required.
	Store engine.Store

	// Refresh is how long a stage enforces a policy after reading it:
	// the first request after that reads it again, and a change made in
	// the store is enforced everywhere within Refresh (and one read).
	// MinRefresh … MaxRefresh; zero means DefaultRefresh.
	Refresh time.Duration

	// Clock measures Refresh. Nil means the system clock. It decides only
	// when a policy is read again; windows and delays are the store's.
	Clock engine.Clock

	// Logger receives a warning when a policy goes missing or cannot be
	// read, and a notice when it can be read again. Nil discards.
	Logger *slog.Logger
}

// DefaultPoliciesConfig returns a configuration refreshing every
// DefaultRefresh on the system clock. It does not validate until Store is
// set.
func DefaultPoliciesConfig() PoliciesConfig {
	return PoliciesConfig{Refresh: DefaultRefresh}
}

// Validate reports every problem of c, each wrapping ErrInvalidConfig, or
// nil.
func (c PoliciesConfig) Validate() error {
	var errs []error
	if c.Store == nil {
		errs = append(errs, fmt.Errorf("%w: Policies: no Store", ErrInvalidConfig))
	}
	if c.Refresh != 0 && (c.Refresh < MinRefresh || c.Refresh > MaxRefresh) {
		errs = append(errs, fmt.Errorf("%w: Policies: Refresh %v is outside %v…%v", ErrInvalidConfig, c.Refresh, MinRefresh, MaxRefresh))
	}
	return errors.Join(errs...)
}

// Policies is a set of named route quotas kept in a store, so that
// operators change limits without a deploy: Set writes one, and every
// stage enforcing it through Policy enforces the new quota within the
// refresh interval, in every process, with no restart.
//
//	pols, err := httplimit.NewPolicies(httplimit.PoliciesConfig{Store: store})
//	login, err := pols.Policy("login")
//	cfg.Policy = login // in the stage's Config
//	...
//	pols.Set(ctx, "login", httplimit.Quota{Limit: 5, Window: time.Minute}) // anywhere, any time
//
// A stage reads its policy through a small cache: once per Refresh, on the
// first request after the previous read expired, with one read in flight
// per policy while the requests arriving meanwhile wait for it. No timer
// runs and nothing is read while no request comes.
//
// A missing policy, or one that cannot be read (the store failed, the
// stored value is not a valid quota), never lets the protected route run:
// the stage hands the request to its Config.OnError (503 by default),
// unless the policy was given a fallback quota (WithFallback). A missing or
// invalid value is remembered for Refresh like any answer; a store failure
// is not, and the next request reads again.
//
// Set and Delete are setup calls: make them from one place (an operator
// command, a deploy step), because two processes changing policies at the
// same moment may lose a name from List (never a policy itself).
//
// A Policies holds no goroutine and no timer, and is safe for concurrent
// use. Create one per store and share it between stages.
type Policies struct {
	eng     *engine.Engine
	clock   engine.Clock
	refresh time.Duration
	log     *slog.Logger

	setMu sync.Mutex // serialises the index updates of Set and Delete

	mu      sync.Mutex
	handles map[string]*policyEntry
}

// NewPolicies returns the policies kept in cfg.Store. It does no I/O.
func NewPolicies(cfg PoliciesConfig) (*Policies, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p := &Policies{
		eng:     engine.New(cfg.Store),
		clock:   cfg.Clock,
		refresh: cfg.Refresh,
		log:     cfg.Logger,
		handles: make(map[string]*policyEntry),
	}
	if p.clock == nil {
		p.clock = engine.SystemClock{}
	}
	if p.refresh == 0 {
		p.refresh = DefaultRefresh
	}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	return p, nil
}

// checkPolicyName reports whether name can name a policy: 1 to
// MaxPolicyNameLen letters, digits, '.', '_' or '-', other than "." and
// "..", which a URL path cannot carry as a segment, so that every policy is
// one the server's /v1/policies/{name} reaches.
func checkPolicyName(name string) error {
	if len(name) == 0 || len(name) > MaxPolicyNameLen {
		return fmt.Errorf("%w: policy name of %d bytes (want 1…%d)", ErrInvalidConfig, len(name), MaxPolicyNameLen)
	}
	if name == "." || name == ".." {
		return fmt.Errorf("%w: policy name %q is a path segment of its own", ErrInvalidConfig, name)
	}
	for i := 0; i < len(name); i++ {
		switch c := name[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '.', c == '_', c == '-':
		default:
			return fmt.Errorf("%w: policy name %q: byte %d is not a letter, digit, '.', '_' or '-'", ErrInvalidConfig, name, i)
		}
	}
	return nil
}

// apply runs cmds on the policies' partition. A store answering with
// fewer or more results than commands, and no error, is corrupt: its
// answer is never read, as a stage never reads such an answer to its own
// check.
func (p *Policies) apply(ctx context.Context, partition string, out *engine.StepResult, cmds ...engine.Command) error {
	if err := p.eng.Apply(ctx, partition, out, cmds...); err != nil {
		return err
	}
	if len(out.Results) != len(cmds) {
		return fmt.Errorf("%w: httplimit: %d results for %d commands", engine.ErrCorrupt, len(out.Results), len(cmds))
	}
	return nil
}

func policyKey(name string) string { return PolicyKeyPrefix + name }

// indexKey returns the key of the index shard holding name.
func indexKey(name string) string {
	h := fnv.New32a()
	h.Write([]byte(name))
	return indexShardKey(int(h.Sum32() % PolicyIndexShards))
}

func indexShardKey(i int) string { return PolicyIndexPrefix + strconv.Itoa(i) }

// storedQuota is a policy's value in the store.
type storedQuota struct {
	Name     string    `json:"name,omitempty"`
	Limit    int64     `json:"limit"`
	WindowMs int64     `json:"windowMs"`
	Kind     algo.Kind `json:"kind"`
}

// withName returns q named name when q has no name of its own.
func withName(q Quota, name string) Quota {
	if q.Name == "" {
		q.Name = name
	}
	return q
}

func encodePolicy(name string, q Quota) (string, error) {
	s := storedQuota{Limit: q.Limit, WindowMs: q.Window.Milliseconds(), Kind: q.kind()}
	if q.Name != name {
		s.Name = q.Name
	}
	b, err := json.Marshal(s)
	if err != nil {
		return "", fmt.Errorf("%w: policy %q: %w", ErrInvalidConfig, name, err)
	}
	return string(b), nil
}

// decodePolicy decodes and validates the stored value of the policy name.
func decodePolicy(name, v string) (Quota, error) {
	var s storedQuota
	if err := json.Unmarshal([]byte(v), &s); err != nil {
		return Quota{}, fmt.Errorf("%w: policy %q: stored value: %w", engine.ErrCorrupt, name, err)
	}
	// Checked before the conversion, which would wrap a longer window
	// around into a valid one.
	if s.WindowMs < 1 || s.WindowMs > algo.MaxWindow {
		return Quota{}, fmt.Errorf("%w: policy %q: stored value: windowMs %d outside 1…%d", engine.ErrCorrupt, name, s.WindowMs, algo.MaxWindow)
	}
	q := withName(Quota{Name: s.Name, Limit: s.Limit, Window: time.Duration(s.WindowMs) * time.Millisecond, Kind: s.Kind}, name)
	if err := q.Validate(); err != nil {
		return Quota{}, fmt.Errorf("%w: policy %q: stored value: %w", engine.ErrCorrupt, name, err)
	}
	return q, nil
}

func noPolicy(name string) error { return fmt.Errorf("policy %q: %w", name, ErrNoPolicy) }

// Set stores q as the policy name, creating or replacing it. A quota with
// no Name is named after the policy. Replacing a policy keeps the counts
// of its clients where the quota's name, kind and window are unchanged (a
// new limit applies to the requests already counted); renaming the quota
// or changing its kind starts them afresh. A new window keeps them only as
// far as the kind's state allows (see Policy): a fixed or sliding window
// whose bucket no longer begins where it did counts afresh, so that in the
// window of the change a client may make up to the new limit on top of
// what it made under the old one.
//
// This process enforces the new quota from its next request on; others
// within their refresh interval.
func (p *Policies) Set(ctx context.Context, name string, q Quota) error {
	if err := checkPolicyName(name); err != nil {
		return err
	}
	q = withName(q, name)
	c, err := compile(q)
	if err != nil {
		return fmt.Errorf("policy %q: %w", name, err)
	}
	v, err := encodePolicy(name, c.quota)
	if err != nil {
		return err
	}
	p.setMu.Lock()
	defer p.setMu.Unlock()
	index, err := p.index(ctx, name, func(names []string) []string {
		if slices.Contains(names, name) {
			return names
		}
		names = append(names, name)
		slices.Sort(names)
		return names
	})
	if err != nil {
		return err
	}
	// The policy and its index entry are written in one atomic batch.
	var out engine.StepResult
	if err := p.apply(ctx, PolicyPartition, &out,
		engine.Set(policyKey(name), v, engine.MaxTTLMs),
		index,
	); err != nil {
		return fmt.Errorf("policy %q: %w", name, err)
	}
	p.learned(name, &policyState{c: c, expires: p.clock.Now().Add(p.refresh)})
	return nil
}

// index reads the index shard of name and returns the command writing it
// back as edit changes its names.
func (p *Policies) index(ctx context.Context, name string, edit func([]string) []string) (engine.Command, error) {
	key := indexKey(name)
	var out engine.StepResult
	if err := p.apply(ctx, PolicyPartition, &out, engine.Get(key)); err != nil {
		return engine.Command{}, fmt.Errorf("policy %q: reading the index: %w", name, err)
	}
	names := edit(splitNames(out.Results[0].Value))
	if len(names) == 0 {
		return engine.Del(key), nil
	}
	v := strings.Join(names, "\n")
	if len(v) > engine.MaxValueBytes {
		return engine.Command{}, fmt.Errorf("%w: policy %q: its share of the index is full (%d names)", engine.ErrCapacity, name, len(names)-1)
	}
	return engine.Set(key, v, engine.MaxTTLMs), nil
}

func splitNames(v string) []string {
	if v == "" {
		return nil
	}
	return strings.Split(v, "\n")
}

// Get reads the policy name from the store, bypassing the cache. It fails
// with ErrNoPolicy if there is none.
func (p *Policies) Get(ctx context.Context, name string) (Quota, error) {
	if err := checkPolicyName(name); err != nil {
		return Quota{}, err
	}
	var out engine.StepResult
	if err := p.apply(ctx, PolicyPartition, &out, engine.Get(policyKey(name))); err != nil {
		return Quota{}, fmt.Errorf("policy %q: %w", name, err)
	}
	if !out.Results[0].Found {
		return Quota{}, noPolicy(name)
	}
	return decodePolicy(name, out.Results[0].Value)
}

// Delete removes the policy name. Stages enforcing it refuse their
// requests (or count them against their fallback) from their next read of
// it on. Deleting a policy that does not exist is not an error.
func (p *Policies) Delete(ctx context.Context, name string) error {
	if err := checkPolicyName(name); err != nil {
		return err
	}
	p.setMu.Lock()
	defer p.setMu.Unlock()
	index, err := p.index(ctx, name, func(names []string) []string {
		return slices.DeleteFunc(names, func(n string) bool { return n == name })
	})
	if err != nil {
		return err
	}
	var out engine.StepResult
	if err := p.apply(ctx, PolicyPartition, &out, engine.Del(policyKey(name)), index); err != nil {
		return fmt.Errorf("policy %q: %w", name, err)
	}
	p.learned(name, &policyState{err: noPolicy(name), expires: p.clock.Now().Add(p.refresh)})
	return nil
}

// List returns the names of every stored policy, sorted.
func (p *Policies) List(ctx context.Context) ([]string, error) {
	cmds := make([]engine.Command, PolicyIndexShards)
	for i := range cmds {
		cmds[i] = engine.Get(indexShardKey(i))
	}
	var out engine.StepResult
	if err := p.apply(ctx, PolicyPartition, &out, cmds...); err != nil {
		return nil, fmt.Errorf("listing policies: %w", err)
	}
	var names []string
	for _, r := range out.Results {
		names = append(names, splitNames(r.Value)...)
	}
	slices.Sort(names)
	return slices.Compact(names), nil
}

// PolicyOption adjusts the Policy returned by Policies.Policy.
type PolicyOption func(*storedPolicy) error

// WithFallback makes q the quota of every request while the policy is
// missing or cannot be read, instead of refusing them. A fallback with no
// Name is named after the policy, so that it counts against the same
// counters as the stored quota when their kinds agree.
//
// A fallback trades safety for availability: the route stays open at the
// fallback's rate while the policy is absent. Choose it deliberately; each
// switch to the fallback and back is logged.
func WithFallback(q Quota) PolicyOption {
	return func(s *storedPolicy) error {
		c, err := compile(withName(q, s.e.name))
		if err != nil {
			return fmt.Errorf("fallback of policy %q: %w", s.e.name, err)
		}
		s.fallback = c
		return nil
	}
}

// Policy returns the Policy enforcing the stored policy name, for
// Config.Policy. Every request gets the quota last read from the store,
// read again once per refresh interval; see Policies for what happens
// when it is missing or cannot be read. Policies of one name share their
// cache.
//
// Policy does no I/O: the policy is first read by the first request. It
// fails on an invalid name or fallback, or when the Policies already
// caches 1,024 names.
func (p *Policies) Policy(name string, opts ...PolicyOption) (Policy, error) {
	if err := checkPolicyName(name); err != nil {
		return nil, err
	}
	p.mu.Lock()
	e, ok := p.handles[name]
	if !ok {
		if len(p.handles) >= maxPolicyHandles {
			p.mu.Unlock()
			return nil, fmt.Errorf("%w: policy %q: %d policies cached already", ErrInvalidConfig, name, maxPolicyHandles)
		}
		e = &policyEntry{name: name}
		p.handles[name] = e
	}
	p.mu.Unlock()
	s := &storedPolicy{p: p, e: e}
	for _, o := range opts {
		if err := o(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// policyEntry is the cache of one policy.
type policyEntry struct {
	name  string
	state atomic.Pointer[policyState] // the last answer; nil before the first

	mu     sync.Mutex
	flight *policyRead // the read in flight, or nil
	// written counts the answers this process wrote itself (Set, Delete),
	// so that a read begun before one does not replace it.
	written uint64
	broken  bool // the last answer was an error (for logging transitions)
	// extendedAt is when this process last extended the lifetime of the
	// policy's records.
	extendedAt time.Time
}

// policyState is one answer of the store about a policy, immutable once
// published.
type policyState struct {
	c       *compiled // the quota, or nil with err
	err     error
	expires time.Time // by the Policies' clock: read again from then on
}

// policyRead is one read in flight; the requests waiting for it take its
// answer.
type policyRead struct {
	done chan struct{}
	st   *policyState // nil if the reading request's context ended first
}

// current returns the quota of e, reading it if the cached answer expired.
func (p *Policies) current(ctx context.Context, e *policyEntry) (*compiled, error) {
	for {
		now := p.clock.Now()
		if st := e.state.Load(); st != nil && now.Before(st.expires) {
			return st.c, st.err
		}
		e.mu.Lock()
		if st := e.state.Load(); st != nil && now.Before(st.expires) {
			e.mu.Unlock()
			return st.c, st.err // read by another request meanwhile
		}
		if f := e.flight; f != nil {
			e.mu.Unlock()
			select {
			case <-f.done:
				if f.st != nil {
					return f.st.c, f.st.err
				}
				continue // its reader went away: read again
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		f := &policyRead{done: make(chan struct{})}
		e.flight = f
		written := e.written
		e.mu.Unlock()

		p.readFlight(ctx, e, f, now, written)
		if f.st == nil {
			return nil, ctx.Err()
		}
		return f.st.c, f.st.err
	}
}

// readFlight makes the read f of e's policy at now and publishes its
// answer. The read ends whatever happens to it: if it panics (a faulty
// store), f is left without an answer, like the read of a request whose
// context ended, so that the requests waiting for it read again instead
// of waiting for ever.
func (p *Policies) readFlight(ctx context.Context, e *policyEntry, f *policyRead, now time.Time, written uint64) {
	defer func() {
		e.mu.Lock()
		switch {
		case f.st != nil && e.written != written:
			f.st = e.state.Load() // this process wrote the policy meanwhile
		case f.st != nil:
			e.state.Store(f.st)
			p.logTransition(e, f.st.err)
		}
		e.flight = nil
		e.mu.Unlock()
		close(f.done)
	}()
	f.st = p.read(ctx, e, now)
}

// read reads the policy of e from the store at now. It returns nil if ctx
// ended, so that the requests waiting for the read do not take the reading
// request's cancellation for their own.
func (p *Policies) read(ctx context.Context, e *policyEntry, now time.Time) *policyState {
	key := policyKey(e.name)
	var out engine.StepResult
	err := p.apply(ctx, PolicyPartition, &out, engine.Get(key), engine.TTL(key))
	switch {
	case err != nil && ctx.Err() != nil:
		return nil
	case err != nil:
		// Not remembered: the next request reads again.
		return &policyState{err: fmt.Errorf("policy %q: %w", e.name, err), expires: now}
	case !out.Results[0].Found:
		return &policyState{err: noPolicy(e.name), expires: now.Add(p.refresh)}
	}
	st := &policyState{expires: now.Add(p.refresh)}
	q, err := decodePolicy(e.name, out.Results[0].Value)
	if err == nil {
		st.c, err = compile(q)
	}
	if err != nil {
		st.err = err
		return st
	}
	p.extend(ctx, e, out.Results[1].TTLMs, now)
	return st
}

// extend renews the lifetime of the records of e's policy, which like
// every record expire after at most 120 days unless written again, once a
// day at most, when ttlMs (the policy's remaining lifetime) shows that a
// day has passed since it was written. A failure is left for the next
// read to retry.
func (p *Policies) extend(ctx context.Context, e *policyEntry, ttlMs int64, now time.Time) {
	if ttlMs > engine.MaxTTLMs-extendAfter.Milliseconds() {
		return
	}
	e.mu.Lock()
	due := e.extendedAt.IsZero() || now.Sub(e.extendedAt) >= extendAfter
	if due {
		e.extendedAt = now
	}
	e.mu.Unlock()
	if !due {
		return
	}
	// The renewal serves every request, not only the one that found it
	// due: it runs to its end whatever becomes of that request.
	var out engine.StepResult
	if err := p.apply(context.WithoutCancel(ctx), PolicyPartition, &out,
		engine.Expire(policyKey(e.name), engine.MaxTTLMs),
		engine.Expire(indexKey(e.name), engine.MaxTTLMs),
	); err != nil {
		e.mu.Lock()
		e.extendedAt = time.Time{}
		e.mu.Unlock()
		p.log.Warn("httplimit: could not extend the lifetime of a stored policy", "policy", e.name, "err", err)
	}
}

// learned records an answer this process wrote itself, if it caches name.
func (p *Policies) learned(name string, st *policyState) {
	p.mu.Lock()
	e := p.handles[name]
	p.mu.Unlock()
	if e == nil {
		return
	}
	e.mu.Lock()
	e.written++
	e.state.Store(st)
	p.logTransition(e, st.err)
	e.mu.Unlock()
}

// logTransition logs a policy becoming unusable or usable again. e.mu must
// be held.
func (p *Policies) logTransition(e *policyEntry, err error) {
	switch {
	case err != nil && !e.broken:
		e.broken = true
		p.log.Warn("httplimit: policy unusable; its stages refuse requests or use their fallback until it can be read", "policy", e.name, "err", err)
	case err == nil && e.broken:
		e.broken = false
		p.log.Info("httplimit: policy usable again", "policy", e.name)
	}
}

// storedPolicy is the Policy of one stored policy.
type storedPolicy struct {
	p        *Policies
	e        *policyEntry
	fallback *compiled // nil: refuse
}

// Quota returns the stored quota in force, or the fallback.
func (s *storedPolicy) Quota(r *http.Request) (Quota, error) {
	c, err := s.compiledQuota(r)
	if err != nil {
		return Quota{}, err
	}
	return c.quota, nil
}

// compiledQuota is Quota without the copy, for the Limiter.
func (s *storedPolicy) compiledQuota(r *http.Request) (*compiled, error) {
	ctx := r.Context()
	c, err := s.p.current(ctx, s.e)
	if err != nil && s.fallback != nil && ctx.Err() == nil {
		return s.fallback, nil
	}
	return c, err
}

// compiledPolicy is implemented by the policies of this package, which
// keep their quotas compiled: the Limiter uses them as they are instead of
// compiling each request's quota.
type compiledPolicy interface {
	compiledQuota(r *http.Request) (*compiled, error)
}
