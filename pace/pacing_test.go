package pace_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/pace"
)

// A rested limiter paces calls at exactly the limit: 120 calls at 5 per
// second from 40 concurrent callers start in 24 bursts of 5, one second
// apart, and no rolling second ever holds more than 5.
func TestPacesAtExactlyTheLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := pace.NewRegistry(newStore(t))
		configure(t, reg, "api", config(5, time.Second))
		api := pace.Define("api").Bind(reg)
		start := time.Now()
		var st starts
		var wg sync.WaitGroup
		for range 40 {
			wg.Go(func() {
				for range 3 {
					_, err := pace.Call(t.Context(), api, func(context.Context) (int, error) {
						st.add(since(start))
						return 0, nil
					})
					if err != nil {
						t.Error(err)
					}
				}
			})
		}
		wg.Wait()
		at := st.sorted()
		if len(at) != 120 {
			t.Fatalf("%d calls ran, want 120", len(at))
		}
		if got := maxInWindow(at, time.Second); got != 5 {
			t.Errorf("a rolling second held %d calls, want 5", got)
		}
		for i, d := range at {
			if want := time.Duration(i/5) * time.Second; d != want {
				t.Fatalf("call %d started at %v, want %v", i, d, want)
			}
		}
	})
}

// Many callers through a concurrency cap and a pacing log at once: the cap
// and the limit hold together.
func TestLimitAndCapHoldTogether(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := pace.NewRegistry(newStore(t))
		cfg := config(10, time.Second)
		cfg.Concurrency = 3
		configure(t, reg, "api", cfg)
		api := pace.Define("api").Bind(reg)
		start := time.Now()
		var st starts
		var running, peak atomic.Int64
		var wg sync.WaitGroup
		for i := range 30 {
			wg.Go(func() {
				_, err := pace.Call(t.Context(), api, func(context.Context) (int, error) {
					st.add(since(start))
					n := running.Add(1)
					for {
						p := peak.Load()
						if n <= p || peak.CompareAndSwap(p, n) {
							break
						}
					}
					time.Sleep(time.Duration(50+10*(i%7)) * time.Millisecond)
					running.Add(-1)
					return 0, nil
				})
				if err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		at := st.sorted()
		if len(at) != 30 {
			t.Fatalf("%d calls ran, want 30", len(at))
		}
		if got := maxInWindow(at, time.Second); got > 10 {
			t.Errorf("a rolling second held %d calls, limit 10", got)
		}
		if got := peak.Load(); got != 3 {
			t.Errorf("peak concurrency %d, want exactly the cap of 3", got)
		}
	})
}

// Three callers see 429s at once, with Retry-After 5 s, 60 s and 5 s:
// deadlines take the maximum, so every caller of the limiter — the three
// retrying and others arriving meanwhile — waits 60 seconds, not 5.
func TestConcurrentPenaltiesTakeTheMaximum(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := pace.NewRegistry(newStore(t))
		configure(t, reg, "api", config(10, time.Second))
		api := pace.Define("api").Bind(reg)
		start := time.Now()
		var st starts
		var wg sync.WaitGroup
		answer := make(chan struct{})
		for _, ra := range []string{"5", "60", "5"} {
			wg.Go(func() {
				first := true
				resp, err := pace.Call(t.Context(), api, func(context.Context) (*http.Response, error) {
					st.add(since(start))
					if first {
						first = false
						<-answer
						return response(http.StatusTooManyRequests, "Retry-After", ra), nil
					}
					return response(http.StatusOK), nil
				})
				if err != nil || resp.StatusCode != http.StatusOK {
					t.Errorf("call: %v", err)
				}
			})
		}
		synctest.Wait() // the three requests are in flight
		close(answer)
		synctest.Wait() // the three 429s are in and recorded
		if s, err := reg.Stats(t.Context(), "api"); err != nil || !s.PenaltyUntil.Equal(start.Add(60*time.Second)) {
			t.Errorf("penalty until %v (%v), want %v", s.PenaltyUntil, err, start.Add(60*time.Second))
		}
		time.Sleep(time.Second)
		for range 4 {
			wg.Go(func() {
				if _, err := pace.Call(t.Context(), api, func(context.Context) (int, error) {
					st.add(since(start))
					return 0, nil
				}); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		at := st.sorted()
		if len(at) != 3+3+4 {
			t.Fatalf("%d starts, want 10", len(at))
		}
		for _, d := range at[3:] {
			if d < 60*time.Second {
				t.Errorf("a call started at %v, before the 60 s deadline", d)
			}
		}
	})
}

// After a penalty the recovering window reopens with at most the refill
// fraction of the limit: 0, a half or all of 4.
func TestPenaltyReopensWithTheRefillFraction(t *testing.T) {
	for _, tc := range []struct {
		refill float64
		want   int // calls starting at the deadline
	}{{0, 0}, {0.5, 2}, {1, 4}} {
		t.Run(fmt.Sprint(tc.refill), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				reg := pace.NewRegistry(newStore(t))
				cfg := config(4, time.Second)
				cfg.RefillFraction = tc.refill
				configure(t, reg, "api", cfg)
				api := pace.Define("api").Bind(reg)
				start := time.Now()
				// One 429 (Retry-After 10 s) with the retry limited to one
				// attempt, then 8 callers waiting out the penalty.
				_, err := pace.Call(t.Context(), api, func(context.Context) (*http.Response, error) {
					return response(http.StatusTooManyRequests, "Retry-After", "10"), nil
				}, pace.WithRetry(pace.Retry{Attempts: 1}))
				if !errors.Is(err, pace.ErrRateLimited) {
					t.Fatalf("err = %v, want ErrRateLimited", err)
				}
				var st starts
				var wg sync.WaitGroup
				for range 8 {
					wg.Go(func() {
						if _, err := pace.Call(t.Context(), api, func(context.Context) (int, error) {
							st.add(since(start))
							return 0, nil
						}); err != nil {
							t.Error(err)
						}
					})
				}
				wg.Wait()
				at := st.sorted()
				n := 0
				for _, d := range at {
					if d < 10*time.Second {
						t.Fatalf("a call started at %v, before the deadline", d)
					}
					if d < 11*time.Second {
						n++
					}
				}
				if n != tc.want {
					t.Errorf("%d calls in the window reopening at the deadline, want %d (starts %v)", n, tc.want, at)
				}
				if got := maxInWindow(at, time.Second); got > 4 {
					t.Errorf("a rolling second held %d calls, limit 4", got)
				}
			})
		})
	}
}

// A slot reserved before a penalty arrived is checked when it comes: the
// penalty moves it past the deadline, never lets it run early.
func TestReservedSlotRunsAfterALaterPenalty(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := pace.NewRegistry(newStore(t))
		configure(t, reg, "api", config(2, 10*time.Second))
		api := pace.Define("api").Bind(reg)
		start := time.Now()
		release := make(chan struct{})
		var wg sync.WaitGroup
		// A and B take the window's two grants; A's upstream will answer
		// 429 with Retry-After 60 once C has reserved its slot at 10 s.
		wg.Go(func() {
			first := true
			_, err := pace.Call(t.Context(), api, func(context.Context) (*http.Response, error) {
				if first {
					first = false
					<-release
					return response(http.StatusTooManyRequests, "Retry-After", "60"), nil
				}
				return response(http.StatusOK), nil
			})
			if err != nil {
				t.Error(err)
			}
		})
		synctest.Wait()
		if _, err := pace.Call(t.Context(), api, func(context.Context) (int, error) { return 0, nil }); err != nil {
			t.Fatal(err)
		}
		var cAt time.Duration
		wg.Go(func() {
			if _, err := pace.Call(t.Context(), api, func(context.Context) (int, error) {
				cAt = since(start)
				return 0, nil
			}); err != nil {
				t.Error(err)
			}
		})
		synctest.Wait() // C sleeps on its reservation at 10 s
		if s, _ := reg.Stats(t.Context(), "api"); s.Waiting != 1 {
			t.Errorf("Stats.Waiting = %d, want C", s.Waiting)
		}
		close(release)
		wg.Wait()
		if cAt < 60*time.Second {
			t.Errorf("C started at %v, before the penalty's deadline at 60 s", cAt)
		}
	})
}

// A slot beyond MaxWait, or beyond the context's deadline, is refused at
// once: no time passes and nothing runs.
func TestWaitBeyondMaxWaitOrDeadlineIsRefusedAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := pace.NewRegistry(newStore(t))
		cfg := config(1, time.Minute)
		cfg.MaxWait = 30 * time.Second
		configure(t, reg, "api", cfg)
		api := pace.Define("api").Bind(reg)
		calls := 0
		if _, err := pace.Call(t.Context(), api, ok(0, &calls)); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		_, err := pace.Call(t.Context(), api, ok(0, &calls))
		var we *pace.WaitError
		if !errors.As(err, &we) || !errors.Is(err, pace.ErrWaitTooLong) || we.Wait != time.Minute || we.Limit != 30*time.Second {
			t.Fatalf("err = %#v, want a WaitError of 1m over 30s", err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		reconfigure(t, reg, "api", func(c *pace.Config) { c.MaxWait = time.Hour })
		_, err = pace.Call(ctx, api, ok(0, &calls))
		if !errors.As(err, &we) || we.Limit != 5*time.Second {
			t.Fatalf("err = %v, want a WaitError limited by the 5 s deadline", err)
		}
		if since(start) != 0 || calls != 1 {
			t.Errorf("refusals took %v and ran fn %d times, want 0 and 1", since(start), calls)
		}
	})
}

// A take sent again after the store failed it carries the wait the call
// allowed when it was first sent. The slot it brings back is checked
// against the context's deadline as it stands then: one beyond the
// deadline is refused at once, not slept on until the deadline.
func TestResentTakeIsRefusedAtOnceBeyondTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newStore(t)
		configure(t, pace.NewRegistry(store), "api", config(1, time.Second))
		other := pace.Define("api").Bind(pace.NewRegistry(store))
		calls := 0
		if _, err := pace.Call(t.Context(), other, ok(0, &calls)); err != nil { // the slot at 0
			t.Fatal(err)
		}
		start := time.Now()
		// The first take of this call fails before the store applies it;
		// it is a drop, sent again after the drop backoff (500 ms).
		failed := false
		link := &faultStore{Store: store, fail: func(b *engine.Batch) bool {
			if hasOp(b, engine.OpPaceTake) && !failed {
				failed = true
				return true
			}
			return false
		}}
		ctx, cancel := context.WithTimeout(t.Context(), 1600*time.Millisecond)
		defer cancel()
		var wg sync.WaitGroup
		var err error
		var at time.Duration
		wg.Go(func() {
			_, err = pace.Call(ctx, pace.Define("api").Bind(pace.NewRegistry(link)), ok(0, &calls))
			at = since(start)
		})
		// Meanwhile another call reserves the slot at 1 s: the next is at
		// 2 s, 400 ms past the deadline.
		time.Sleep(100 * time.Millisecond)
		wg.Go(func() {
			if _, err := pace.Call(t.Context(), other, ok(0, &calls)); err != nil {
				t.Error(err)
			}
		})
		wg.Wait()
		var we *pace.WaitError
		if !errors.As(err, &we) || we.Wait != 1500*time.Millisecond || we.Limit != 1100*time.Millisecond {
			t.Fatalf("err = %v, want a WaitError of 1.5s over the 1.1s left before the deadline", err)
		}
		if at != 500*time.Millisecond || calls != 2 {
			t.Errorf("refused at %v with %d calls run, want at 500ms, when the take came back, with 2", at, calls)
		}
	})
}

// The same holds for a claim whose slot a penalty moved: sent again after
// the store failed it, the claim moves the slot within the wait allowed
// when it was first sent, and a slot beyond the deadline as it stands
// when the answer comes is refused at once.
func TestResentClaimIsRefusedAtOnceBeyondTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newStore(t)
		cfg := config(1, time.Second)
		cfg.RefillFraction = 1
		configure(t, pace.NewRegistry(store), "api", cfg)
		start := time.Now()
		var wg sync.WaitGroup
		// The slot at 0: a call that meets a 429 at 500 ms, Retry-After 1 s.
		wg.Go(func() {
			pace.Call(t.Context(), pace.Define("api").Bind(pace.NewRegistry(store)), func(context.Context) (*http.Response, error) {
				time.Sleep(500 * time.Millisecond)
				return response(http.StatusTooManyRequests, "Retry-After", "1"), nil
			}, pace.WithRetry(pace.Retry{Attempts: 1}))
		})
		synctest.Wait()
		// This call reserves the slot at 1 s; the penalty moves it to 1.5 s.
		// Its claim fails four times before the store applies it, and is
		// answered at 1.15 s, when 250 ms are left before its deadline.
		failures := 0
		link := &faultStore{Store: store, fail: func(b *engine.Batch) bool {
			if hasOp(b, engine.OpPaceClaim) && !hasOp(b, engine.OpPaceTake) && failures < 4 {
				failures++
				return true
			}
			return false
		}}
		ctx, cancel := context.WithTimeout(t.Context(), 1400*time.Millisecond)
		defer cancel()
		calls := 0
		_, err := pace.Call(ctx, pace.Define("api").Bind(pace.NewRegistry(link)), ok(0, &calls))
		at := since(start)
		wg.Wait()
		var we *pace.WaitError
		if !errors.As(err, &we) || we.Wait != 350*time.Millisecond || we.Limit != 250*time.Millisecond {
			t.Fatalf("err = %v, want a WaitError of 350ms over the 250ms left before the deadline", err)
		}
		if at != 1150*time.Millisecond || calls != 0 {
			t.Errorf("refused at %v with fn run %d times, want at 1.15s, when the claim came back, and never", at, calls)
		}
	})
}

// A limiter with nothing waiting holds no goroutine and no timer: once a
// burst of calls that queued for the lease and waited for slots is done,
// no goroutine of the package is left (every timer of the package belongs
// to a goroutine of a call), and time stands still.
func TestIdleLimiterHoldsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newStore(t)
		cfg := config(2, time.Second)
		cfg.Concurrency = 1
		configure(t, pace.NewRegistry(store), "api", cfg)
		var wg sync.WaitGroup
		for p := range 2 {
			api := pace.Define("api").Bind(pace.NewRegistry(store))
			for range 3 {
				wg.Go(func() {
					if _, err := pace.Call(t.Context(), api, func(context.Context) (int, error) {
						time.Sleep(time.Duration(100*(p+1)) * time.Millisecond)
						return 0, nil
					}); err != nil {
						t.Error(err)
					}
				})
			}
		}
		wg.Wait()
		start := time.Now()
		synctest.Wait()
		if left := paceGoroutines(); len(left) != 0 || since(start) != 0 {
			t.Errorf("idle: %v passed, and goroutines of the package are left:\n%s", since(start), strings.Join(left, "\n\n"))
		}
	})
}

// paceGoroutines returns the stacks of the goroutines running code of
// package pace (its tests' own code aside).
func paceGoroutines() []string {
	buf := make([]byte, 1<<20)
	var left []string
	for g := range strings.SplitSeq(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
		if strings.Contains(g, "sluicehq/sluice/pace.") {
			left = append(left, g)
		}
	}
	return left
}

// Waiting callers are served in order: a caller arriving later never
// starts before one already waiting.
func TestLaterCallersNeverOvertakeWaitingOnes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := pace.NewRegistry(newStore(t))
		configure(t, reg, "api", config(2, time.Second))
		api := pace.Define("api").Bind(reg)
		var mu sync.Mutex
		var order []int
		var wg sync.WaitGroup
		for i := range 12 {
			wg.Go(func() {
				if _, err := pace.Call(t.Context(), api, func(context.Context) (int, error) {
					mu.Lock()
					order = append(order, i)
					mu.Unlock()
					return 0, nil
				}); err != nil {
					t.Error(err)
				}
			})
			time.Sleep(100 * time.Millisecond) // arrivals every 100 ms
		}
		wg.Wait()
		for i, got := range order {
			if got != i {
				t.Fatalf("callers started in the order %v, want their order of arrival", order)
			}
		}
	})
}

// A pause shorter than the window keeps the grants still inside it: the
// window it reopens never holds more than the limit.
func TestShortPauseNeverOverAdmits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := pace.NewRegistry(newStore(t))
		configure(t, reg, "api", config(4, time.Second))
		api := pace.Define("api").Bind(reg)
		start := time.Now()
		var st starts
		record := func(context.Context) (int, error) {
			st.add(since(start))
			return 0, nil
		}
		for range 3 {
			pace.Call(t.Context(), api, record)
		}
		pace.Call(t.Context(), api, func(ctx context.Context) (int, error) {
			record(ctx)
			return 0, errors.New("slow down")
		}, pace.WithRateLimitHook(func(any, error) *pace.RateLimit { return &pace.RateLimit{RetryAfter: time.Millisecond} }),
			pace.WithRetry(pace.Retry{Attempts: 1}))
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() { pace.Call(t.Context(), api, record) })
		}
		wg.Wait()
		at := st.sorted()
		if got := maxInWindow(at, time.Second); got > 4 {
			t.Errorf("a rolling second held %d calls after a 1 ms pause, limit 4 (starts %v)", got, at)
		}
		if len(at) != 12 {
			t.Errorf("%d calls ran, want 12", len(at))
		}
	})
}

// Stats reports what a caller would meet: while a penalty is in force no
// call could start, so nothing remains; at its deadline the window reopens
// with the refill fraction of the limit.
func TestStatsDuringAPenalty(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := pace.NewRegistry(newStore(t))
		configure(t, reg, "api", config(4, time.Second))
		api := pace.Define("api").Bind(reg)
		start := time.Now()
		_, err := pace.Call(t.Context(), api, func(context.Context) (*http.Response, error) {
			return response(http.StatusTooManyRequests, "Retry-After", "10"), nil
		}, pace.WithRetry(pace.Retry{Attempts: 1}))
		if !errors.Is(err, pace.ErrRateLimited) {
			t.Fatalf("err = %v, want ErrRateLimited", err)
		}
		time.Sleep(5 * time.Second)
		s, err := reg.Stats(t.Context(), "api")
		if err != nil || s.Remaining != 0 || !s.PenaltyUntil.Equal(start.Add(10*time.Second)) {
			t.Errorf("during the penalty: remaining %d, penalty until %v (%v); want 0 until 10 s", s.Remaining, s.PenaltyUntil.Sub(start), err)
		}
		time.Sleep(5 * time.Second)
		s, err = reg.Stats(t.Context(), "api")
		if err != nil || s.Remaining != 2 || !s.PenaltyUntil.IsZero() {
			t.Errorf("at the deadline: remaining %d, penalty until %v (%v); want 2 and none", s.Remaining, s.PenaltyUntil, err)
		}
	})
}

// Slots reserved before a penalty and moved by it reopen the recovering
// window like any other caller: with at most the refill fraction of the
// limit. Four calls fill a window of 4 per 10 s, four more reserve slots
// at 10 s, and a 429 at 1 s pauses the limiter until 15 s: the four
// moved callers never start before 15 s, and at most two of them start
// in the window reopening there.
func TestMovedSlotsReopenWithTheRefillFraction(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := pace.NewRegistry(newStore(t))
		configure(t, reg, "api", config(4, 10*time.Second))
		api := pace.Define("api").Bind(reg)
		start := time.Now()
		release := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			_, err := pace.Call(t.Context(), api, func(context.Context) (*http.Response, error) {
				<-release
				return response(http.StatusTooManyRequests, "Retry-After", "14"), nil
			}, pace.WithRetry(pace.Retry{Attempts: 1}))
			if !errors.Is(err, pace.ErrRateLimited) {
				t.Errorf("err = %v, want ErrRateLimited", err)
			}
		})
		synctest.Wait()
		for range 3 {
			if _, err := pace.Call(t.Context(), api, func(context.Context) (int, error) { return 0, nil }); err != nil {
				t.Fatal(err)
			}
		}
		var st starts
		for range 4 {
			wg.Go(func() {
				if _, err := pace.Call(t.Context(), api, func(context.Context) (int, error) {
					st.add(since(start))
					return 0, nil
				}); err != nil {
					t.Error(err)
				}
			})
		}
		synctest.Wait() // four callers sleep on their slots at 10 s
		time.Sleep(time.Second)
		close(release) // the 429 arrives at 1 s
		wg.Wait()
		at := st.sorted()
		if len(at) != 4 {
			t.Fatalf("%d calls ran, want 4", len(at))
		}
		n := 0
		for _, d := range at {
			if d < 15*time.Second {
				t.Fatalf("a moved call started at %v, before the deadline (starts %v)", d, at)
			}
			if d < 25*time.Second {
				n++
			}
		}
		if n > 2 {
			t.Errorf("%d moved calls started in the window reopening at 15 s, want at most 2 of its 4 (starts %v)", n, at)
		}
	})
}
