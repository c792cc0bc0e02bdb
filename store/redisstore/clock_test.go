package redisstore_test

import (
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/testclock"
	"github.com/sluicehq/sluice/store/redisstore"
)

// TestRedisClock shows that a store without Config.Clock sends no time —
// the clock argument of every call it sends is empty, as a go-redis hook
// sees it — and that the batch code then reads Redis TIME: a log window's
// hit resets one window after the instant it was admitted, and that
// instant lies between Redis TIME read just before the call and just
// after it. So for a lone hit, a batch of several commands and a joint
// step, by functions and by scripts. With Config.Clock set, the store
// sends the clock's reading and the reset follows it instead, far from
// Redis's time (which shows the hook reads the right argument).
func TestRedisClock(t *testing.T) {
	const windowMs = 60_000
	srv := redistest.Start(t)
	raw := srv.Client(t)
	redisMs := func() int64 {
		t.Helper()
		now, err := raw.Time(t.Context()).Result()
		if err != nil {
			t.Fatal(err)
		}
		return now.UnixMilli() // the batch code's reading: seconds and whole milliseconds of TIME
	}
	win := engine.Window{Key: "w", Kind: algo.KindLog, Limit: 100, WindowMs: windowMs}
	// Each shape answers the reset of its hits.
	shapes := map[string]func(t *testing.T, s *redisstore.Store) []int64{
		"lone hit": func(t *testing.T, s *redisstore.Store) []int64 {
			var out engine.StepResult
			if err := s.Apply(t.Context(), &engine.Batch{Partition: "p", Commands: []engine.Command{engine.Hit(1, win)}}, &out); err != nil {
				t.Fatal(err)
			}
			return []int64{out.Results[0].ResetAt}
		},
		"batch": func(t *testing.T, s *redisstore.Store) []int64 {
			var out engine.StepResult
			b := &engine.Batch{Partition: "p", Commands: []engine.Command{engine.Incr("n", 1, windowMs), engine.Hit(1, win)}}
			if err := s.Apply(t.Context(), b, &out); err != nil {
				t.Fatal(err)
			}
			return []int64{out.Results[1].ResetAt}
		},
		"joint step": func(t *testing.T, s *redisstore.Store) []int64 {
			outs := make([]engine.StepResult, 2)
			bs := []*engine.Batch{
				{Partition: "p", Commands: []engine.Command{engine.Hit(1, win)}},
				{Partition: "q", Commands: []engine.Command{engine.Hit(1, win)}},
			}
			if err := s.ApplyJoint(t.Context(), bs, outs); err != nil {
				t.Fatal(err)
			}
			return []int64{outs[0].Results[0].ResetAt, outs[1].Results[0].ResetAt}
		},
	}
	for _, scripts := range []bool{false, true} {
		hook := &batchCalls{}
		client := redis.NewClient(srv.Options())
		client.AddHook(hook)
		s, err := redisstore.New(client, freshConfig(nil))
		if err != nil {
			t.Fatal(err)
		}
		if scripts {
			redisstore.UseScripts(s)
		}
		for name, run := range shapes {
			before := redisMs()
			resets := run(t, s)
			after := redisMs()
			calls := hook.take()
			if len(calls) == 0 {
				t.Errorf("%s (scripts %t): no call of the batch code seen", name, scripts)
			}
			for _, c := range calls {
				if c.clock != "" {
					t.Errorf("%s (scripts %t): the store sent the clock %q in its %s, want none", name, scripts, c.clock, c.name)
				}
			}
			for _, reset := range resets {
				if at := reset - windowMs; at < before || at > after {
					t.Errorf("%s (scripts %t): admitted at %d by its reset, outside Redis TIME %d…%d", name, scripts, at, before, after)
				}
			}
		}
		s.Close()
	}

	// A set clock, a day behind Redis's: sent, and followed.
	at := redisMs() - 86_400_000
	hook := &batchCalls{}
	client := redis.NewClient(srv.Options())
	client.AddHook(hook)
	s, err := redisstore.New(client, freshConfig(testclock.At(at)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	resets := shapes["lone hit"](t, s)
	if calls := hook.take(); len(calls) == 0 || calls[0].clock != strconv.FormatInt(at, 10) {
		t.Errorf("with Config.Clock at %d the store sent %+v", at, calls)
	}
	if resets[0] != at+windowMs {
		t.Errorf("with Config.Clock at %d the hit resets at %d, want %d", at, resets[0], at+windowMs)
	}
}
