package pace

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/engine"
)

// MaxNameLen is the longest limiter name, in bytes.
const MaxNameLen = 64

// Where a limiter lives in the store. Every limiter is one partition, so
// that its configuration, pacing log, gate and waiters change together in
// atomic batches; the names of all limiters are kept in a partition of
// their own, spread over indexShards values so that a registry holds at
// least indexShards·⌊2 KiB / (MaxNameLen+1)⌋ = 248 names.
const (
	partitionPrefix   = "pace/"
	registryPartition = "pace:registry"
	indexShards       = 8

	keyConfig  = "config"  // the stored configuration (a value)
	keyLog     = "log"     // the pacing log
	keyGate    = "gate"    // the concurrency gate: one lease per call in flight
	keyWaiting = "waiting" // a gate used as a register of calls waiting for their slot
	keyPenalty = "penalty" // a pacing log used as a register of the penalty deadline
)

// Tuning of the in-process bookkeeping.
const (
	// maxStates bounds the names this process keeps a cached configuration
	// and wake-up channels for; further names work without them.
	maxStates = 1024
	// refreshEvery is how often a process using a limiter extends the
	// lifetime of its stored configuration, which, like every record,
	// expires after at most 120 days unless written again.
	refreshEvery = 24 * time.Hour
	// probeLease names the lease Stats briefly takes to count a gate's
	// leases. Call leases are 32 hex digits, so it never meets one.
	probeLease = "stats-probe"
)

// penaltyPace returns the pacing log kept beside each limiter's own to
// record its penalty deadline, which the engine offers no way to read: it is
// penalised with the limiter's log, takes the maximum of deadlines in the
// same way, holds no grant (a refill of the whole limit leaves no hold at
// the deadline) and so expires exactly at the deadline, which kv.ttl reads
// back.
func penaltyPace() engine.Pace {
	whole := int64(1000)
	return engine.Pace{Key: keyPenalty, Limit: 1, WindowMs: 1, RefillPermille: &whole}
}

// probeAt is the slot Stats and every call "claim" to read the store's
// clock: claiming a slot that has not come is read-only and answers the wait
// until it, so the store's now is probeAt − RetryAfterMs. It is 2^52 ms
// (about the year 144,000), the latest slot every store claims: the Redis
// store computes instants exactly only up to there.
const probeAt = int64(1) << 52

// Registry is the set of limiters kept in one store: it configures them,
// reports on them, and is what a Limiter binds to. Every process sharing the
// store sees the same limiters; the configuration is stored with each
// limiter's state, so it survives restarts of the store (a durable one) and
// of every process.
//
// There is no default configuration: a limiter exists once configured, and
// a call through a name that was never configured fails at once with
// ErrNoSuchLimiter. Configure and Reconfigure are setup calls, not
// per-request ones; every process may call, Stats and List, but configure
// from one place (a deploy step, the server, an operator's command), because
// concurrent configurations from several processes may lose a name in List.
//
// A Registry holds no goroutine and no timer; it is safe for concurrent use
// and cheap to create. Create one per store and share it.
type Registry struct {
	eng *engine.Engine
	log *slog.Logger

	cfgMu sync.Mutex // serialises configurations from this process

	mu     sync.Mutex
	states map[string]*nameState

	metricsReg prometheus.Registerer // WithRegisterer's, until NewRegistry registers
	metrics    *paceMetrics          // nil without WithRegisterer
}

// nameState is what this process keeps about one limiter: its last seen
// configuration, and the channels that wake its waiting calls.
type nameState struct {
	cfg       stored
	known     bool
	refreshed time.Time
	served    int64         // the gate queue's served counter, as last seen
	servedAt  time.Time     // when
	changed   chan struct{} // closed when this process configures the name
	freed     chan struct{} // closed when a call here releases a lease or serves a ticket
}

// RegistryOption adjusts a Registry.
type RegistryOption func(*Registry)

// WithLogger sets the logger receiving warnings about lost and unreleased
// leases and unrecorded penalties. The default discards them.
func WithLogger(l *slog.Logger) RegistryOption {
	return func(r *Registry) {
		if l != nil {
			r.log = l
		}
	}
}

// NewRegistry returns the registry of the limiters kept in store: an
// in-process store (memstore, diskstore) or a Sluice server reached through
// the client package. It does no I/O.
func NewRegistry(store engine.Store, opts ...RegistryOption) *Registry {
	r := &Registry{
		eng:    engine.New(store),
		log:    slog.New(slog.NewTextHandler(io.Discard, nil)),
		states: make(map[string]*nameState),
	}
	for _, o := range opts {
		o(r)
	}
	if r.metricsReg != nil {
		m, err := newPaceMetrics(r.metricsReg)
		if err != nil {
			r.log.Warn("pace: metrics not registered; the registry counts nothing", "err", err)
		}
		r.metrics, r.metricsReg = m, nil
	}
	return r
}

// checkName reports whether name can name a limiter: 1 to MaxNameLen
// letters, digits, '.', '_' or '-', other than "." and "..", which a URL
// path cannot carry as a segment, so that every limiter is one the
// server's /v1/limiters/{name} reaches.
func checkName(name string) error {
	if len(name) == 0 || len(name) > MaxNameLen {
		return fmt.Errorf("%w: limiter name of %d bytes (want 1…%d)", ErrInvalidConfig, len(name), MaxNameLen)
	}
	if name == "." || name == ".." {
		return fmt.Errorf("%w: limiter name %q is a path segment of its own", ErrInvalidConfig, name)
	}
	for i := 0; i < len(name); i++ {
		switch c := name[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '.', c == '_', c == '-':
		default:
			return fmt.Errorf("%w: limiter name %q: byte %d is not a letter, digit, '.', '_' or '-'", ErrInvalidConfig, name, i)
		}
	}
	return nil
}

func partition(name string) string { return partitionPrefix + name }

func shardKey(name string) string {
	h := fnv.New32a()
	h.Write([]byte(name))
	return fmt.Sprintf("names/%d", h.Sum32()%indexShards)
}

// Configure creates the limiter name, or replaces its configuration, with
// the complete configuration cfg. The name is registered first, then the
// configuration written; if the write fails the registration is undone.
//
// Configuring rejects every call currently waiting on the limiter with
// ErrReconfigured: its wait was measured against limits that no longer
// exist. Calls bound to r are rejected at once, others when they next reach
// the store (at the latest when their slot comes). The log
// of grants is kept, so a configuration never hands out a fresh allowance:
// grants made under the old limits keep counting under the new ones.
func (r *Registry) Configure(ctx context.Context, name string, cfg Config) error {
	if err := checkName(name); err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("limiter %q: %w", name, err)
	}
	s, err := cfg.store().encode()
	if err != nil {
		return err
	}
	r.cfgMu.Lock()
	defer r.cfgMu.Unlock()
	added, err := r.register(ctx, name)
	if err != nil {
		return err
	}
	var out engine.StepResult
	if err := r.eng.Apply(ctx, partition(name), &out, engine.Set(keyConfig, s.raw, engine.MaxTTLMs)); err != nil {
		if added {
			if uerr := r.unregister(context.WithoutCancel(ctx), name); uerr != nil {
				r.log.Warn("pace: could not undo the registration of an unconfigured limiter", "limiter", name, "err", uerr)
				return errors.Join(err, uerr)
			}
		}
		return fmt.Errorf("limiter %q: writing its configuration: %w", name, err)
	}
	r.configured(name, s)
	return nil
}

// Reconfigure changes the configuration of the existing limiter name:
// patch receives the current configuration and edits it in place, and the
// result must validate. It fails with ErrNoSuchLimiter if the limiter does
// not exist, and rejects waiting calls as Configure does. It returns the new
// configuration.
//
//	reg.Reconfigure(ctx, "billing-api", func(c *pace.Config) { c.Concurrency = 10 })
func (r *Registry) Reconfigure(ctx context.Context, name string, patch func(*Config)) (Config, error) {
	if err := checkName(name); err != nil {
		return Config{}, err
	}
	r.cfgMu.Lock()
	defer r.cfgMu.Unlock()
	cur, err := r.readConfig(ctx, name)
	if err != nil {
		return Config{}, err
	}
	c := cur.config()
	patch(&c)
	if err := c.Validate(); err != nil {
		return Config{}, fmt.Errorf("limiter %q: %w", name, err)
	}
	s, err := c.store().encode()
	if err != nil {
		return Config{}, err
	}
	if _, err := r.register(ctx, name); err != nil { // refreshes the entry
		return Config{}, err
	}
	var out engine.StepResult
	if err := r.eng.Apply(ctx, partition(name), &out, engine.SetIf(keyConfig, s.raw, engine.MaxTTLMs, engine.SetXX)); err != nil {
		return Config{}, fmt.Errorf("limiter %q: writing its configuration: %w", name, err)
	}
	if !out.Results[0].Allowed {
		return Config{}, noSuchLimiter(name) // removed meanwhile
	}
	r.configured(name, s)
	return c, nil
}

// Stats is the state of one limiter at one instant of the store's clock.
type Stats struct {
	// Name names the limiter.
	Name string
	// Config is its configuration.
	Config Config
	// At is the store's clock when the state was read.
	At time.Time
	// Remaining is how many calls could start now: the limit less the
	// grants in the window at At, slots reserved for waiting calls and the
	// spend a penalty holds back included; 0 while a penalty is in force.
	// Never negative.
	Remaining int
	// ResetAt is when the log will hold no grant: At, if it holds none.
	ResetAt time.Time
	// PenaltyUntil is the deadline of the upstream rate limit in force, or
	// the zero time when none is.
	PenaltyUntil time.Time
	// InFlight is the number of concurrency leases held: calls running fn,
	// and calls holding their lease while their slot comes. Always 0
	// without a concurrency cap.
	InFlight int
	// Waiting is the number of calls waiting for a lease — the tickets in
	// the gate's queue, including those of callers gone but not yet
	// skipped — and for their slot (up to MaxConcurrency of these are
	// counted).
	Waiting int
}

// Stats reads the state of the limiter name. It fails with ErrNoSuchLimiter
// if the limiter does not exist.
func (r *Registry) Stats(ctx context.Context, name string) (Stats, error) {
	if err := checkName(name); err != nil {
		return Stats{}, err
	}
	s, err := r.readConfig(ctx, name)
	if err != nil {
		return Stats{}, err
	}
	// The engine has no read-only gate command: acquiring and releasing a
	// probe lease in one atomic batch counts the live leases and leaves the
	// gate as it was (less its expired leases).
	var out engine.StepResult
	err = r.eng.Apply(ctx, partition(name), &out,
		s.pace(keyLog).Claim(probeAt, 1, 0),
		engine.TTL(keyPenalty),
		engine.Acquire(keyGate, probeLease, algo.MaxGateLimit, engine.MinTTLMs),
		engine.Release(keyGate, probeLease),
		engine.Acquire(keyWaiting, probeLease, algo.MaxGateLimit, engine.MinTTLMs),
		engine.Release(keyWaiting, probeLease),
		engine.Get(keyTail),
		engine.Get(keyServed),
	)
	if err != nil {
		return Stats{}, fmt.Errorf("limiter %q: %w", name, err)
	}
	res := out.Results
	now := probeAt - res[0].RetryAfterMs
	st := Stats{
		Name:      name,
		Config:    s.config(),
		At:        time.UnixMilli(now),
		Remaining: int(res[0].Remaining),
		ResetAt:   time.UnixMilli(max(now, res[0].ResetAt)),
		InFlight:  liveLeases(res[2]),
		Waiting:   liveLeases(res[4]) + int(max(0, counterValue(res[6])-counterValue(res[7]))),
	}
	if res[1].Found && res[1].TTLMs > 0 {
		st.PenaltyUntil = time.UnixMilli(now + res[1].TTLMs)
		st.Remaining = 0 // nothing starts before the deadline
	}
	return st, nil
}

// liveLeases returns the live leases of a gate, from the acquire of a probe
// lease under the largest limit.
func liveLeases(acquire engine.Result) int {
	if !acquire.Allowed {
		return algo.MaxGateLimit
	}
	return algo.MaxGateLimit - int(acquire.Remaining) - 1
}

// List returns the names of every configured limiter, sorted. A limiter
// unused for 120 days expires with its records; its name may stay listed
// until a new name needs its room in the index, so a name listed may
// answer ErrNoSuchLimiter.
func (r *Registry) List(ctx context.Context) ([]string, error) {
	cmds := make([]engine.Command, indexShards)
	for i := range cmds {
		cmds[i] = engine.Get(fmt.Sprintf("names/%d", i))
	}
	var out engine.StepResult
	if err := r.eng.Apply(ctx, registryPartition, &out, cmds...); err != nil {
		return nil, fmt.Errorf("listing limiters: %w", err)
	}
	var names []string
	for _, res := range out.Results {
		names = append(names, splitNames(res.Value)...)
	}
	slices.Sort(names)
	return slices.Compact(names), nil
}

func splitNames(v string) []string {
	if v == "" {
		return nil
	}
	return strings.Split(v, "\n")
}

// register adds name to the index, or extends the life of its entry. It
// reports whether the name was added.
func (r *Registry) register(ctx context.Context, name string) (bool, error) {
	key := shardKey(name)
	var out engine.StepResult
	if err := r.eng.Apply(ctx, registryPartition, &out, engine.Get(key)); err != nil {
		return false, fmt.Errorf("limiter %q: registering: %w", name, err)
	}
	names := splitNames(out.Results[0].Value)
	if slices.Contains(names, name) {
		if err := r.eng.Apply(ctx, registryPartition, &out, engine.Expire(key, engine.MaxTTLMs)); err != nil {
			return false, fmt.Errorf("limiter %q: registering: %w", name, err)
		}
		return false, nil
	}
	v := joinNames(append(names, name))
	if len(v) > engine.MaxValueBytes {
		// Make room: drop the names of limiters whose records expired.
		live, err := r.configuredOnly(ctx, names)
		if err != nil {
			return false, fmt.Errorf("limiter %q: registering: %w", name, err)
		}
		if v = joinNames(append(live, name)); len(v) > engine.MaxValueBytes {
			return false, fmt.Errorf("%w: limiter %q: the registry's share for this name is full (%d names)", engine.ErrCapacity, name, len(live))
		}
	}
	if err := r.eng.Apply(ctx, registryPartition, &out, engine.Set(key, v, engine.MaxTTLMs)); err != nil {
		return false, fmt.Errorf("limiter %q: registering: %w", name, err)
	}
	return true, nil
}

// joinNames returns the value of a share of the index holding names.
func joinNames(names []string) string {
	slices.Sort(names)
	return strings.Join(names, "\n")
}

// configuredOnly returns the names whose limiter still has a
// configuration: a limiter unused for 120 days expires with its records,
// but its name stays in the index as long as other names keep their share
// alive.
func (r *Registry) configuredOnly(ctx context.Context, names []string) ([]string, error) {
	var live []string
	var out engine.StepResult
	for _, n := range names {
		if err := r.eng.Apply(ctx, partition(n), &out, engine.Get(keyConfig)); err != nil {
			return nil, err
		}
		if out.Results[0].Found {
			live = append(live, n)
		}
	}
	return live, nil
}

// unregister removes name from the index.
func (r *Registry) unregister(ctx context.Context, name string) error {
	key := shardKey(name)
	var out engine.StepResult
	if err := r.eng.Apply(ctx, registryPartition, &out, engine.Get(key)); err != nil {
		return err
	}
	names := slices.DeleteFunc(splitNames(out.Results[0].Value), func(n string) bool { return n == name })
	cmd := engine.Set(key, strings.Join(names, "\n"), engine.MaxTTLMs)
	if len(names) == 0 {
		cmd = engine.Del(key)
	}
	return r.eng.Apply(ctx, registryPartition, &out, cmd)
}

// readConfig reads the configuration of name from the store.
func (r *Registry) readConfig(ctx context.Context, name string) (stored, error) {
	var out engine.StepResult
	if err := r.eng.Apply(ctx, partition(name), &out, engine.Get(keyConfig)); err != nil {
		return stored{}, fmt.Errorf("limiter %q: %w", name, err)
	}
	if !out.Results[0].Found {
		return stored{}, noSuchLimiter(name)
	}
	s, err := decodeStored(name, out.Results[0].Value)
	if err != nil {
		return stored{}, err
	}
	r.remember(name, s)
	return s, nil
}

// state returns the in-process state of name, creating it if there is room;
// with none it returns a fresh state that nothing else shares. r.mu must be
// held.
func (r *Registry) state(name string) *nameState {
	if st, ok := r.states[name]; ok {
		return st
	}
	st := &nameState{changed: make(chan struct{}), freed: make(chan struct{})}
	if len(r.states) < maxStates {
		r.states[name] = st
	}
	return st
}

// cached returns the configuration of name last seen by this process.
func (r *Registry) cached(name string) (stored, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.state(name)
	return st.cfg, st.known
}

// remember records s as the configuration of name last seen.
func (r *Registry) remember(name string, s stored) {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.state(name)
	st.cfg, st.known = s, true
}

// configured records a configuration made by this process and wakes the
// calls waiting here under the previous one.
func (r *Registry) configured(name string, s stored) {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.state(name)
	st.cfg, st.known = s, true
	close(st.changed)
	st.changed = make(chan struct{})
}

// watch returns the channels closed when name is configured by this process
// and when a call here releases one of its leases.
func (r *Registry) watch(name string) (changed, freed <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.state(name)
	return st.changed, st.freed
}

// freed wakes the calls of name waiting here for a lease or their turn.
func (r *Registry) freed(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.state(name)
	close(st.freed)
	st.freed = make(chan struct{})
}

// served returns the gate queue's served counter of name as this process
// last saw it, or 0 if it has not seen it for refreshEvery: a guess for the
// queue's fast path that is never above the counter (see keepQueue).
func (r *Registry) served(name string) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.state(name)
	if time.Since(st.servedAt) >= refreshEvery {
		return 0
	}
	return st.served
}

// sawServed records the gate queue's served counter of name as read.
func (r *Registry) sawServed(name string, n int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.state(name)
	st.served, st.servedAt = n, time.Now()
}

// refreshDue reports whether the lifetime of name's stored configuration
// should be extended now, and if so records that it is being done.
func (r *Registry) refreshDue(name string, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.state(name)
	if !st.refreshed.IsZero() && now.Sub(st.refreshed) < refreshEvery {
		return false
	}
	st.refreshed = now
	return true
}
