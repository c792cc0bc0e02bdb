package pace

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/engine"
)

// Bounds of a configuration.
const (
	// MaxLimit is the largest Config.Limit: the pacing log keeps one entry
	// per grant instant, and its size is bounded.
	MaxLimit = int(algo.MaxLogLimit)
	// MaxConcurrency is the largest Config.Concurrency.
	MaxConcurrency = algo.MaxGateLimit
	// MaxDuration is the longest window, lease, wait or backoff: 120 days.
	MaxDuration = time.Duration(algo.MaxWindow) * time.Millisecond
	// MinLeaseTTL is the shortest Config.LeaseTTL.
	MinLeaseTTL = time.Duration(engine.MinTTLMs) * time.Millisecond
	// MaxAttempts is the largest Retry.Attempts.
	MaxAttempts = 100
	// MaxFactor is the largest Retry.Factor.
	MaxFactor = 100.0
)

// Config is the configuration of one limiter: how many calls may start per
// window, how many may be in flight at once, and how calls wait and retry.
// It is stored beside the limiter's state, so every process sharing the
// store shares it (see Registry.Configure).
//
// A Config is complete: every field is used as it is, and zero means zero.
// Start from DefaultConfig and set Limit and Window (and Concurrency, if the
// upstream caps calls in flight). The one exception is Retry, whose zero
// fields take their defaults.
type Config struct {
	// Limit is the most calls that may start in any rolling Window: set it
	// to the upstream's limit, verbatim ("100 per minute" is Limit 100,
	// Window one minute). A rested limiter may spend all of it at once;
	// no rolling window ever holds more. 1 … MaxLimit.
	Limit int
	// Window is the length of the rolling window, in whole milliseconds,
	// from 1 ms to MaxDuration.
	Window time.Duration
	// Concurrency caps the calls in flight at once, across every process;
	// 0 means no cap. At most MaxConcurrency.
	Concurrency int
	// LeaseTTL is how long a call's concurrency lease lives unless renewed.
	// A call renews its lease while it holds it, so LeaseTTL only decides
	// how soon the slot of a crashed caller frees. At least MinLeaseTTL
	// when Concurrency is set.
	LeaseTTL time.Duration
	// RefillFraction is the share of Limit available when a window
	// recovering from an upstream rate limit reopens, 0 … 1. A full window
	// aimed at an upstream that just asked for backoff would trip it again
	// at once; 0.5 (the default) reopens with half, 0 with nothing, 1 with
	// the whole limit. It is a floor on the spend the window carries, not
	// a reset: grants still inside it count too. It is kept in
	// thousandths: a finer fraction, which would be rounded, is refused.
	RefillFraction float64
	// MaxWait is the longest a call waits for its slot; a call whose slot
	// is further away is refused at once with a *WaitError. A shorter
	// context deadline lowers it for that call. 0 means calls never wait.
	MaxWait time.Duration
	// StartTolerance is how late after its slot a call may still start.
	// The upstream counts starts, not slots, and a call learns of its
	// slot and reaches it after a delay that varies (a few milliseconds
	// over a network, more on a loaded machine), so two slots a Window
	// apart could start less than a Window apart. With a tolerance τ the
	// pacing log counts its grants in windows of Window+τ, and a call
	// that could start more than τ after its slot gives the slot up and
	// takes another: every start of a window [x, x+Window) then has its
	// slot in [x−τ, x+Window), which holds at most Limit slots, so no
	// rolling Window of starts holds more than Limit. The cost is
	// throughput: a saturated limiter starts Limit calls per Window+τ,
	// Window/(Window+τ) of the limit. 0 turns the bound off: windows of
	// slots are exact, and windows of starts may hold a few more than
	// Limit. Set it above the longest round trip to the store: a call
	// cannot tell the way to the store from the way back, so it counts
	// the whole round trip of the request that brought its grant (plus a
	// millisecond for the store's clock) as lateness. A process whose
	// round trips all exceed τ never starts a call: each gives up ten
	// late grants, left unused in the log (spending the limit of every
	// process), and fails with ErrDropped at the eleventh. Whole
	// milliseconds, at most MaxDuration−Window.
	StartTolerance time.Duration
	// Retry is how failed and rate-limited calls are retried. Zero fields
	// take the defaults of DefaultRetry.
	Retry Retry
}

// Retry is an exponential backoff: the delay before retry n (n ≥ 1) is
// Floor·Factorⁿ⁻¹, at most Ceiling. Wherever a Retry is given, its zero
// fields take the values of the Retry it refines: a limiter's over
// DefaultRetry, a call's over its limiter's.
type Retry struct {
	// Attempts is the most times fn runs for one call, the first included:
	// 1 never retries. At most MaxAttempts.
	Attempts int
	// Floor is the first delay, at least 1 ms.
	Floor time.Duration
	// Ceiling is the longest delay, at least Floor and at most MaxDuration.
	Ceiling time.Duration
	// Factor multiplies the delay at each retry, 1 … MaxFactor.
	Factor float64
}

// DefaultRetry returns the default retry policy: 4 attempts, backing off
// from 500 ms, doubling, to at most 30 s.
func DefaultRetry() Retry {
	return Retry{Attempts: 4, Floor: 500 * time.Millisecond, Ceiling: 30 * time.Second, Factor: 2}
}

// DefaultConfig returns a configuration with no concurrency cap, a lease
// TTL of 30 s, a refill fraction of one half, a maximum wait of 5 minutes,
// a start tolerance of 100 ms and the default retry policy. It does not
// validate until Limit and Window are set: only the application knows its
// upstream's limit.
func DefaultConfig() Config {
	return Config{
		LeaseTTL:       30 * time.Second,
		RefillFraction: 0.5,
		MaxWait:        5 * time.Minute,
		StartTolerance: DefaultStartTolerance,
	}
}

// DefaultStartTolerance is the start tolerance of DefaultConfig: above
// the delays from a slot to its start measured end to end on a loaded
// machine (up to 44 ms; see docs/benchmarks.md), at the cost of 5 % of the
// throughput of a limit per 2 s, 0.2 % of one per minute.
const DefaultStartTolerance = 100 * time.Millisecond

// over returns r with its zero fields taken from base.
func (r Retry) over(base Retry) Retry {
	if r.Attempts == 0 {
		r.Attempts = base.Attempts
	}
	if r.Floor == 0 {
		r.Floor = base.Floor
	}
	if r.Ceiling == 0 {
		r.Ceiling = base.Ceiling
	}
	if r.Factor == 0 {
		r.Factor = base.Factor
	}
	return r
}

// Delay returns the delay before retry n (1 for the first retry); zero
// fields of r take their defaults.
func (r Retry) Delay(n int) time.Duration {
	r = r.over(DefaultRetry())
	d := float64(r.Floor) * math.Pow(r.Factor, float64(max(n, 1)-1))
	if d >= float64(r.Ceiling) || math.IsInf(d, 0) || math.IsNaN(d) {
		return r.Ceiling
	}
	return time.Duration(d)
}

// Validate reports every problem of a Retry, each wrapping ErrInvalidConfig.
// Zero fields are valid: they take defaults.
func (r Retry) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...))
	}
	if r.Attempts < 0 || r.Attempts > MaxAttempts {
		bad("Retry.Attempts %d outside 1…%d", r.Attempts, MaxAttempts)
	}
	if r.Floor != 0 && (r.Floor < time.Millisecond || r.Floor > MaxDuration) {
		bad("Retry.Floor %v outside 1ms…%v", r.Floor, MaxDuration)
	}
	if r.Ceiling != 0 && (r.Ceiling < time.Millisecond || r.Ceiling > MaxDuration) {
		bad("Retry.Ceiling %v outside 1ms…%v", r.Ceiling, MaxDuration)
	}
	if r.Factor != 0 && !(r.Factor >= 1 && r.Factor <= MaxFactor) {
		bad("Retry.Factor %v outside 1…%v", r.Factor, MaxFactor)
	}
	if len(errs) == 0 {
		full := r.over(DefaultRetry())
		if full.Ceiling < full.Floor {
			bad("Retry.Ceiling %v under Retry.Floor %v", full.Ceiling, full.Floor)
		}
	}
	return errors.Join(errs...)
}

// Validate reports every problem of c, each wrapping ErrInvalidConfig, or
// nil.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...))
	}
	if c.Limit < 1 || c.Limit > MaxLimit {
		bad("Limit %d outside 1…%d", c.Limit, MaxLimit)
	}
	if c.Window < time.Millisecond || c.Window > MaxDuration {
		bad("Window %v outside 1ms…%v", c.Window, MaxDuration)
	}
	if c.Concurrency < 0 || c.Concurrency > MaxConcurrency {
		bad("Concurrency %d outside 0…%d (0: no cap)", c.Concurrency, MaxConcurrency)
	}
	if (c.Concurrency > 0 || c.LeaseTTL != 0) && (c.LeaseTTL < MinLeaseTTL || c.LeaseTTL > MaxDuration) {
		bad("LeaseTTL %v outside %v…%v", c.LeaseTTL, MinLeaseTTL, MaxDuration)
	}
	switch f := c.RefillFraction; {
	case !(f >= 0 && f <= 1):
		bad("RefillFraction %v outside 0…1", f)
	case math.Round(f*1000)/1000 != f:
		bad("RefillFraction %v is finer than thousandths", f)
	}
	if c.MaxWait < 0 || c.MaxWait > MaxDuration {
		bad("MaxWait %v outside 0…%v", c.MaxWait, MaxDuration)
	}
	if c.StartTolerance < 0 || c.StartTolerance > MaxDuration-max(c.Window, 0) {
		bad("StartTolerance %v outside 0…%v (MaxDuration−Window)", c.StartTolerance, MaxDuration-max(c.Window, 0))
	}
	for _, d := range []struct {
		name string
		d    time.Duration
	}{{"Window", c.Window}, {"LeaseTTL", c.LeaseTTL}, {"MaxWait", c.MaxWait}, {"StartTolerance", c.StartTolerance}, {"Retry.Floor", c.Retry.Floor}, {"Retry.Ceiling", c.Retry.Ceiling}} {
		if d.d%time.Millisecond != 0 {
			bad("%s %v is not a whole number of milliseconds", d.name, d.d)
		}
	}
	if err := c.Retry.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// stored is a Config as the store keeps it: durations in milliseconds, the
// refill share in thousandths, and a generation that changes at every
// configuration, so that a caller can tell that the limits it waited under
// are gone. Retry is kept as given, so that it keeps following the defaults
// it did not override.
type stored struct {
	Gen            uint64 `json:"gen"`
	Limit          int64  `json:"limit"`
	WindowMs       int64  `json:"windowMs"`
	Concurrency    int64  `json:"concurrency,omitempty"`
	LeaseTTLMs     int64  `json:"leaseTtlMs,omitempty"`
	RefillPermille int64  `json:"refillPermille"`
	MaxWaitMs      int64  `json:"maxWaitMs"`
	// StartToleranceMs is absent from configurations stored before it
	// existed, which read as 0: no bound on starts, as then.
	StartToleranceMs int64       `json:"startToleranceMs,omitempty"`
	Retry            storedRetry `json:"retry"`

	// raw is the encoding s was read from or written as: every batch of a
	// call reads the configuration back, and an unchanged one is
	// recognised without decoding it.
	raw string
}

type storedRetry struct {
	Attempts  int     `json:"attempts,omitempty"`
	FloorMs   int64   `json:"floorMs,omitempty"`
	CeilingMs int64   `json:"ceilingMs,omitempty"`
	Factor    float64 `json:"factor,omitempty"`
}

// store returns c as stored, under a fresh generation. c must be valid.
func (c Config) store() stored {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go ≥ 1.24)
	s := stored{
		Gen:              binary.LittleEndian.Uint64(b[:]),
		Limit:            int64(c.Limit),
		WindowMs:         c.Window.Milliseconds(),
		Concurrency:      int64(c.Concurrency),
		RefillPermille:   int64(math.Round(c.RefillFraction * 1000)),
		LeaseTTLMs:       c.LeaseTTL.Milliseconds(),
		MaxWaitMs:        c.MaxWait.Milliseconds(),
		StartToleranceMs: c.StartTolerance.Milliseconds(),
		Retry: storedRetry{
			Attempts:  c.Retry.Attempts,
			FloorMs:   c.Retry.Floor.Milliseconds(),
			CeilingMs: c.Retry.Ceiling.Milliseconds(),
			Factor:    c.Retry.Factor,
		},
	}
	return s
}

// config returns the Config s stores.
func (s stored) config() Config {
	ms := func(n int64) time.Duration { return time.Duration(n) * time.Millisecond }
	return Config{
		Limit:          int(s.Limit),
		Window:         ms(s.WindowMs),
		Concurrency:    int(s.Concurrency),
		LeaseTTL:       ms(s.LeaseTTLMs),
		RefillFraction: float64(s.RefillPermille) / 1000,
		MaxWait:        ms(s.MaxWaitMs),
		StartTolerance: ms(s.StartToleranceMs),
		Retry:          Retry{Attempts: s.Retry.Attempts, Floor: ms(s.Retry.FloorMs), Ceiling: ms(s.Retry.CeilingMs), Factor: s.Retry.Factor},
	}
}

// encode returns s with its encoding.
func (s stored) encode() (stored, error) {
	b, err := json.Marshal(s)
	if err != nil {
		return stored{}, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	s.raw = string(b)
	return s, nil
}

func decodeStored(name, v string) (stored, error) {
	var s stored
	if err := json.Unmarshal([]byte(v), &s); err != nil {
		return stored{}, fmt.Errorf("%w: limiter %q: stored configuration: %w", engine.ErrCorrupt, name, err)
	}
	if err := s.config().Validate(); err != nil {
		return stored{}, fmt.Errorf("%w: limiter %q: stored configuration: %w", engine.ErrCorrupt, name, err)
	}
	s.raw = v
	return s, nil
}

// pace returns the engine's description of the limiter's pacing log at key.
// The log counts grants in windows of Window plus the start tolerance, so
// that the starts of any Window, each within the tolerance after its slot,
// hold no more than the limit (see Config.StartTolerance).
func (s stored) pace(key string) engine.Pace {
	refill := s.RefillPermille
	return engine.Pace{Key: key, Limit: s.Limit, WindowMs: s.WindowMs + s.StartToleranceMs, RefillPermille: &refill}
}
