package redisstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"pgregory.net/rapid"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/testclock"
	"github.com/sluicehq/sluice/store/redisstore"
	"github.com/sluicehq/sluice/store/storetest"
)

// TestMirror holds the Lua script to the Go executor beyond the conformance
// scripts: random requests, with the clock moving forwards and backwards,
// run on the Redis store and on engine.Executor (over algo) at the same
// instants, must give the same results and the same errors. The numbers
// reach the bounds (limits of 2^40, windows of 120 days, counters at the
// ends of int64), where the script's exact arithmetic replaces Go's 64- and
// 128-bit integers.
func TestMirror(t *testing.T) {
	srv := redistest.Start(t)
	rapid.Check(t, func(rt *rapid.T) {
		clock := testclock.At(storetest.DefaultEpoch)
		rs, err := redisNew(srv, clock)
		if err != nil {
			rt.Fatal(err)
		}
		defer rs.Close()
		want, got := engine.New(&refStore{clock: clock}), engine.New(rs)

		for i := range rapid.IntRange(1, 40).Draw(rt, "requests") {
			clock.Advance(drawStep(rt))
			req := drawRequest(rt)
			rt.Logf("request %d at %d: %s", i, engine.UnixMilli(clock)-storetest.DefaultEpoch, describe(req))
			wr, werr := want.Do(rt.Context(), req)
			gr, gerr := got.Do(rt.Context(), req)
			if !sameError(werr, gerr) {
				rt.Fatalf("request %d %s:\n\texecutor error: %v\n\tredis error:    %v", i, describe(req), werr, gerr)
			}
			if !sameResponse(wr, gr) {
				rt.Fatalf("request %d %s:\n\texecutor: %+v\n\tredis:    %+v", i, describe(req), wr, gr)
			}
		}
	})
}

// refStore runs engine.Executor over a plain map that keeps every record
// until it is overwritten or deleted. Stores remove expired records at
// times of their own choosing, which a clock stepping back can tell apart;
// the Redis store under an overriding clock removes none during a test, and
// neither does refStore.
type refStore struct {
	mu    sync.Mutex
	clock engine.Clock
	recs  map[string]engine.Record // partition + NUL + key
	part  string
	exec  engine.Executor
}

func (s *refStore) Get(key string) (engine.Record, bool) {
	r, ok := s.recs[s.part+"\x00"+key]
	return r, ok
}

func (s *refStore) Apply(_ context.Context, b *engine.Batch, out *engine.StepResult) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.recs == nil {
		s.recs = map[string]engine.Record{}
	}
	s.part = b.Partition
	writes, err := s.exec.Run(s, engine.UnixMilli(s.clock), b, out)
	if err != nil {
		return err
	}
	for _, w := range writes {
		if w.Delete {
			delete(s.recs, s.part+"\x00"+w.Key)
			continue
		}
		w.Rec.Data = bytes.Clone(w.Rec.Data)
		s.recs[s.part+"\x00"+w.Key] = w.Rec
	}
	return nil
}

func (s *refStore) Close() error { return nil }

func redisNew(srv *redistest.Server, clock engine.Clock) (*redisstore.Store, error) {
	return redisstore.New(redis.NewClient(srv.Options()), freshConfig(clock))
}

var sentinels = []error{
	engine.ErrInvalid, engine.ErrWrongType, engine.ErrOverflow, engine.ErrOperationConflict,
	engine.ErrCapacity, engine.ErrCorrupt, engine.ErrClosed, engine.ErrUnavailable,
}

// sameError reports whether a and b are both nil or wrap the same sentinel.
func sameError(a, b error) bool {
	if (a == nil) != (b == nil) {
		return false
	}
	for _, s := range sentinels {
		if errors.Is(a, s) != errors.Is(b, s) {
			return false
		}
	}
	return true
}

func sameResponse(a, b *engine.Response) bool {
	if a == nil || b == nil {
		return (a == nil || len(a.Steps) == 0) && (b == nil || len(b.Steps) == 0)
	}
	if len(a.Steps) != len(b.Steps) {
		return false
	}
	for i := range a.Steps {
		x, y := a.Steps[i], b.Steps[i]
		if x.Skipped != y.Skipped || x.Replayed != y.Replayed || x.Denied != y.Denied || len(x.Results) != len(y.Results) {
			return false
		}
		for j := range x.Results {
			r, s := x.Results[j], y.Results[j]
			if len(r.Windows) == 0 && len(s.Windows) == 0 {
				r.Windows, s.Windows = nil, nil
			}
			if !reflect.DeepEqual(r, s) {
				return false
			}
		}
	}
	return true
}

func describe(r *engine.Request) string {
	s := fmt.Sprintf("op=%q mode=%q", r.OperationID, r.Mode)
	for _, st := range r.Steps {
		s += fmt.Sprintf("\n\t  step %q", st.Partition)
		for _, c := range st.Commands {
			s += fmt.Sprintf("\n\t    %+v", c)
		}
	}
	return s
}

// drawStep draws a clock move: mostly small and forwards, sometimes a
// window boundary, sometimes backwards.
func drawStep(t *rapid.T) time.Duration {
	ms := rapid.SampledFrom([]int64{0, 0, 1, 1, 7, 250, 999, 1000, 1001, 30_000, 59_999, 60_000, 3_600_000, -1, -1000, -60_000}).Draw(t, "step")
	if rapid.IntRange(0, 5).Draw(t, "randomStep") == 0 {
		ms = rapid.Int64Range(-10_000, 200_000).Draw(t, "ms")
	}
	return time.Duration(ms) * time.Millisecond
}

var (
	keys       = []string{"a", "b", "c", "d"}
	partitions = []string{"p", "p", "q", "x}{y%7D"}
	ops        = []string{"op1", "op2", "op3"}
)

func drawRequest(t *rapid.T) *engine.Request {
	req := &engine.Request{}
	if rapid.IntRange(0, 3).Draw(t, "withOp") == 0 {
		req.OperationID = rapid.SampledFrom(ops).Draw(t, "op")
	}
	if rapid.Bool().Draw(t, "all") {
		req.Mode = engine.All
	}
	for range rapid.IntRange(1, 3).Draw(t, "steps") {
		st := engine.Step{Partition: rapid.SampledFrom(partitions).Draw(t, "partition")}
		for range rapid.IntRange(1, 4).Draw(t, "commands") {
			st.Commands = append(st.Commands, drawCommand(t))
		}
		req.Steps = append(req.Steps, st)
	}
	return req
}

// Limits and windows near the bounds, where exact arithmetic matters.
var (
	limits  = []int64{1, 2, 3, 7, 10, 100, 4096, 1_000_003, algo.MaxLimit - 1, algo.MaxLimit}
	windows = []int64{1, 3, 1000, 1001, 60_000, 86_400_000, 7_777_777_777, algo.MaxWindow}
	ttls    = []int64{1000, 1001, 60_000, 3_600_000, engine.MaxTTLMs}
	// Values, and so budgets: the script evaluates budgets exactly within
	// ±2^52 and above (see TestBudgetRange for below).
	values = []string{"", "0", "1", "-5", "x", "007", "+1", "4503599627370497", "-4503599627370000",
		"4611686018427387904"}
	deltas = []int64{1, -1, 5, 1000, math.MaxInt64, math.MinInt64, 1 << 53, -(1 << 53)}
)

func drawLimit(t *rapid.T, max int64) int64 {
	l := rapid.SampledFrom(limits).Draw(t, "limit")
	if rapid.IntRange(0, 3).Draw(t, "randomLimit") == 0 {
		l = rapid.Int64Range(1, algo.MaxLimit).Draw(t, "limitN")
	}
	return min(l, max)
}

func drawWindow(t *rapid.T) int64 {
	if rapid.IntRange(0, 3).Draw(t, "randomWindow") == 0 {
		return rapid.Int64Range(1, algo.MaxWindow).Draw(t, "windowN")
	}
	return rapid.SampledFrom(windows).Draw(t, "window")
}

// drawCost draws a cost of 1…limit, favouring the ends.
func drawCost(t *rapid.T, limit int64) int64 {
	switch rapid.IntRange(0, 3).Draw(t, "costKind") {
	case 0:
		return 1
	case 1:
		return limit
	default:
		return rapid.Int64Range(1, limit).Draw(t, "cost")
	}
}

func drawCommand(t *rapid.T) engine.Command {
	key := func(label string) string { return rapid.SampledFrom(keys).Draw(t, label) }
	switch rapid.IntRange(0, 14).Draw(t, "opKind") {
	case 0, 1, 2:
		var ws []engine.Window
		used := map[string]bool{}
		minLimit := algo.MaxLimit
		for range rapid.IntRange(1, 3).Draw(t, "windows") {
			k := key("winKey")
			if used[k] {
				continue
			}
			used[k] = true
			kind := algo.Kind(rapid.IntRange(1, 4).Draw(t, "kind"))
			maxLimit := algo.MaxLimit
			if kind == algo.KindLog {
				maxLimit = algo.MaxLogLimit
			}
			l := drawLimit(t, maxLimit)
			minLimit = min(minLimit, l)
			ws = append(ws, engine.Window{Key: k, Kind: kind, Limit: l, WindowMs: drawWindow(t)})
		}
		return engine.Hit(drawCost(t, minLimit), ws...)
	case 3:
		return engine.Get(key("key"))
	case 4:
		mode := rapid.SampledFrom([]engine.SetMode{engine.SetAlways, engine.SetNX, engine.SetXX}).Draw(t, "mode")
		c := engine.SetIf(key("key"), rapid.SampledFrom(values).Draw(t, "value"), rapid.SampledFrom(ttls).Draw(t, "ttl"), mode)
		c.KeepTTL = rapid.Bool().Draw(t, "keepTtl")
		return c
	case 5:
		return engine.Del(key("key"))
	case 6:
		return engine.TTL(key("key"))
	case 7:
		return engine.Expire(key("key"), rapid.SampledFrom(ttls).Draw(t, "ttl"))
	case 8:
		// Counters: small deltas on every key, int64-spanning deltas on a
		// key no budget uses (see TestBudgetRange for budgets out there).
		if rapid.Bool().Draw(t, "bigDelta") {
			return engine.Incr("big", rapid.SampledFrom(deltas).Draw(t, "delta"), rapid.SampledFrom(ttls).Draw(t, "ttl"))
		}
		return engine.Incr(key("key"), rapid.Int64Range(-3, 3).Draw(t, "delta"), rapid.SampledFrom(ttls).Draw(t, "ttl"))
	case 9:
		var bs []engine.Budget
		used := map[string]bool{}
		refundable := false
		minLimit := algo.MaxLimit
		for range rapid.IntRange(1, 3).Draw(t, "budgets") {
			k := key("budgetKey")
			if used[k] {
				continue
			}
			used[k] = true
			l := drawLimit(t, algo.MaxLimit)
			minLimit = min(minLimit, l)
			b := engine.Budget{Key: k, Limit: l, WindowMs: max(engine.MinTTLMs, drawWindow(t)), Refundable: rapid.Bool().Draw(t, "refundable")}
			refundable = refundable || b.Refundable
			bs = append(bs, b)
		}
		receipt := ""
		if refundable {
			receipt = "r" + key("receipt")
		}
		return engine.Reserve(receipt, drawCost(t, minLimit), bs...)
	case 10:
		return engine.Refund("r" + key("receipt"))
	case 11:
		lease := rapid.SampledFrom([]string{"x", "y", "z"}).Draw(t, "lease")
		switch rapid.IntRange(0, 2).Draw(t, "gateOp") {
		case 0:
			return engine.Acquire("g"+key("gate"), lease, rapid.Int64Range(1, 3).Draw(t, "gateLimit"), rapid.SampledFrom(ttls).Draw(t, "ttl"))
		case 1:
			return engine.Renew("g"+key("gate"), lease, rapid.SampledFrom(ttls).Draw(t, "ttl"))
		default:
			return engine.Release("g"+key("gate"), lease)
		}
	default:
		p := engine.Pace{Key: "pace" + key("pace"), Limit: drawLimit(t, 5), WindowMs: rapid.SampledFrom([]int64{1, 1000, 60_000}).Draw(t, "paceWindow")}
		if rapid.Bool().Draw(t, "refill") {
			r := rapid.SampledFrom([]int64{0, 333, 500, 1000}).Draw(t, "refillPermille")
			p.RefillPermille = &r
		}
		maxWait := rapid.SampledFrom([]int64{0, 1000, 5000, 120_000}).Draw(t, "maxWait")
		switch rapid.IntRange(0, 2).Draw(t, "paceOp") {
		case 0:
			return p.Take(drawCost(t, p.Limit), maxWait)
		case 1:
			at := storetest.DefaultEpoch + rapid.Int64Range(0, 600_000).Draw(t, "at")
			return p.Claim(at, drawCost(t, p.Limit), maxWait)
		default:
			return p.Penalize(rapid.SampledFrom([]int64{1, 500, 2000, 60_000}).Draw(t, "delay"))
		}
	}
}
