package client

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/hashicorp/golang-lru/v2/simplelru"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/engine"
)

// MaxEntries bounds a Guard's denial cache and, separately, its degraded
// counters. At the bound the entry written longest ago is evicted.
const MaxEntries = 10_000

// GuardConfig configures a Guard. Start from DefaultGuardConfig.
type GuardConfig struct {
	// FailMode is what Hit answers while the server is unavailable.
	FailMode FailMode
	// Clock times cached denials and degraded windows. Nil means the system
	// clock. The server's decisions use the server's clock; this one only
	// measures the delays the server reported, and the local windows.
	Clock engine.Clock
	// Logger receives a warning when the server becomes unavailable and a
	// notice when it answers again. Nil discards them.
	Logger *slog.Logger
	// Registerer, if set, receives the Guard's decisions, counted in
	// sluice_guard_decisions_total by the client's family, their origin
	// (server, cache, fail-closed, fail-open, degraded) and result
	// (allowed, denied): how often the fail mode answers shows there,
	// before callers notice it. Guards registered on one registry share
	// the counter, each under its family.
	Registerer prometheus.Registerer
}

// DefaultGuardConfig returns a configuration that fails closed on the
// system clock.
func DefaultGuardConfig() GuardConfig { return GuardConfig{FailMode: FailClosed} }

// Validate reports whether c is usable.
func (c GuardConfig) Validate() error {
	if int(c.FailMode) >= len(failModeNames) {
		return fmt.Errorf("%w: unknown %s", engine.ErrInvalid, c.FailMode)
	}
	return nil
}

// Guard answers the common question "may this caller make this request?":
// one win.hit of a cost over a partition's windows, with the shortcuts and
// the fail mode of one family. Use one Guard per family (and per Client
// view), and the Client itself for every other command.
//
// A Guard adds, per process:
//
//   - a denial cache: a partition and windows the server denied are
//     answered from memory, with no RPC, until the delay the server gave
//     for the same hit (RetryAfterMs, the window's reset for a fixed
//     window) has passed since the hit was sent, for any cost at least the
//     denied one (a step back of the Guard's clock ends it, so that it
//     never outlasts that delay);
//   - its FailMode while the server is unavailable;
//   - for Degraded, per-process fixed-window counters of the same windows,
//     used only while the server is unavailable: healthy traffic never
//     seeds them (the server counted it), so an outage starts them at zero;
//     what one outage admitted still counts in a later one within the same
//     window, since the server never saw it.
//
// The denial cache and the degraded counters each hold at most MaxEntries
// entries. They are per process: a restart, another instance or an
// eviction simply asks the server again, which still enforces the limits.
//
// A Guard is safe for concurrent use.
type Guard struct {
	c     *Client
	mode  FailMode
	clock engine.Clock
	log   *slog.Logger

	denials *lru.Cache[digest, denial]

	mu       sync.Mutex // serialises each degraded hit over its windows
	counters *simplelru.LRU[digest, algo.WindowState]

	down atomic.Bool // the last call found the server unavailable

	metrics *guardMetrics // nil without GuardConfig.Registerer
}

// digest names a cache entry in 32 bytes, whatever the size of the
// partition and keys it stands for.
type digest [sha256.Size]byte

// denial is a cached server denial.
type denial struct {
	at, until time.Time // when it was cached and when it ends, by the Guard's clock
	cost      int64     // the denied cost: a larger one is denied too
	remaining int64
}

// NewGuard returns a Guard over c. c's family and fairness identities (see
// Client.WithFamily, Client.WithFairness) are those of every hit.
func NewGuard(c *Client, cfg GuardConfig) (*Guard, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: nil client", engine.ErrInvalid)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	g := &Guard{c: c, mode: cfg.FailMode, clock: cfg.Clock, log: cfg.Logger}
	if g.clock == nil {
		g.clock = engine.SystemClock{}
	}
	if g.log == nil {
		g.log = slog.New(slog.DiscardHandler)
	}
	var err error
	if g.denials, err = lru.New[digest, denial](MaxEntries); err != nil {
		return nil, err
	}
	if g.counters, err = simplelru.NewLRU[digest, algo.WindowState](MaxEntries, nil); err != nil {
		return nil, err
	}
	if cfg.Registerer != nil {
		if g.metrics, err = newGuardMetrics(cfg.Registerer, c.Family()); err != nil {
			return nil, err
		}
	}
	return g, nil
}

// Decision is the answer of Guard.Hit.
type Decision struct {
	// Allowed reports whether the caller may go ahead.
	Allowed bool
	// Remaining is the smallest allowance left across the windows, as the
	// server, the denial cache or the degraded counters saw it; 0 when the
	// fail mode answered without counting (FailOpen, FailClosed).
	Remaining int64
	// RetryAfter is, for a refusal, how long until the same hit may be
	// admitted: the server's estimate, what is left of a cached denial, the
	// degraded window's reset, or FailClosedRetryAfter.
	RetryAfter time.Duration
	// Origin tells what decided.
	Origin Origin
	// Err is the unavailability the fail mode answered for (it wraps
	// ErrUnavailable); nil when the server or the denial cache decided.
	Err error
}

// Origin tells what decided a Decision.
type Origin uint8

// The origins of a decision.
const (
	OriginServer     Origin = iota // the server
	OriginCache                    // a denial cached from the server
	OriginFailClosed               // FailClosed while the server was unavailable
	OriginFailOpen                 // FailOpen while the server was unavailable
	OriginDegraded                 // the degraded counters while the server was unavailable
)

var originNames = [...]string{"server", "cache", "fail-closed", "fail-open", "degraded"}

// String returns the origin's name.
func (o Origin) String() string {
	if int(o) < len(originNames) {
		return originNames[o]
	}
	return fmt.Sprintf("Origin(%d)", uint8(o))
}

// Reject writes the answer to an HTTP request that d refused: 503 Service
// Unavailable with Retry-After: 30 when the family failed closed (see
// WriteUnavailable), and otherwise 429 Too Many Requests with Retry-After
// in whole seconds, rounded up. It writes nothing for an allowed decision.
func (d Decision) Reject(w http.ResponseWriter) {
	switch {
	case d.Allowed:
	case d.Origin == OriginFailClosed:
		WriteUnavailable(w)
	default:
		writeRefusal(w, http.StatusTooManyRequests, d.RetryAfter)
	}
}

// Hit charges cost to the windows of partition, all or nothing (see
// engine.Hit), and reports whether the caller may go ahead. A request
// outside the bounds fails with engine.ErrInvalid. While the server is
// unavailable, the Guard's fail mode answers with a nil error and the cause
// in Decision.Err. Errors that are not unavailability (engine.ErrInvalid,
// engine.ErrWrongType, engine.ErrClosed) are returned as they are, and so
// is the error of a call whose ctx ended before its answer (wrapping
// ErrUnavailable and the context's error): the caller gave up, which says
// nothing of the server, so no fail mode answers and no degraded window is
// charged. A hit sent before ctx ended may have been charged.
func (g *Guard) Hit(ctx context.Context, partition string, cost int64, windows ...engine.Window) (Decision, error) {
	d, err := g.hit(ctx, partition, cost, windows)
	if err == nil {
		g.metrics.count(d)
	}
	return d, err
}

func (g *Guard) hit(ctx context.Context, partition string, cost int64, windows []engine.Window) (Decision, error) {
	step := engine.Step{Partition: partition, Commands: []engine.Command{engine.Hit(cost, windows...)}}
	if err := step.Validate(); err != nil {
		return Decision{}, err
	}
	key := denialKey(partition, windows)
	if d, ok := g.denials.Peek(key); ok {
		now := g.clock.Now()
		switch {
		case !now.Before(d.until), now.Before(d.at):
			// Over, or the clock stepped back: the denial would outlast
			// the server's delay by the step.
			g.denials.Remove(key)
		case cost >= d.cost:
			return Decision{Remaining: d.remaining, RetryAfter: d.until.Sub(now), Origin: OriginCache}, nil
		}
	}
	// The server's delay runs from its decision, which is no earlier than
	// the send: a denial is cached from the send, so that the time the
	// answer took to arrive never extends it.
	sent := g.clock.Now()
	resp, err := g.c.Do(ctx, &engine.Request{Steps: []engine.Step{step}})
	if err != nil {
		if !isUnavailable(err) || ctx.Err() != nil {
			// The caller gave up: no fail mode answers for a server
			// that may well be available.
			return Decision{}, err
		}
		return g.fail(partition, cost, windows, err), nil
	}
	if g.down.Load() && g.down.Swap(false) {
		g.log.Info("sluice available again", "family", g.c.Family())
	}
	r := &resp.Steps[0].Results[0]
	d := Decision{Allowed: r.Allowed, Remaining: r.Remaining, Origin: OriginServer}
	if !r.Allowed {
		d.RetryAfter = time.Duration(r.RetryAfterMs) * time.Millisecond
		if until := sent.Add(d.RetryAfter); d.RetryAfter > 0 && g.clock.Now().Before(until) {
			g.denials.Add(key, denial{at: sent, until: until, cost: cost, remaining: r.Remaining})
		}
	}
	return d, nil
}

// fail answers a hit the server could not decide, by the fail mode.
func (g *Guard) fail(partition string, cost int64, windows []engine.Window, cause error) Decision {
	if !g.down.Swap(true) {
		g.log.Warn("sluice unavailable: applying the fail mode", "family", g.c.Family(), "mode", g.mode.String(), "err", cause)
	}
	var d Decision
	switch g.mode {
	case FailOpen:
		d = Decision{Allowed: true, Origin: OriginFailOpen}
	case Degraded:
		d = g.degraded(partition, cost, windows)
	default:
		d = Decision{RetryAfter: FailClosedRetryAfter, Origin: OriginFailClosed}
	}
	d.Err = cause
	return d
}

// degraded runs the hit on this process's fixed-window counters: the same
// limits and window lengths, epoch-aligned, all or nothing.
func (g *Guard) degraded(partition string, cost int64, windows []engine.Window) Decision {
	var (
		keys [engine.MaxWindowsPerHit]digest
		next [engine.MaxWindowsPerHit]algo.WindowState
		decs [engine.MaxWindowsPerHit]algo.Decision
	)
	g.mu.Lock()
	defer g.mu.Unlock()
	now := engine.UnixMilli(g.clock)
	allowed := true
	for i, w := range windows {
		keys[i] = counterKey(partition, w.Key)
		st, _ := g.counters.Peek(keys[i])
		next[i], decs[i] = algo.Hit(algo.Limit{Kind: algo.KindFixed, Limit: w.Limit, Window: w.WindowMs}, st, now, cost)
		allowed = allowed && decs[i].Allowed
	}
	d := Decision{Allowed: allowed, Remaining: algo.MaxLimit, Origin: OriginDegraded}
	for i := range windows {
		rem := decs[i].Remaining
		if !allowed && decs[i].Allowed {
			rem += cost // this window admitted the hit but was not charged
		}
		d.Remaining = min(d.Remaining, rem)
		d.RetryAfter = max(d.RetryAfter, time.Duration(decs[i].RetryAfter)*time.Millisecond)
	}
	if allowed {
		for i := range windows {
			g.counters.Add(keys[i], next[i])
		}
	}
	return d
}

// GuardStats counts a Guard's in-memory entries.
type GuardStats struct {
	Denials  int // cached denials, including expired ones not yet evicted
	Counters int // degraded window counters
}

// Stats returns the sizes of the Guard's caches.
func (g *Guard) Stats() GuardStats {
	g.mu.Lock()
	n := g.counters.Len()
	g.mu.Unlock()
	return GuardStats{Denials: g.denials.Len(), Counters: n}
}

// denialKey names a partition and the full description of its windows: a
// denial under one set of limits says nothing about another.
func denialKey(partition string, windows []engine.Window) digest {
	var buf [256]byte
	b := appendField(buf[:0], partition)
	for _, w := range windows {
		b = appendField(b, w.Key)
		b = append(b, byte(w.Kind))
		b = binary.BigEndian.AppendUint64(b, uint64(w.Limit))
		b = binary.BigEndian.AppendUint64(b, uint64(w.WindowMs))
	}
	return sha256.Sum256(b)
}

// counterKey names a degraded counter: like a window on the server, its
// state belongs to the partition and key, whatever limit a hit names.
func counterKey(partition, key string) digest {
	var buf [128]byte
	return sha256.Sum256(appendField(appendField(buf[:0], partition), key))
}

// appendField appends s with its length, so that no two sequences of fields
// encode alike.
func appendField(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}
