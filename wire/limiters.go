package wire

import (
	"errors"
	"fmt"
	"math"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/engine"
)

// PathLimiters is the collection of paced-call limiters: GET lists them;
// PathLimiters + "/" + name is one limiter, which GET reports on, PUT
// configures and PATCH reconfigures. Every request carries
// "Authorization: Bearer" and the operator token or the limits key.
const PathLimiters = "/v1/limiters"

// FeatureLimiters is reported in Ping.Features by a server serving
// PathLimiters.
const FeatureLimiters = "limiters"

// MergePatchType is the media type of a PATCH body (RFC 7396); the server
// also accepts application/json.
const MergePatchType = "application/merge-patch+json"

// Bounds of a limiter's name and configuration: those of the pace package,
// which runs the limiters.
const (
	// MaxLimiterName is the longest limiter name, in bytes.
	MaxLimiterName = 64
	// MaxLimiterLimit is the largest limitPerWindow.
	MaxLimiterLimit = algo.MaxLogLimit
	// MaxLimiterConcurrency is the largest concurrency.
	MaxLimiterConcurrency = algo.MaxGateLimit
	// MaxLimiterMs is the longest window, lease, wait or backoff: 120 days.
	MaxLimiterMs = algo.MaxWindow
	// MinLimiterLeaseTTLMs is the shortest leaseTtlMs.
	MinLimiterLeaseTTLMs = engine.MinTTLMs
	// MaxLimiterAttempts is the largest retry.attempts.
	MaxLimiterAttempts = 100
	// MaxLimiterFactor is the largest retry.factor.
	MaxLimiterFactor = 100
)

// LimiterConfig is the configuration of one paced-call limiter, as
// pace.Config holds it, with durations in milliseconds. It is complete:
// every field is used as it is and zero means zero — except in Retry,
// whose zero fields take the defaults.
type LimiterConfig struct {
	// LimitPerWindow is the most calls that may start in any rolling
	// window: the upstream's limit, verbatim. 1 … MaxLimiterLimit.
	LimitPerWindow int64 `json:"limitPerWindow"`
	// WindowMs is the length of the rolling window, 1 … MaxLimiterMs.
	WindowMs int64 `json:"windowMs"`
	// Concurrency caps the calls in flight at once; 0 means no cap.
	Concurrency int64 `json:"concurrency"`
	// LeaseTTLMs is how soon the concurrency slot of a crashed caller
	// frees: MinLimiterLeaseTTLMs … MaxLimiterMs, or 0 without a cap.
	LeaseTTLMs int64 `json:"leaseTtlMs"`
	// RefillFraction is the share of the limit a window recovering from
	// an upstream rate limit reopens with, 0 … 1 in thousandths.
	RefillFraction float64 `json:"refillFraction"`
	// MaxWaitMs is the longest a call waits for its slot; 0 means calls
	// never wait.
	MaxWaitMs int64 `json:"maxWaitMs"`
	// StartToleranceMs is how late after its slot a call may still start
	// (see pace.Config.StartTolerance): windows of starts then hold no
	// more than the limit, at the cost of WindowMs/(WindowMs+τ) of the
	// throughput. 0 … MaxLimiterMs−WindowMs; absent or 0 bounds slots
	// only.
	StartToleranceMs int64 `json:"startToleranceMs,omitempty"`
	// Retry is how failed and rate-limited calls are retried.
	Retry LimiterRetry `json:"retry"`
}

// LimiterRetry is an exponential backoff: the delay before retry n is
// floorMs·factorⁿ⁻¹, at most ceilingMs. A zero (absent) field takes its
// default: 4 attempts, from 500 ms, doubling, to at most 30 s.
type LimiterRetry struct {
	// Attempts is the most times a call's function runs, the first
	// included: 1 never retries. At most MaxLimiterAttempts.
	Attempts int64 `json:"attempts,omitempty"`
	// FloorMs is the first delay, 1 … MaxLimiterMs.
	FloorMs int64 `json:"floorMs,omitempty"`
	// CeilingMs is the longest delay, FloorMs … MaxLimiterMs.
	CeilingMs int64 `json:"ceilingMs,omitempty"`
	// Factor multiplies the delay at each retry, 1 … MaxLimiterFactor.
	Factor float64 `json:"factor,omitempty"`
}

// Limiter is one limiter and its configuration: an element of
// LimiterList, and the answer of PUT and PATCH.
type Limiter struct {
	Name   string        `json:"name"`
	Config LimiterConfig `json:"config"`
}

// LimiterList is the body of GET /v1/limiters: every limiter, sorted by
// name.
type LimiterList struct {
	Limiters []Limiter `json:"limiters"`
}

// LimiterStatus is the body of GET /v1/limiters/{name}: the limiter and its
// state at one instant of the server's clock.
type LimiterStatus struct {
	Limiter
	Stats LimiterStats `json:"stats"`
}

// LimiterStats is the state of a limiter. Instants are Unix milliseconds
// by the server's clock.
type LimiterStats struct {
	// At is when the state was read.
	At int64 `json:"at"`
	// Remaining is how many calls could start at At: the limit less the
	// grants in the window, the slots reserved for waiting calls and the
	// spend a penalty holds back. Never negative.
	Remaining int64 `json:"remaining"`
	// ResetAt is when the window will hold no grant (At if it holds none).
	ResetAt int64 `json:"resetAt"`
	// PenaltyUntil is the deadline of the upstream rate limit in force;
	// absent when none is.
	PenaltyUntil int64 `json:"penaltyUntil,omitempty"`
	// InFlight is the number of concurrency leases held.
	InFlight int64 `json:"inFlight"`
	// Waiting is the number of calls waiting for a lease or their slot.
	Waiting int64 `json:"waiting"`
}

// ValidateLimiterName reports whether name can name a limiter: 1 …
// MaxLimiterName bytes of ASCII letters, digits, '.', '_' and '-', other
// than "." and "..", which cannot be a segment of a URL path.
func ValidateLimiterName(name string) error {
	if name == "" || len(name) > MaxLimiterName {
		return fmt.Errorf("limiter name of %d bytes (want 1…%d)", len(name), MaxLimiterName)
	}
	if name == "." || name == ".." {
		return fmt.Errorf("limiter name %q is a path segment of its own", name)
	}
	for i := 0; i < len(name); i++ {
		switch c := name[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '.', c == '_', c == '-':
		default:
			return fmt.Errorf("limiter name %q: only letters, digits, '.', '_' and '-' are allowed", name)
		}
	}
	return nil
}

// Validate reports every problem of c at once, each naming its field as
// written on the wire and in a limits file.
func (c LimiterConfig) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.LimitPerWindow < 1 || c.LimitPerWindow > MaxLimiterLimit {
		bad("limitPerWindow %d outside 1…%d", c.LimitPerWindow, MaxLimiterLimit)
	}
	if c.WindowMs < 1 || c.WindowMs > MaxLimiterMs {
		bad("windowMs %d outside 1…%d (120 days)", c.WindowMs, MaxLimiterMs)
	}
	if c.Concurrency < 0 || c.Concurrency > MaxLimiterConcurrency {
		bad("concurrency %d outside 0…%d (0: no cap)", c.Concurrency, MaxLimiterConcurrency)
	}
	if (c.Concurrency > 0 || c.LeaseTTLMs != 0) && (c.LeaseTTLMs < MinLimiterLeaseTTLMs || c.LeaseTTLMs > MaxLimiterMs) {
		bad("leaseTtlMs %d outside %d…%d", c.LeaseTTLMs, MinLimiterLeaseTTLMs, MaxLimiterMs)
	}
	switch f := c.RefillFraction; {
	case !(f >= 0 && f <= 1):
		bad("refillFraction %v outside 0…1", f)
	case math.Round(f*1000)/1000 != f:
		bad("refillFraction %v is finer than thousandths", f)
	}
	if c.MaxWaitMs < 0 || c.MaxWaitMs > MaxLimiterMs {
		bad("maxWaitMs %d outside 0…%d", c.MaxWaitMs, MaxLimiterMs)
	}
	if most := MaxLimiterMs - max(c.WindowMs, 0); c.StartToleranceMs < 0 || c.StartToleranceMs > most {
		bad("startToleranceMs %d outside 0…%d (120 days less windowMs)", c.StartToleranceMs, most)
	}
	r := c.Retry
	if r.Attempts < 0 || r.Attempts > MaxLimiterAttempts {
		bad("retry.attempts %d outside 1…%d (0: the default, 4)", r.Attempts, MaxLimiterAttempts)
	}
	if r.FloorMs < 0 || r.FloorMs > MaxLimiterMs {
		bad("retry.floorMs %d outside 1…%d (0: the default, 500)", r.FloorMs, MaxLimiterMs)
	}
	if r.CeilingMs < 0 || r.CeilingMs > MaxLimiterMs {
		bad("retry.ceilingMs %d outside 1…%d (0: the default, 30000)", r.CeilingMs, MaxLimiterMs)
	}
	if r.Factor != 0 && !(r.Factor >= 1 && r.Factor <= MaxLimiterFactor) {
		bad("retry.factor %v outside 1…%d (0: the default, 2)", r.Factor, MaxLimiterFactor)
	}
	if len(errs) == 0 {
		floor, ceiling := r.FloorMs, r.CeilingMs
		if floor == 0 {
			floor = defaultRetryFloorMs
		}
		if ceiling == 0 {
			ceiling = defaultRetryCeilingMs
		}
		if ceiling < floor {
			bad("retry.ceilingMs %d under retry.floorMs %d", ceiling, floor)
		}
	}
	return errors.Join(errs...)
}

// The defaults a zero LimiterRetry field takes (pace.DefaultRetry).
const (
	defaultRetryFloorMs   = 500
	defaultRetryCeilingMs = 30_000
)
