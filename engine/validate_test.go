package engine_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/engine"
)

const day = 24 * hour

// bigKey is one byte over MaxKeyBytes.
var bigKey = strings.Repeat("k", engine.MaxKeyBytes+1)

// one returns a single-step request on partition "p".
func one(cmds ...engine.Command) *engine.Request { return request(step("p", cmds...)) }

// repeat returns n copies of c.
func repeat(n int, c engine.Command) []engine.Command {
	cmds := make([]engine.Command, n)
	for i := range cmds {
		cmds[i] = c
	}
	return cmds
}

// steps returns n steps, each holding cmds.
func steps(n int, cmds ...engine.Command) []engine.Step {
	s := make([]engine.Step, n)
	for i := range s {
		s[i] = step("p", cmds...)
	}
	return s
}

func budget(key string, limit, windowMs int64, refundable bool) engine.Budget {
	return engine.Budget{Key: key, Limit: limit, WindowMs: windowMs, Refundable: refundable}
}

var paced = engine.Pace{Key: "pace", Limit: 10, WindowMs: minute}

// invalidRequests breaks every bound once. want is a fragment of the error
// naming the bound, so each case is known to fail for its own reason.
func invalidRequests() []struct {
	name string
	req  *engine.Request
	want string
} {
	w := fixed("w", 10, minute)
	incr := engine.Incr("n", 1, minute)
	withOp := func(op string) *engine.Request { r := one(incr); r.OperationID = op; return r }
	withMode := func(m engine.Mode) *engine.Request { r := one(incr); r.Mode = m; return r }
	with := func(c engine.Command, edit func(*engine.Command)) *engine.Request { edit(&c); return one(c) }
	hitOf := func(cost int64, ws ...engine.Window) *engine.Request { return one(engine.Hit(cost, ws...)) }
	reserve := func(receipt string, cost int64, bs ...engine.Budget) *engine.Request {
		return one(engine.Reserve(receipt, cost, bs...))
	}
	target := budget("target", 5, 15*minute, true)

	return []struct {
		name string
		req  *engine.Request
		want string
	}{
		// Requests and steps.
		{"no steps", request(), "0 steps"},
		{"17 steps", &engine.Request{Steps: steps(17, incr)}, "17 steps"},
		{"9 commands in a step", one(repeat(9, incr)...), "9 commands in a step"},
		{"step without commands", one(), "0 commands in a step"},
		{"33 commands", &engine.Request{Steps: append(steps(4, repeat(8, incr)...), step("q", incr))}, "33 commands"},
		{"unknown mode", withMode("parallel"), `mode "parallel"`},
		{"operation id of 129 bytes", withOp(strings.Repeat("o", engine.MaxOperationID+1)), "operation id of 129 bytes"},
		{"operation id not UTF-8", withOp("op-\xff"), "operation id is not valid UTF-8"},
		{"empty partition", request(step("", incr)), "partition of 0 bytes"},
		{"partition of 513 bytes", request(step(bigKey, incr)), "partition of 513 bytes"},
		{"partition starting with NUL", request(step("\x00p", incr)), "partition starts with a NUL"},
		{"partition not UTF-8", request(step("p\xfe", incr)), "partition is not valid UTF-8"},
		{"unknown op", one(engine.Command{Op: "kv.frob", Key: "k"}), `unknown op "kv.frob"`},
		{"empty op", one(engine.Command{Key: "k"}), `unknown op ""`},

		// Keys.
		{"empty key", one(engine.Get("")), "key of 0 bytes"},
		{"key of 513 bytes", one(engine.Get(bigKey)), "key of 513 bytes"},
		{"key starting with NUL", one(engine.Get("\x00op\x00x\x000")), "key starts with a NUL"},
		{"key not UTF-8", one(engine.Get("\xff")), "key is not valid UTF-8"},
		{"window key starting with NUL", hitOf(1, fixed("\x00w", 10, minute)), "window key starts with a NUL"},
		{"empty window key", hitOf(1, fixed("", 10, minute)), "window key of 0 bytes"},
		{"budget key of 513 bytes", reserve("", 1, budget(bigKey, 5, minute, false)), "budget key of 513 bytes"},
		{"receipt starting with NUL", reserve("\x00r", 1, target), "receipt starts with a NUL"},

		// win.hit.
		{"hit without windows", hitOf(1), "0 windows"},
		{"5 windows", hitOf(1, fixed("a", 9, minute), fixed("b", 9, minute), fixed("c", 9, minute), fixed("d", 9, minute), fixed("e", 9, minute)), "5 windows"},
		{"duplicate window keys", hitOf(1, fixed("a", 9, second), fixed("a", 9, minute)), `windows 0 and 1 of one hit share a key`},
		{"window without kind", hitOf(1, window("w", 0, 10, minute)), "window kind 0"},
		{"zero limit", hitOf(1, fixed("w", 0, minute)), "limit 0 outside"},
		{"negative limit", hitOf(1, fixed("w", -1, minute)), "limit -1 outside"},
		{"limit above 2^40", hitOf(1, fixed("w", algo.MaxLimit+1, minute)), "limit 1099511627777 outside"},
		{"log limit above 4096", hitOf(1, window("w", algo.KindLog, algo.MaxLogLimit+1, minute)), "log limit 4097 outside"},
		{"zero window", hitOf(1, fixed("w", 10, 0)), "window 0 ms outside"},
		{"negative window", hitOf(1, fixed("w", 10, -minute)), "window -60000 ms outside"},
		{"window of 120 d + 1 ms", hitOf(1, fixed("w", 10, 120*day+1)), "window 10368000001 ms outside"},
		{"window of 2^62 ms", hitOf(1, window("w", algo.KindSliding, 10, 1<<62)), "window 4611686018427387904 ms outside"},
		{"zero cost", hitOf(0, w), "cost 0 must be positive"},
		{"negative cost", hitOf(-1, w), "cost -1 must be positive"},
		{"cost above limit", hitOf(11, w), "cost 11 exceeds limit 10"},
		{"cost above the smaller limit", hitOf(3, fixed("a", 100, minute), fixed("b", 2, second)), "cost 3 exceeds limit 2"},
		{"cost 2^63-1", hitOf(math.MaxInt64, w), "cost 9223372036854775807 exceeds"},
		{"hit with a key", with(engine.Hit(1, w), func(c *engine.Command) { c.Key = "k" }), "win.hit does not take key"},
		{"hit with a ttl", with(engine.Hit(1, w), func(c *engine.Command) { c.TTLMs = minute }), "win.hit does not take ttlMs"},

		// kv.*.
		{"value of 2049 bytes", one(engine.Set("k", strings.Repeat("v", engine.MaxValueBytes+1), minute)), "value of 2049 bytes"},
		{"value not UTF-8", one(engine.Set("k", "caf\xe9", minute)), "value is not valid UTF-8"},
		{"unknown set mode", one(engine.SetIf("k", "v", minute, "maybe")), `set mode "maybe"`},
		{"set ttl of 999 ms", one(engine.Set("k", "v", 999)), "ttl 999 ms outside"},
		{"set ttl of 120 d + 1 ms", one(engine.Set("k", "v", 120*day+1)), "ttl 10368000001 ms outside"},
		{"set without ttl", one(engine.Set("k", "v", 0)), "ttl 0 ms outside"},
		{"set with negative ttl", one(engine.Set("k", "v", -second)), "ttl -1000 ms outside"},
		{"set with a delta", with(engine.Set("k", "v", minute), func(c *engine.Command) { c.Delta = 1 }), "kv.set does not take delta"},
		{"get with a value", with(engine.Get("k"), func(c *engine.Command) { c.Value = "v" }), "kv.get does not take value"},
		{"get with a ttl", with(engine.Get("k"), func(c *engine.Command) { c.TTLMs = minute }), "kv.get does not take ttlMs"},
		{"del with keepTtl", with(engine.Del("k"), func(c *engine.Command) { c.KeepTTL = true }), "kv.del does not take keepTtl"},
		{"ttl with a mode", with(engine.TTL("k"), func(c *engine.Command) { c.Mode = engine.SetNX }), "kv.ttl does not take mode"},
		{"expire ttl of 999 ms", one(engine.Expire("k", 999)), "ttl 999 ms outside"},
		{"expire with a value", with(engine.Expire("k", minute), func(c *engine.Command) { c.Value = "v" }), "kv.expire does not take value"},
		{"incr without ttl", one(engine.Incr("n", 1, 0)), "ttl 0 ms outside"},
		{"incr ttl of 120 d + 1 ms", one(engine.Incr("n", 1, 120*day+1)), "ttl 10368000001 ms outside"},
		{"incr with a cost", with(incr, func(c *engine.Command) { c.Cost = 1 }), "kv.incr does not take cost"},

		// res.*.
		{"reserve without budgets", reserve("", 1), "0 budgets"},
		{"5 budgets", reserve("", 1, budget("a", 5, minute, false), budget("b", 5, minute, false), budget("c", 5, minute, false), budget("d", 5, minute, false), budget("e", 5, minute, false)), "5 budgets"},
		{"duplicate budget keys", reserve("", 1, budget("a", 5, minute, false), budget("a", 9, hour, false)), `budgets 0 and 1 of one reservation share a key`},
		{"budget key is the receipt", reserve("target", 1, target), `budget 0's key is also the receipt`},
		{"zero budget limit", reserve("", 1, budget("a", 0, minute, false)), "budget limit 0 outside"},
		{"budget window of 999 ms", reserve("", 1, budget("a", 5, 999, false)), "budget window 999 ms under 1000"},
		{"budget window of 2^62 ms", reserve("", 1, budget("a", 5, 1<<62, false)), "budget window 4611686018427387904 ms outside"},
		{"zero reserve cost", reserve("r", 0, target), "cost 0 outside"},
		{"reserve cost above a limit", reserve("r", 6, target), "cost 6 outside 1…5"},
		{"reserve cost 2^63-1", reserve("r", math.MaxInt64, target), "cost 9223372036854775807 outside"},
		{"receipt without a refundable budget", reserve("r", 1, budget("a", 5, minute, false)), "a receipt without a refundable budget"},
		{"refundable budget without a receipt", reserve("", 1, target), "receipt of 0 bytes"},
		{"reserve with a key", with(engine.Reserve("r", 1, target), func(c *engine.Command) { c.Key = "k" }), "res.reserve does not take key"},
		{"refund without a receipt", one(engine.Refund("")), "key of 0 bytes"},
		{"refund with a cost", with(engine.Refund("r"), func(c *engine.Command) { c.Cost = 1 }), "res.refund does not take cost"},

		// gate.*.
		{"gate limit 0", one(engine.Acquire("g", "a", 0, minute)), "gate limit 0 outside"},
		{"gate limit 1025", one(engine.Acquire("g", "a", algo.MaxGateLimit+1, minute)), "gate limit 1025 outside"},
		{"empty lease", one(engine.Acquire("g", "", 2, minute)), "lease id of 0 bytes"},
		{"lease of 65 bytes", one(engine.Renew("g", strings.Repeat("l", algo.MaxLeaseID+1), minute)), "lease id of 65 bytes"},
		{"lease not UTF-8", one(engine.Release("g", "\xc0")), "lease id is not valid UTF-8"},
		{"acquire ttl of 999 ms", one(engine.Acquire("g", "a", 2, 999)), "ttl 999 ms outside"},
		{"renew without ttl", one(engine.Renew("g", "a", 0)), "ttl 0 ms outside"},
		{"release with a ttl", with(engine.Release("g", "a"), func(c *engine.Command) { c.TTLMs = minute }), "gate.release does not take ttlMs"},
		{"acquire with a window", with(engine.Acquire("g", "a", 2, minute), func(c *engine.Command) { c.WindowMs = minute }), "gate.acquire does not take limit/windowMs/refillPermille"},

		// pace.*.
		{"pace limit 0", one(engine.Pace{Key: "p", WindowMs: minute}.Take(1, 0)), "pace limit 0 outside"},
		{"pace limit 4097", one(engine.Pace{Key: "p", Limit: algo.MaxLogLimit + 1, WindowMs: minute}.Take(1, 0)), "pace limit 4097 outside"},
		{"pace window 0", one(engine.Pace{Key: "p", Limit: 10}.Take(1, 0)), "pace window 0 ms outside"},
		{"pace window 2^62 ms", one(engine.Pace{Key: "p", Limit: 10, WindowMs: 1 << 62}.Penalize(second)), "pace window 4611686018427387904 ms outside"},
		{"refill above 1000", one(engine.Pace{Key: "p", Limit: 10, WindowMs: minute, RefillPermille: ptr(int64(1001))}.Take(1, 0)), "refill 1001‰ outside"},
		{"negative refill", one(engine.Pace{Key: "p", Limit: 10, WindowMs: minute, RefillPermille: ptr(int64(-1))}.Take(1, 0)), "refill -1‰ outside"},
		{"pace cost 0", one(paced.Take(0, 0)), "pace cost 0 outside"},
		{"pace cost above limit", one(paced.Take(11, 0)), "pace cost 11 outside 1…10"},
		{"pace cost 2^63-1", one(paced.Claim(t0, math.MaxInt64, 0)), "pace cost 9223372036854775807 outside"},
		{"negative max wait", one(paced.Take(1, -1)), "max wait -1 ms outside"},
		{"max wait of 120 d + 1 ms", one(paced.Take(1, 120*day+1)), "max wait 10368000001 ms outside"},
		{"claim without a slot", one(paced.Claim(0, 1, 0)), "claimed slot 0 must be positive"},
		{"penalty of 0 ms", one(paced.Penalize(0)), "penalty 0 ms outside"},
		{"penalty of 120 d + 1 ms", one(paced.Penalize(120*day + 1)), "penalty 10368000001 ms outside"},
		{"take with a penalty", with(paced.Take(1, 0), func(c *engine.Command) { c.DelayMs = second }), "pace.take does not take delayMs"},
		{"penalize with a cost", with(paced.Penalize(second), func(c *engine.Command) { c.Cost = 1 }), "pace.penalize does not take cost"},
		{"pace without a key", with(paced.Take(1, 0), func(c *engine.Command) { c.Key = "" }), "key of 0 bytes"},

		// One bad command among good ones, in a later step.
		{"bad command in step 2", request(step("a", incr), step("b", incr), step("c", incr, engine.Set("k", "v", 999))), "step 2: command 1:"},
	}
}

// TestInvalidRequests checks that every bound is enforced by Validate and
// that Engine.Do and Engine.Apply reject the request before calling the
// store.
func TestInvalidRequests(t *testing.T) {
	ctx := context.Background()
	for _, tc := range invalidRequests() {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			err := tc.req.Validate()
			if !errors.Is(err, engine.ErrInvalid) {
				t.Fatalf("Validate = %v, want ErrInvalid", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate = %q, want it to mention %q", err, tc.want)
			}
			resp, err := f.eng.Do(ctx, tc.req)
			if !errors.Is(err, engine.ErrInvalid) || resp != nil {
				t.Fatalf("Do = %v, %v; want nil, ErrInvalid", resp, err)
			}
			if r := tc.req; len(r.Steps) == 1 && r.Mode == "" && r.OperationID == "" {
				var out engine.StepResult
				if err := f.eng.Apply(ctx, r.Steps[0].Partition, &out, r.Steps[0].Commands...); !errors.Is(err, engine.ErrInvalid) {
					t.Fatalf("Apply = %v, want ErrInvalid", err)
				}
			}
			if n := f.store.applies.Load(); n != 0 {
				t.Errorf("the store was called %d times for an invalid request", n)
			}
			if n := f.mem.Len(); n != 0 {
				t.Errorf("the store holds %d records after an invalid request", n)
			}
		})
	}
}

// TestBoundsInclusive checks the valid side of every bound: a request at
// each limit is accepted and reaches the store.
func TestBoundsInclusive(t *testing.T) {
	incr := engine.Incr("n", 1, minute)
	maxKey := strings.Repeat("k", engine.MaxKeyBytes)
	cases := []struct {
		name string
		req  *engine.Request
	}{
		{"16 steps of 2 commands (32)", &engine.Request{Steps: steps(16, incr, incr)}},
		{"8 commands in a step", one(repeat(8, incr)...)},
		{"4 windows", one(engine.Hit(1, fixed("a", 1, second), fixed("b", 1, minute), window("c", algo.KindLog, algo.MaxLogLimit, hour), window("d", algo.KindGCRA, algo.MaxLimit, 120*day)))},
		{"value of 2048 bytes", one(engine.Set("k", strings.Repeat("v", engine.MaxValueBytes), minute))},
		{"empty value", one(engine.Set("k", "", minute))},
		{"ttl of 1 s", one(engine.Set("k", "v", engine.MinTTLMs))},
		{"ttl of 120 d", one(engine.Incr("k", 1, engine.MaxTTLMs))},
		{"keys of 512 bytes", request(step(maxKey, engine.Get(maxKey), engine.Hit(1, fixed(maxKey[1:], 1, 1))))},
		{"operation id of 128 bytes", &engine.Request{OperationID: strings.Repeat("o", engine.MaxOperationID), Steps: steps(1, incr)}},
		{"cost equal to the limit", one(engine.Hit(10, fixed("w", 10, minute)), engine.Reserve("", 5, budget("b", 5, second, false)))},
		{"refundable budget with a receipt", one(engine.Reserve("r", 1, budget("a", 5, minute, false), budget("t", 5, minute, true)))},
		{"gate of 1024", one(engine.Acquire("g", strings.Repeat("l", algo.MaxLeaseID), algo.MaxGateLimit, minute))},
		{"pace at its bounds", one(engine.Pace{Key: "p", Limit: algo.MaxLogLimit, WindowMs: 120 * day, RefillPermille: ptr(int64(0))}.Take(algo.MaxLogLimit, 120*day))},
		{"set mode always", &engine.Request{Mode: engine.All, Steps: steps(1, engine.SetIf("k", "v", minute, "always"))}},
		{"negative delta", one(engine.Incr("n", math.MinInt64, minute))},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			if err := tc.req.Validate(); err != nil {
				t.Fatalf("Validate = %v", err)
			}
			f.do(t, tc.req)
			if n := f.store.applies.Load(); n != int64(len(tc.req.Steps)) {
				t.Errorf("store called %d times for %d steps", n, len(tc.req.Steps))
			}
		})
	}
}
