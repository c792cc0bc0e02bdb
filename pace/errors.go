package pace

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/engine"
)

// Sentinel errors. Every error of this package wraps one of these (or a
// store's engine error); branch on them with errors.Is.
var (
	// ErrNoSuchLimiter reports a limiter name that was never configured (or
	// is not a valid name, so could never be). It is returned at once: it is
	// never retried and never counted as a drop, because retrying cannot make
	// the limiter exist. It is almost always a mistyped name.
	ErrNoSuchLimiter = errors.New("pace: no such limiter")

	// ErrDropped reports a call that never started: the store failed before
	// fn could run, and every drop retry was spent (the error also wraps the
	// last store error), or the call's grants kept reaching it more than
	// the limiter's StartTolerance after their slots (see
	// Config.StartTolerance). fn did not run, so retrying the call is
	// always safe.
	ErrDropped = errors.New("pace: call dropped before it started")

	// ErrWaitTooLong reports a call refused because its slot (or its slot
	// moved by a penalty) lies further away than the limiter's MaxWait or
	// the context's deadline. fn did not run. The error is a *WaitError.
	ErrWaitTooLong = errors.New("pace: wait too long")

	// ErrReconfigured reports a waiting call rejected because its limiter
	// was configured again while it waited: its wait was measured against
	// limits that no longer exist. fn did not run.
	ErrReconfigured = errors.New("pace: limiter reconfigured while waiting")

	// ErrRateLimited is wrapped by the *CallError of a call whose last
	// attempt was still rate limited by the upstream when its attempts ran
	// out.
	ErrRateLimited = errors.New("pace: rate limited by the upstream")

	// ErrCallFailed is wrapped by every *CallError: fn ran, and its last
	// attempt failed (fn's error, or an error hook's verdict), or was still
	// rate limited.
	ErrCallFailed = errors.New("pace: call failed")

	// ErrInvalidConfig is wrapped by every error of Config.Validate and of a
	// Registry method given a bad name or configuration. Nothing was
	// changed.
	ErrInvalidConfig = errors.New("pace: invalid configuration")
)

// WaitError is the error of a call refused because it would have had to wait
// too long. It wraps ErrWaitTooLong.
type WaitError struct {
	// Limiter names the limiter.
	Limiter string
	// Wait is how long the call would have had to wait for its slot, by the
	// store's clock: a caller may try again after it.
	Wait time.Duration
	// Limit is the longest wait that was acceptable: the limiter's MaxWait,
	// or the time left before the context's deadline if that was shorter.
	Limit time.Duration
}

// Error names the limiter, the wait and the longest acceptable wait.
func (e *WaitError) Error() string {
	return fmt.Sprintf("pace: limiter %q: the next slot is %v away, more than the %v the call may wait", e.Limiter, e.Wait, e.Limit)
}

// Unwrap returns ErrWaitTooLong.
func (e *WaitError) Unwrap() error { return ErrWaitTooLong }

// CallError is the error of a call whose fn ran and whose last attempt
// failed. It wraps ErrCallFailed and the failure: fn's own error, the error
// an error hook reported, or ErrRateLimited.
type CallError struct {
	// Limiter names the limiter.
	Limiter string
	// Attempts is the number of times fn ran.
	Attempts int
	// Retryable reports whether the failure was retryable: it was, if the
	// call ran out of attempts rather than meeting a final failure.
	Retryable bool
	// Err is the failure of the last attempt.
	Err error
}

// Error names the limiter, the attempts made and the last failure.
func (e *CallError) Error() string {
	return fmt.Sprintf("pace: limiter %q: call failed after %d attempt(s): %v", e.Limiter, e.Attempts, e.Err)
}

// Unwrap returns ErrCallFailed and the failure.
func (e *CallError) Unwrap() []error { return []error{ErrCallFailed, e.Err} }

// Permanent marks err as a failure that retrying cannot fix: returned by fn,
// it makes the call fail at once instead of being retried. Errors and
// verdicts of an error hook take precedence. Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err}
}

type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// isPermanent reports whether err was marked with Permanent.
func isPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}

// isDrop reports whether a store error met before fn started is worth
// retrying: the store was unreachable, failed or was full, or failed in a
// way this package does not know. Errors that retrying cannot fix (a bad
// request, a record of the wrong kind, corrupt state, a closed store) and
// this package's own verdicts are not drops.
func isDrop(err error) bool {
	for _, final := range []error{
		ErrNoSuchLimiter, ErrReconfigured, ErrWaitTooLong, ErrInvalidConfig, ErrDropped,
		engine.ErrInvalid, engine.ErrWrongType, engine.ErrOverflow, engine.ErrCorrupt,
		engine.ErrClosed, engine.ErrOperationConflict,
		context.Canceled, context.DeadlineExceeded,
	} {
		if errors.Is(err, final) {
			return false
		}
	}
	return true
}

func noSuchLimiter(name string) error {
	return fmt.Errorf("%w: %q (configure it first; a mistyped name is the usual cause)", ErrNoSuchLimiter, name)
}
