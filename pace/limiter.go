package pace

import "time"

// DefaultDropRetries is how many times a call that never started is retried
// after a store failure, unless WithDropRetries says otherwise.
const DefaultDropRetries = 5

// Limiter names a shared limiter and carries the defaults of every call made
// through it: the hooks that recognise an upstream's rate limits and
// failures, the drop policy and the retry policy. Defining one does no I/O
// and starts nothing, so a Limiter is safe as a package-level variable:
//
//	var billing = pace.Define("billing-api", pace.WithRateLimitHook(quotaInBody))
//
// Bind it to a Registry where a store is at hand. The limits themselves
// (rate, concurrency, waits) are not part of the definition: they are
// stored with the limiter's state and set by Registry.Configure, so every
// process shares them.
type Limiter struct {
	name string
	set  settings
}

// Define returns the limiter named name. The name is written once, here:
// two spellings of one upstream's limiter would be two limiters, each
// pacing at the full rate. A name is 1 to MaxNameLen bytes of ASCII letters,
// digits, '.', '_' and '-', other than "." and ".."; calls through a limiter
// with any other name fail with ErrNoSuchLimiter, since it can never be
// configured.
func Define(name string, opts ...Option) *Limiter {
	l := &Limiter{name: name}
	for _, o := range opts {
		o(&l.set)
	}
	return l
}

// Name returns the limiter's name.
func (l *Limiter) Name() string { return l.name }

// Bind returns the limiter bound to the limiters of r's store. Binding does
// no I/O; bind once and keep the result, or bind per request, as suits.
func (l *Limiter) Bind(r *Registry) *Bound { return &Bound{lim: l, reg: r} }

// Bound is a Limiter bound to a Registry: what Call and RoundTripper take.
// It is safe for concurrent use.
type Bound struct {
	lim *Limiter
	reg *Registry
}

// Limiter returns the limiter b binds.
func (b *Bound) Limiter() *Limiter { return b.lim }

// Option adjusts a limiter's defaults (given to Define) or one call (given
// to Call or RoundTripper). Call options take precedence over the
// limiter's.
type Option func(*settings)

type settings struct {
	rateLimit    RateLimitHook
	rateLimitSet bool
	errorHook    ErrorHook
	errorHookSet bool
	dropRetries  int
	dropSet      bool
	onDrop       func(Drop)
	onStart      func(Start)
	retry        Retry
}

// RateLimit is a rate-limit hook's verdict: the upstream asked callers to
// back off. It pauses every caller of the limiter, in every process, like an
// HTTP 429.
type RateLimit struct {
	// RetryAfter is how long the upstream asked for. Zero means it did not
	// say: the pause is the retry policy's backoff for the attempt.
	RetryAfter time.Duration
}

// RateLimitHook inspects what fn returned and reports an upstream rate limit
// hidden where the built-in HTTP rules cannot see it (a 200 or a 403 whose
// body says "quota exceeded", an SDK error), or nil.
//
// Use it only for limits that bind every caller: its verdict pauses them
// all. A failure of one call is an ErrorHook's business.
type RateLimitHook func(v any, err error) *RateLimit

// Failure is an error hook's verdict: the attempt failed.
type Failure struct {
	// Err describes the failure; nil means a generic one.
	Err error
	// Retryable reports whether another attempt may succeed. It retries
	// this call only, with the retry policy's backoff.
	Retryable bool
}

// ErrorHook inspects what fn returned and reports a failure, or nil when
// the attempt succeeded as far as the hook can tell: an error an upstream
// hides in a 200 body, or a status the caller wants treated as a failure.
type ErrorHook func(v any, err error) *Failure

// Drop describes a call dropped before it started: a store failure met
// while it waited for its turn.
type Drop struct {
	// Limiter names the limiter.
	Limiter string
	// Drops counts the drops of this call so far, this one included.
	Drops int
	// WillRetry reports whether the call carries on. When false the call
	// fails with ErrDropped.
	WillRetry bool
	// Err is the store's error.
	Err error
}

// WithRateLimitHook sets the hook that recognises upstream rate limits.
// Hooks are consulted call site first, then the limiter's default, then the
// built-in HTTP rules (a *http.Response with status 429), each falling
// through on nil: the HTTP rules always apply, so a hook for one odd
// endpoint never disables real 429 handling. WithRateLimitHook(nil) at a
// call site opts that call out of the limiter's hook; the HTTP rules still
// apply.
func WithRateLimitHook(h RateLimitHook) Option {
	return func(s *settings) { s.rateLimit, s.rateLimitSet = h, true }
}

// WithErrorHook sets the hook that recognises failed attempts. Hooks are
// consulted call site first, then the limiter's default, then the built-in
// rules (an error returned by fn is a failure, retryable unless it is a
// context error or marked Permanent), each falling through on nil.
// WithErrorHook(nil) at a call site opts that call out of the limiter's
// hook.
func WithErrorHook(h ErrorHook) Option {
	return func(s *settings) { s.errorHook, s.errorHookSet = h, true }
}

// WithDropRetries sets how many times a call dropped before fn started (a
// store failure while it waited) is retried: DefaultDropRetries unless set,
// 0 to fail at the first drop. A drop after fn started is never retried:
// it cannot be told apart from a finished call.
func WithDropRetries(n int) Option {
	return func(s *settings) { s.dropRetries, s.dropSet = max(n, 0), true }
}

// WithOnDrop sets a function observing every drop, retried or not. It runs
// on the caller's path between attempts: it must not block.
func WithOnDrop(f func(Drop)) Option {
	return func(s *settings) { s.onDrop = f }
}

// Start describes an attempt about to run fn.
type Start struct {
	// Limiter names the limiter.
	Limiter string
	// Attempt counts the attempts of the call, this one included.
	Attempt int
	// Slot is the slot the attempt was admitted at, by the store's clock:
	// fn never starts before it, and the log of grants holds it there. The
	// time between Slot and fn's start is the delivery of the admission to
	// this process.
	Slot time.Time
}

// WithOnStart sets a function observing every attempt just before fn runs,
// for metrics of waits and admissions. It runs on the caller's path: it
// must not block.
func WithOnStart(f func(Start)) Option {
	return func(s *settings) { s.onStart = f }
}

// WithRetry refines the retry policy of the limiter's configuration: the
// zero fields of r keep the configured values. WithRetry(Retry{Attempts: 1})
// never retries.
func WithRetry(r Retry) Option {
	return func(s *settings) { s.retry = r.over(s.retry) }
}

// resolved is the settings of one call: the call's options over the
// limiter's.
type resolved struct {
	rateLimit   []RateLimitHook
	errorHooks  []ErrorHook
	dropRetries int
	onDrop      func(Drop)
	onStart     func(Start)
	retry       Retry // over the configuration's; zero fields unset
}

func resolve(lim, call settings) resolved {
	r := resolved{dropRetries: DefaultDropRetries, onDrop: lim.onDrop, onStart: lim.onStart, retry: call.retry.over(lim.retry)}
	switch {
	case call.rateLimitSet && call.rateLimit != nil:
		r.rateLimit = append(r.rateLimit, call.rateLimit)
		if lim.rateLimit != nil {
			r.rateLimit = append(r.rateLimit, lim.rateLimit)
		}
	case !call.rateLimitSet && lim.rateLimit != nil:
		r.rateLimit = append(r.rateLimit, lim.rateLimit)
	}
	switch {
	case call.errorHookSet && call.errorHook != nil:
		r.errorHooks = append(r.errorHooks, call.errorHook)
		if lim.errorHook != nil {
			r.errorHooks = append(r.errorHooks, lim.errorHook)
		}
	case !call.errorHookSet && lim.errorHook != nil:
		r.errorHooks = append(r.errorHooks, lim.errorHook)
	}
	if lim.dropSet {
		r.dropRetries = lim.dropRetries
	}
	if call.dropSet {
		r.dropRetries = call.dropRetries
	}
	if call.onDrop != nil {
		r.onDrop = call.onDrop
	}
	if call.onStart != nil {
		r.onStart = call.onStart
	}
	return r
}
