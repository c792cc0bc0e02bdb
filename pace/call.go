package pace

import (
	"context"
	"errors"
	"io"
	"math"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/engine"
)

// Call runs fn in this process when the limiter b allows, and returns what
// fn returned.
//
// A call first takes a concurrency lease, if the limiter caps calls in
// flight (queueing, first come first served across every process, while
// the cap is reached), then a slot in the limiter's sliding log: at once
// if the window has room, or a slot reserved in the future, which it
// sleeps until. Its ticket, lease and reservation are kept in the store,
// so a store restart while the call waits costs it neither its place nor
// a drop, and the slot is claimed again when it comes: a penalty that
// arrived meanwhile moves it, so fn never starts before its slot nor
// before a penalty's deadline. A call whose slot lies beyond the limiter's MaxWait,
// or beyond ctx's deadline, is refused at once with a *WaitError. fn then
// runs with the lease held (renewed while fn runs, released when it
// returns, after the pause of a rate limit it met is recorded).
//
// What fn returned is judged by the hooks (see WithRateLimitHook and
// WithErrorHook) and the built-in rules:
//
//   - An upstream rate limit — an *http.Response with status 429, or a
//     rate-limit hook's verdict — pauses every caller of the limiter until
//     its Retry-After (or the retry policy's backoff when it gives none,
//     or 0), and the call is retried after the pause.
//   - A failure — an error from fn, or an error hook's verdict — is retried
//     with the retry policy's backoff if it is retryable: fn's errors are,
//     unless they are context errors or marked Permanent.
//   - Anything else is a success, whatever its HTTP status: a 404 is
//     returned as it is, and never retried.
//
// fn is called again for each retry, so it must build its request afresh
// each time: a request whose body was consumed by the first attempt fails
// on the second. Every retry takes a new slot. A value discarded for a
// retry is closed if it is an *http.Response (its body) or an io.Closer.
//
// When attempts run out, or a failure is final, Call returns the last
// value together with a *CallError; an *http.Response is returned with its
// body already closed, as http.Client does on a redirect error. Errors
// before fn ran return the zero value: ErrNoSuchLimiter, ErrDropped (the
// store kept failing while the call waited, see WithDropRetries, or its
// grants kept reaching it later than the limiter's StartTolerance),
// ErrWaitTooLong, ErrReconfigured, a store's permanent error, or ctx's
// error. A call is retried automatically as a drop only while fn has not
// started, never after.
func Call[T any](ctx context.Context, b *Bound, fn func(context.Context) (T, error), opts ...Option) (T, error) {
	v, err := b.call(ctx, func(ctx context.Context) (any, error) { return fn(ctx) }, opts, mode{})
	t, _ := v.(T)
	return t, err
}

// mode adapts a call to its caller: Call or the RoundTripper.
type mode struct {
	// keepBody leaves the body of a final *http.Response open.
	keepBody bool
	// retryable decides whether an error from fn that no hook judged may
	// be retried; nil means unless it is a context error or Permanent.
	retryable func(error) bool
}

func (m mode) retryableErr(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || isPermanent(err) {
		return false
	}
	return m.retryable == nil || m.retryable(err)
}

// verdict is the judgement of one attempt.
type verdict struct {
	rateLimit *RateLimit
	failure   *Failure
}

// judge applies the rate-limit chain, then the error chain, each ending in
// the built-in rules.
func (c *caller) judge(v any, err error) verdict {
	for _, h := range c.set.rateLimit {
		if rl := h(v, err); rl != nil {
			return verdict{rateLimit: rl}
		}
	}
	if rl := httpRateLimit(v, time.Now()); rl != nil {
		return verdict{rateLimit: rl}
	}
	for _, h := range c.set.errorHooks {
		if f := h(v, err); f != nil {
			return verdict{failure: f}
		}
	}
	if err != nil {
		return verdict{failure: &Failure{Err: err, Retryable: c.mode.retryableErr(err)}}
	}
	return verdict{}
}

// call runs the attempts of one call, and counts it.
func (b *Bound) call(ctx context.Context, fn func(context.Context) (any, error), opts []Option, m mode) (any, error) {
	v, err := b.attempts(ctx, fn, opts, m)
	if b.reg != nil {
		b.reg.metrics.ended(b.lim.name, err)
	}
	return v, err
}

// attempts runs the attempts of one call.
func (b *Bound) attempts(ctx context.Context, fn func(context.Context) (any, error), opts []Option, m mode) (any, error) {
	var cs settings
	for _, o := range opts {
		o(&cs)
	}
	name := b.lim.name
	if checkName(name) != nil {
		return nil, noSuchLimiter(name)
	}
	if err := ctx.Err(); err != nil {
		return nil, context.Cause(ctx)
	}
	c := &caller{reg: b.reg, name: name, part: partition(name), set: resolve(b.lim.set, cs), mode: m}
	var last error        // the failure of the previous attempt
	waiting := time.Now() // since the call's start, or its previous attempt's end
	for attempt := 1; ; attempt++ {
		a, err := c.admit(ctx)
		if err != nil {
			if last != nil {
				return nil, &CallError{Limiter: name, Attempts: attempt - 1, Retryable: true, Err: errors.Join(last, err)}
			}
			return nil, err
		}
		retry := a.retry()
		b.reg.metrics.started(name, waiting)
		out := c.run(ctx, a, attempt, retry, fn)
		waiting = time.Now()
		if out.verdict.rateLimit != nil {
			b.reg.metrics.rateLimited(name)
		}
		v, vd := out.v, out.verdict
		final := func(retryable bool, err error) (any, error) {
			if !m.keepBody {
				closeBody(v)
			}
			return v, &CallError{Limiter: name, Attempts: attempt, Retryable: retryable, Err: err}
		}
		switch {
		case vd.rateLimit != nil:
			if attempt >= retry.Attempts {
				return final(true, ErrRateLimited)
			}
			discard(v)
			last = ErrRateLimited
			if !out.penalized { // pause this caller at least
				if err := sleep(ctx, out.pause); err != nil {
					return nil, &CallError{Limiter: name, Attempts: attempt, Retryable: true, Err: errors.Join(last, err)}
				}
			}
		case vd.failure != nil:
			f := vd.failure
			err := f.Err
			if err == nil {
				err = errors.New("the error hook reported a failure")
			}
			if !f.Retryable || attempt >= retry.Attempts {
				return final(f.Retryable, err)
			}
			discard(v)
			last = err
			if err := sleep(ctx, retry.Delay(attempt)); err != nil {
				return nil, &CallError{Limiter: name, Attempts: attempt, Retryable: true, Err: errors.Join(last, err)}
			}
		default:
			return v, out.err
		}
	}
}

// outcome is what one attempt came to.
type outcome struct {
	v       any
	err     error
	verdict verdict
	// pause is the pause a rate limit asked for, and penalized reports
	// whether it was recorded for every caller.
	pause     time.Duration
	penalized bool
}

// run runs fn under the admission a, judges what it returned and, for an
// upstream rate limit, pauses every caller of the limiter, then releases
// the lease. The pause is recorded before the lease frees, so that the
// caller the lease goes to next starts under it: released first, the
// lease would let that caller reach the upstream that has just asked for
// backoff while the pause is still on its way to the store.
func (c *caller) run(ctx context.Context, a *admission, attempt int, retry Retry, fn func(context.Context) (any, error)) (out outcome) {
	defer a.release(ctx)
	if c.set.onStart != nil {
		c.set.onStart(Start{Limiter: c.name, Attempt: attempt, Slot: time.UnixMilli(a.slot)})
	}
	out.v, out.err = fn(ctx)
	out.verdict = c.judge(out.v, out.err)
	if rl := out.verdict.rateLimit; rl != nil {
		out.pause = rl.RetryAfter
		if out.pause <= 0 {
			out.pause = retry.Delay(attempt)
		}
		out.penalized = c.penalize(ctx, a.cfg, out.pause)
	}
	return out
}

// penalize pauses every caller of the limiter for delay. It reports
// whether the pause was recorded.
func (c *caller) penalize(ctx context.Context, s stored, delay time.Duration) bool {
	ms := int64(math.Ceil(float64(delay) / float64(time.Millisecond)))
	ms = min(max(ms, 1), engine.MaxTTLMs)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	var out engine.StepResult
	err := patiently(ctx, true, func() error {
		return c.reg.eng.Apply(ctx, c.part, &out, s.pace(keyLog).Penalize(ms), penaltyPace().Penalize(ms))
	})
	if err != nil {
		c.reg.log.Warn("pace: could not record an upstream rate limit; only this caller pauses", "limiter", c.name, "err", err)
		return false
	}
	return true
}

// discard releases a value a retry replaces.
func discard(v any) {
	switch v := v.(type) {
	case *http.Response:
		closeBody(v)
	case io.Closer:
		_ = v.Close()
	}
}

// closeBody drains a little of a response's body, so that its connection
// can be reused, and closes it.
func closeBody(v any) {
	resp, ok := v.(*http.Response)
	if !ok || resp == nil || resp.Body == nil {
		return
	}
	_, _ = io.CopyN(io.Discard, resp.Body, 4<<10)
	_ = resp.Body.Close()
}
