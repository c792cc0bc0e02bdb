package pace_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/pace"
)

// bound returns a limiter named "api", configured with a generous rate and
// the default retry policy (4 attempts, 500 ms doubling), defined with
// opts.
func bound(t *testing.T, opts ...pace.Option) (*pace.Bound, *pace.Registry) {
	t.Helper()
	reg := pace.NewRegistry(newStore(t))
	configure(t, reg, "api", config(100, time.Second))
	return pace.Define("api", opts...).Bind(reg), reg
}

// attempts records when each attempt of fn started.
type attempts struct {
	start time.Time
	at    []time.Duration
}

func (a *attempts) fn(answers ...*http.Response) func(context.Context) (*http.Response, error) {
	a.start = time.Now()
	return func(context.Context) (*http.Response, error) {
		a.at = append(a.at, since(a.start))
		return answers[min(len(a.at), len(answers))-1], nil
	}
}

// A 4xx other than 429 is an answer, not a failure: it is returned as it
// is, once.
func TestClientErrorIsNotRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api, _ := bound(t)
		for _, status := range []int{400, 401, 403, 404, 409, 422} {
			var a attempts
			resp, err := pace.Call(t.Context(), api, a.fn(response(status)))
			if err != nil || resp.StatusCode != status || len(a.at) != 1 {
				t.Errorf("%d: status %d, err %v, %d attempts; want it once, as it is", status, resp.StatusCode, err, len(a.at))
			}
		}
	})
}

// A 429 without Retry-After is retried after the backoff — floor, then
// floor·factor, … — which also pauses every caller; when the attempts run
// out the last response comes back, its body closed, with ErrRateLimited.
func TestTooManyRequestsIsRetriedWithBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api, reg := bound(t)
		var a attempts
		last := response(http.StatusTooManyRequests)
		resp, err := pace.Call(t.Context(), api, a.fn(response(429), response(429), response(429), last))
		want := []time.Duration{0, 500 * time.Millisecond, 1500 * time.Millisecond, 3500 * time.Millisecond}
		if !slices.Equal(a.at, want) {
			t.Errorf("attempts at %v, want %v", a.at, want)
		}
		var ce *pace.CallError
		if !errors.Is(err, pace.ErrRateLimited) || !errors.As(err, &ce) || ce.Attempts != 4 {
			t.Fatalf("err = %v, want a CallError after 4 attempts wrapping ErrRateLimited", err)
		}
		if resp != last || !last.Body.(*trackedBody).isClosed() {
			t.Error("the last response is not returned with its body closed")
		}
		// The last 429 paused the limiter too (backoff 4 s).
		s, err := reg.Stats(t.Context(), "api")
		if err != nil || !s.PenaltyUntil.Equal(a.start.Add(3500*time.Millisecond+4*time.Second)) {
			t.Errorf("penalty until %v (%v), want 7.5 s after the start", s.PenaltyUntil, err)
		}
	})
}

// Retry-After is honoured in seconds and as an HTTP date.
func TestTooManyRequestsHonoursRetryAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api, _ := bound(t)
		var a attempts
		date := time.Now().Add(20 * time.Second).UTC().Format(http.TimeFormat)
		resp, err := pace.Call(t.Context(), api, a.fn(
			response(429, "Retry-After", "7"),
			response(429, "Retry-After", date),
			response(200)))
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("status %v, err %v", resp, err)
		}
		want := []time.Duration{0, 7 * time.Second, 20 * time.Second}
		if !slices.Equal(a.at, want) {
			t.Errorf("attempts at %v, want %v", a.at, want)
		}
	})
}

// A retryable failure (fn's error) is retried with backoff, capped at the
// ceiling; the retry policy is refined per call over the limiter's.
func TestFailureIsRetriedWithBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api, reg := bound(t)
		reconfigure(t, reg, "api", func(c *pace.Config) { c.Retry = pace.Retry{Ceiling: 3 * time.Second} })
		start := time.Now()
		var at []time.Duration
		boom := errors.New("connection reset")
		_, err := pace.Call(t.Context(), api, func(context.Context) (int, error) {
			at = append(at, since(start))
			return 0, boom
		}, pace.WithRetry(pace.Retry{Attempts: 5, Factor: 3}))
		// Floor 500 ms (default), factor 3 (call), ceiling 3 s (limiter).
		want := []time.Duration{0, 500 * time.Millisecond, 2 * time.Second, 5 * time.Second, 8 * time.Second}
		if !slices.Equal(at, want) {
			t.Errorf("attempts at %v, want %v", at, want)
		}
		var ce *pace.CallError
		if !errors.Is(err, boom) || !errors.As(err, &ce) || ce.Attempts != 5 || !ce.Retryable {
			t.Errorf("err = %v, want a retryable CallError after 5 attempts wrapping fn's error", err)
		}
		if s, _ := reg.Stats(t.Context(), "api"); !s.PenaltyUntil.IsZero() {
			t.Error("a failure paused the limiter; only a rate limit should")
		}
	})
}

// An error marked Permanent, or a context error, fails at once.
func TestPermanentFailureIsNotRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api, _ := bound(t)
		for _, e := range []error{pace.Permanent(errors.New("bad input")), context.Canceled} {
			calls := 0
			_, err := pace.Call(t.Context(), api, func(context.Context) (int, error) {
				calls++
				return 0, e
			})
			var ce *pace.CallError
			if !errors.As(err, &ce) || ce.Retryable || calls != 1 {
				t.Errorf("%v: %d calls, err %v; want one call and a final CallError", e, calls, err)
			}
		}
	})
}

// quotaInBody recognises an upstream that reports its rate limit in a 200
// body; failedInBody one that reports failures there.
func quotaInBody(v any, err error) *pace.RateLimit {
	if r, ok := v.(*http.Response); ok && r.Header.Get("X-Quota") == "exceeded" {
		return &pace.RateLimit{RetryAfter: time.Minute}
	}
	return nil
}

func failedInBody(retryable bool) pace.ErrorHook {
	return func(v any, err error) *pace.Failure {
		if r, ok := v.(*http.Response); ok && r.Header.Get("X-Error") != "" {
			return &pace.Failure{Err: errors.New(r.Header.Get("X-Error")), Retryable: retryable}
		}
		return nil
	}
}

// Hooks resolve call site → limiter default → built-in HTTP rules, each
// falling through on nil; an explicit nil at the call site opts out of the
// limiter's hook; the HTTP rules always apply.
func TestHooksResolveInLayers(t *testing.T) {
	quota := response(200, "X-Quota", "exceeded")
	broken := response(200, "X-Error", "upstream says no")
	tooMany := response(429, "Retry-After", "2")
	for _, tc := range []struct {
		name    string
		opts    []pace.Option
		answer  *http.Response
		retry   time.Duration // when the second attempt ran; 0: there was none
		penalty bool          // the first answer paused the limiter
		failure bool          // the call fails
	}{
		{"limiter hook", nil, quota, time.Minute, true, false},
		{"limiter hook, call hook falls through", []pace.Option{pace.WithRateLimitHook(func(any, error) *pace.RateLimit { return nil })}, quota, time.Minute, true, false},
		{"call hook first", []pace.Option{pace.WithRateLimitHook(func(v any, err error) *pace.RateLimit {
			if quotaInBody(v, err) != nil {
				return &pace.RateLimit{RetryAfter: 3 * time.Second}
			}
			return nil
		})}, quota, 3 * time.Second, true, false},
		{"call opts out", []pace.Option{pace.WithRateLimitHook(nil)}, quota, 0, false, false},
		{"HTTP rules still apply", []pace.Option{pace.WithRateLimitHook(nil), pace.WithErrorHook(nil)}, tooMany, 2 * time.Second, true, false},
		{"limiter error hook, final", nil, broken, 0, false, true},
		{"call error hook, retryable", []pace.Option{pace.WithErrorHook(failedInBody(true))}, broken, 500 * time.Millisecond, false, false},
		{"call opts out of error hook", []pace.Option{pace.WithErrorHook(nil)}, broken, 0, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				api, reg := bound(t, pace.WithRateLimitHook(quotaInBody), pace.WithErrorHook(failedInBody(false)))
				var a attempts
				var wg sync.WaitGroup
				wg.Go(func() {
					_, err := pace.Call(t.Context(), api, a.fn(tc.answer, response(200)), tc.opts...)
					if (err != nil) != tc.failure || (tc.failure && !errors.Is(err, pace.ErrCallFailed)) {
						t.Errorf("err = %v, want failure %v", err, tc.failure)
					}
				})
				synctest.Wait() // the first answer is judged
				s, _ := reg.Stats(t.Context(), "api")
				if penalty := !s.PenaltyUntil.IsZero(); penalty != tc.penalty {
					t.Errorf("the limiter paused: %v, want %v", penalty, tc.penalty)
				}
				wg.Wait()
				var retry time.Duration
				if len(a.at) > 1 {
					retry = a.at[1]
				}
				if retry != tc.retry {
					t.Errorf("second attempt at %v, want %v (attempts %v)", retry, tc.retry, a.at)
				}
			})
		})
	}
}

// A rate limit hidden in a body pauses every caller, like a 429.
func TestRateLimitHookPausesEveryCaller(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := pace.NewRegistry(newStore(t))
		configure(t, reg, "api", config(100, time.Second))
		a := pace.Define("api", pace.WithRateLimitHook(quotaInBody)).Bind(reg)
		other := pace.Define("api").Bind(reg) // another call site, without the hook
		start := time.Now()
		var wg sync.WaitGroup
		wg.Go(func() {
			var at attempts
			pace.Call(t.Context(), a, at.fn(response(200, "X-Quota", "exceeded"), response(200)))
		})
		synctest.Wait()
		var at time.Duration
		pace.Call(t.Context(), other, func(context.Context) (int, error) {
			at = since(start)
			return 0, nil
		})
		wg.Wait()
		if at < time.Minute {
			t.Errorf("another caller ran at %v, inside the minute the upstream asked for", at)
		}
	})
}

// fn is called afresh for each retry: a closure over a consumed body is
// the caller's bug, and a fresh request per attempt works.
func TestFnIsCalledAfreshForEachRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api, _ := bound(t)
		var bodies []string
		n := 0
		_, err := pace.Call(t.Context(), api, func(context.Context) (*http.Response, error) {
			n++
			body := strings.NewReader(fmt.Sprintf(`{"attempt":%d}`, n)) // built per attempt
			b := make([]byte, body.Len())
			body.Read(b)
			bodies = append(bodies, string(b))
			if n < 3 {
				return response(503), errors.New("unavailable")
			}
			return response(200), nil
		})
		if err != nil || !slices.Equal(bodies, []string{`{"attempt":1}`, `{"attempt":2}`, `{"attempt":3}`}) {
			t.Errorf("err %v, bodies %q", err, bodies)
		}
	})
}

// slowLink delivers the answers of a store d after the store applied
// each batch: a process far from the store, or on a congested link.
type slowLink struct {
	engine.Store
	d time.Duration
}

func (s *slowLink) Apply(ctx context.Context, b *engine.Batch, out *engine.StepResult) error {
	err := s.Store.Apply(ctx, b, out)
	time.Sleep(s.d)
	return err
}

// A 429 pauses the limiter before the lease of the call that saw it frees:
// the caller the lease goes to next starts after the pause, even when the
// caller that saw the 429 hears slowly from the store. Here it hears every
// answer 100 ms late; a caller arriving 50 ms after the 429 finds the
// lease taken, and starts when the 10 s pause ends, not at once.
func TestRateLimitPausesBeforeTheLeaseFrees(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newStore(t)
		configure(t, pace.NewRegistry(store), "api", capped(1, 10*time.Second))
		far := pace.Define("api").Bind(pace.NewRegistry(&slowLink{Store: store, d: 100 * time.Millisecond}))
		near := pace.Define("api").Bind(pace.NewRegistry(store))
		var limited time.Time
		answered := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			_, err := pace.Call(t.Context(), far, func(context.Context) (*http.Response, error) {
				time.Sleep(time.Second)
				limited = time.Now()
				close(answered)
				return response(http.StatusTooManyRequests, "Retry-After", "10"), nil
			}, pace.WithRetry(pace.Retry{Attempts: 1}))
			if !errors.Is(err, pace.ErrRateLimited) {
				t.Errorf("the call that saw the 429: %v, want ErrRateLimited", err)
			}
		})
		<-answered
		time.Sleep(50 * time.Millisecond)
		var started time.Time
		if _, err := pace.Call(t.Context(), near, func(context.Context) (int, error) {
			started = time.Now()
			return 0, nil
		}); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		if got := started.Sub(limited); got < 10*time.Second {
			t.Errorf("the next caller started %v after the 429, inside its 10 s pause", got)
		}
	})
}
