package engine_test

import (
	"context"
	"errors"
	"math"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/engine"
)

// exhausted returns a fixture whose window w has no allowance left.
func exhausted(t *testing.T, w engine.Window) *fixture {
	t.Helper()
	f := newFixture(t)
	if res := f.run(t, "limits", engine.Hit(w.Limit, w)); res.Denied {
		t.Fatal("setup: the first hit was denied")
	}
	return f
}

func TestSequentialSkipsAfterDenial(t *testing.T) {
	w := fixed("w", 1, minute)
	for _, tc := range []struct {
		mode engine.Mode
		skip bool
	}{
		{"", true},
		{engine.Sequential, true},
		{engine.All, false},
	} {
		t.Run(string(tc.mode), func(t *testing.T) {
			f := exhausted(t, w)
			resp := f.do(t, &engine.Request{Mode: tc.mode, Steps: []engine.Step{
				step("a", engine.Incr("n", 1, minute)),
				step("limits", engine.Hit(1, w), engine.Incr("m", 1, minute)),
				step("b", engine.Incr("n", 1, minute)),
				step("a", engine.Incr("n", 1, minute)),
			}})
			if len(resp.Steps) != 4 {
				t.Fatalf("%d step results, want 4", len(resp.Steps))
			}
			if s := resp.Steps[1]; !s.Denied || s.Skipped || s.Results[0].Allowed || !s.Results[1].Allowed {
				t.Fatalf("step 1 = %+v, want a denied hit beside an allowed incr", s)
			}
			for i := 2; i < 4; i++ {
				s := resp.Steps[i]
				if s.Skipped != tc.skip {
					t.Errorf("step %d skipped = %v, want %v", i, s.Skipped, tc.skip)
				}
				if s.Skipped && len(s.Results) != 0 {
					t.Errorf("skipped step %d has results %+v", i, s.Results)
				}
			}
			// A denial does not stop the rest of its own batch.
			if got := f.run(t, "limits", engine.Get("m")).Results[0].Value; got != "1" {
				t.Errorf("m = %q, want 1: the incr beside the denied hit did not commit", got)
			}
			want := map[bool]string{true: "1", false: "2"}[tc.skip]
			if got := f.run(t, "a", engine.Get("n")).Results[0].Value; got != want {
				t.Errorf("a/n = %q, want %q", got, want)
			}
			if found := f.run(t, "b", engine.Get("n")).Results[0].Found; found == tc.skip {
				t.Errorf("b/n found = %v after a %q request", found, tc.mode)
			}
		})
	}
}

// TestUnappliedSetIsADenial checks that a kv.set whose condition fails
// counts as a denial: a sequential request stops after it.
func TestUnappliedSetIsADenial(t *testing.T) {
	for _, mode := range []engine.SetMode{engine.SetNX, engine.SetXX} {
		t.Run(string(mode), func(t *testing.T) {
			f := newFixture(t)
			if mode == engine.SetNX {
				f.run(t, "p", engine.Set("k", "old", minute))
			}
			resp := f.do(t, request(
				step("p", engine.SetIf("k", "new", minute, mode)),
				step("q", engine.Incr("n", 1, minute)),
			))
			set := resp.Steps[0]
			if !set.Denied || set.Results[0].Allowed {
				t.Fatalf("kv.set %s = %+v, want not applied and denied", mode, set)
			}
			if !resp.Steps[1].Skipped {
				t.Error("the step after an unapplied kv.set ran")
			}
			get := f.run(t, "p", engine.Get("k")).Results[0]
			if mode == engine.SetNX && get.Value != "old" || mode == engine.SetXX && get.Found {
				t.Errorf("k = %+v after an unapplied kv.set %s", get, mode)
			}
		})
	}
}

func TestErrorNamesStepAndKeepsEarlierSteps(t *testing.T) {
	w := fixed("w", 5, minute)
	for _, mode := range []engine.Mode{engine.Sequential, engine.All} {
		t.Run(string(mode), func(t *testing.T) {
			f := newFixture(t)
			f.run(t, "c", engine.Hit(1, w))
			applies := f.store.applies.Load()
			resp, err := f.eng.Do(context.Background(), &engine.Request{Mode: mode, Steps: []engine.Step{
				step("a", engine.Incr("n", 1, minute)),
				step("b", engine.Incr("n", 1, minute)),
				step("c", engine.Incr("n", 1, minute), engine.Get("w")),
				step("d", engine.Incr("n", 1, minute)),
			}})
			if !errors.Is(err, engine.ErrWrongType) {
				t.Fatalf("Do = %v, want ErrWrongType", err)
			}
			if !strings.HasPrefix(err.Error(), "step 2: command 1 (kv.get): ") {
				t.Errorf("error %q does not name step 2, command 1", err)
			}
			if resp == nil || len(resp.Steps) != 2 {
				t.Fatalf("response = %+v, want the 2 completed steps", resp)
			}
			for i, s := range resp.Steps {
				if s.Skipped || s.Denied || len(s.Results) != 1 || s.Results[0].Int != 1 {
					t.Errorf("step %d = %+v, want a completed incr to 1", i, s)
				}
			}
			if n := f.store.applies.Load() - applies; n != 3 {
				t.Errorf("the store ran %d steps, want 3 (none after the failure)", n)
			}
			for p, want := range map[string]bool{"a": true, "b": true, "c": false, "d": false} {
				if found := f.run(t, p, engine.Get("n")).Results[0].Found; found != want {
					t.Errorf("%s/n found = %v, want %v", p, found, want)
				}
			}
		})
	}
}

// rollbackFixture is a partition holding one record of every kind, and the
// read-only probes that together read all of it back.
type rollbackFixture struct {
	*fixture
	probes *engine.Request
}

func newRollbackFixture(t *testing.T) rollbackFixture {
	t.Helper()
	f := newFixture(t)
	wFixed := fixed("fixed", 10, minute)
	wSliding := window("sliding", algo.KindSliding, 10, minute)
	wLog := window("log", algo.KindLog, 5, minute)
	wGCRA := window("gcra", algo.KindGCRA, 10, minute)
	f.do(t, request(
		step("p",
			engine.Set("v", "hello", hour),
			engine.Incr("n", 41, hour),
			engine.Incr("max", math.MaxInt64, hour),
			engine.Hit(3, wFixed),
			engine.Hit(5, wSliding),
			engine.Hit(2, wLog),
			engine.Hit(4, wGCRA),
			engine.Acquire("gate", "a", 1, 30*second),
		),
		step("p",
			engine.Reserve("rcpt", 1, budget("budget", 3, 15*minute, true)),
			engine.Incr("min", math.MinInt64, hour),
		),
	))
	f.clock.Advance(1234 * time.Millisecond) // later than every write
	keys := []string{"v", "n", "max", "min", "fixed", "sliding", "log", "gcra", "gate", "budget", "rcpt", "new"}
	var ttls []engine.Command
	for _, k := range keys {
		ttls = append(ttls, engine.TTL(k))
	}
	probes := &engine.Request{Mode: engine.All, Steps: []engine.Step{
		step("p", ttls[:8]...),
		step("p", append(ttls[8:], engine.Get("v"), engine.Get("n"), engine.Get("max"), engine.Get("min"))...),
		step("p", engine.Get("budget"), engine.Get("new")),
		step("p", probe(wFixed), probe(wSliding), probe(wLog), probe(wGCRA), engine.Acquire("gate", "probe", 1, second)),
	}}
	return rollbackFixture{fixture: f, probes: probes}
}

// readBack reads the whole partition without changing it.
func (f rollbackFixture) readBack(t *testing.T) (*engine.Response, int) {
	t.Helper()
	resp := f.do(t, f.probes)
	for i, r := range resp.Steps[3].Results {
		if r.Allowed {
			t.Fatalf("probe %d was allowed: it charged what it meant to read", i)
		}
	}
	return resp, f.mem.Len()
}

// TestFailedBatchRollsBack runs batches of eight commands whose third fails
// and checks that the partition reads back exactly as before.
func TestFailedBatchRollsBack(t *testing.T) {
	for _, tc := range []struct {
		name  string
		third engine.Command
		want  error
	}{
		{"incr on a window", engine.Incr("fixed", 1, minute), engine.ErrWrongType},
		{"overflowing incr", engine.Incr("max", 1, minute), engine.ErrOverflow},
		{"underflowing incr", engine.Incr("min", -1, minute), engine.ErrOverflow},
		{"get of a gate", engine.Get("gate"), engine.ErrWrongType},
		{"refund of a value", engine.Refund("v"), engine.ErrWrongType},
		{"hit on a window of another kind", engine.Hit(1, fixed("log", 5, minute)), engine.ErrWrongType},
		{"acquire on a receipt", engine.Acquire("rcpt", "b", 2, minute), engine.ErrWrongType},
		{"receipt over a counter", engine.Reserve("n", 1, budget("other", 3, minute, true)), engine.ErrWrongType},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newRollbackFixture(t)
			before, n := f.readBack(t)
			if again, m := f.readBack(t); !reflect.DeepEqual(before, again) || m != n {
				t.Fatal("reading back changed the partition")
			}
			applies := f.store.applies.Load()
			_, err := f.eng.Do(context.Background(), &engine.Request{OperationID: "rollback", Steps: []engine.Step{step("p",
				engine.Set("v", "changed", hour),
				engine.Hit(1, fixed("fixed", 10, minute)),
				tc.third,
				engine.Incr("n", 1, minute),
				engine.Del("max"),
				engine.Release("gate", "a"),
				engine.Refund("rcpt"),
				engine.SetIf("new", "x", minute, engine.SetNX),
			)}})
			if !errors.Is(err, tc.want) {
				t.Fatalf("Do = %v, want %v", err, tc.want)
			}
			if !strings.Contains(err.Error(), "step 0: command 2 ") {
				t.Errorf("error %q does not name step 0, command 2", err)
			}
			if f.store.applies.Load() != applies+1 {
				t.Fatal("the batch did not reach the store")
			}
			after, m := f.readBack(t)
			if m != n {
				t.Errorf("the store holds %d records, had %d", m, n)
			}
			if !reflect.DeepEqual(before, after) {
				t.Errorf("the partition changed:\nbefore %+v\nafter  %+v", before, after)
			}
		})
	}
}

// TestDeniedHitChargesNoWindow denies a hit over four windows of every kind
// because one is full, and checks that none was charged.
func TestDeniedHitChargesNoWindow(t *testing.T) {
	windows := []engine.Window{
		window("sliding", algo.KindSliding, 100, minute),
		window("log", algo.KindLog, 50, minute),
		fixed("second", 2, second),
		window("gcra", algo.KindGCRA, 100, hour),
	}
	f := newFixture(t)
	first := f.run(t, "p", engine.Hit(2, windows...))
	if first.Denied {
		t.Fatal("setup: the first hit was denied")
	}
	probeAll := func() engine.StepResult {
		var cmds []engine.Command
		for _, w := range windows {
			cmds = append(cmds, probe(w))
		}
		return f.run(t, "p", cmds...)
	}
	before := probeAll()

	f.clock.Advance(500 * time.Millisecond)
	denied := f.run(t, "p", engine.Hit(1, windows...)).Results[0]
	if denied.Allowed {
		t.Fatal("a hit over a full window was allowed")
	}
	for i, w := range denied.Windows {
		full := windows[i].Key == "second"
		if w.Allowed == full {
			t.Errorf("window %s allowed = %v", windows[i].Key, w.Allowed)
		}
		if !full && w.Remaining != first.Results[0].Windows[i].Remaining {
			t.Errorf("window %s reports %d remaining, had %d: a denial must not charge it",
				windows[i].Key, w.Remaining, first.Results[0].Windows[i].Remaining)
		}
	}
	if denied.Remaining != 0 || denied.RetryAfterMs != 500 {
		t.Errorf("denial = remaining %d, retry after %d ms; want 0 and 500 ms", denied.Remaining, denied.RetryAfterMs)
	}

	f.clock.Advance(-500 * time.Millisecond)
	if after := probeAll(); !reflect.DeepEqual(before, after) {
		t.Errorf("the windows changed:\nbefore %+v\nafter  %+v", before, after)
	}
}

// TestStepHash checks that changing any field of a step, including any
// field of a window or budget, changes its hash.
func TestStepHash(t *testing.T) {
	base := engine.Step{Partition: "p", Commands: []engine.Command{{
		Op:      engine.OpHit,
		Windows: []engine.Window{fixed("w", 10, minute)},
		Budgets: []engine.Budget{budget("b", 5, minute, false)},
	}}}
	baseHash, err := base.Hash()
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := base.Hash(); again != baseHash {
		t.Fatal("hashing the same step twice gave different hashes")
	}

	seen := map[[32]byte]string{baseHash: "base"}
	check := func(name string, s engine.Step) {
		t.Helper()
		h, err := s.Hash()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if prev, dup := seen[h]; dup {
			t.Errorf("changing %s gives the hash of %s", name, prev)
		}
		seen[h] = name
	}
	// clone returns a deep copy of base for one edit.
	clone := func() engine.Step {
		c := base.Commands[0]
		c.Windows = append([]engine.Window(nil), c.Windows...)
		c.Budgets = append([]engine.Budget(nil), c.Budgets...)
		return engine.Step{Partition: base.Partition, Commands: []engine.Command{c}}
	}

	s := clone()
	s.Partition = "q"
	check("Partition", s)
	s = clone()
	s.Commands = append(s.Commands, s.Commands[0])
	check("the number of commands", s)

	// Every field of Command, Window and Budget, found by reflection so a
	// field added later is covered too.
	edits := 0
	for _, target := range []struct {
		name string
		get  func(*engine.Step) reflect.Value
	}{
		{"Command", func(s *engine.Step) reflect.Value { return reflect.ValueOf(&s.Commands[0]).Elem() }},
		{"Window", func(s *engine.Step) reflect.Value { return reflect.ValueOf(&s.Commands[0].Windows[0]).Elem() }},
		{"Budget", func(s *engine.Step) reflect.Value { return reflect.ValueOf(&s.Commands[0].Budgets[0]).Elem() }},
	} {
		typ := target.get(&base).Type()
		for i := range typ.NumField() {
			field := typ.Field(i)
			s := clone()
			if !changeField(target.get(&s).Field(i)) {
				t.Fatalf("no edit for %s.%s of kind %s", target.name, field.Name, field.Type.Kind())
			}
			check(target.name+"."+field.Name, s)
			edits++
		}
	}
	if edits < 25 {
		t.Errorf("only %d fields edited", edits)
	}
}

// changeField sets v to a value different from its current one.
func changeField(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.String:
		v.SetString(v.String() + "x")
	case reflect.Int64, reflect.Int:
		v.SetInt(v.Int() + 1)
	case reflect.Uint8:
		v.SetUint(v.Uint() + 1)
	case reflect.Bool:
		v.SetBool(!v.Bool())
	case reflect.Pointer:
		// nil and a pointer to zero must differ.
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		} else {
			v.SetZero()
		}
	case reflect.Slice:
		if v.Len() == 0 {
			v.Set(reflect.Append(v, reflect.Zero(v.Type().Elem())))
		} else {
			v.SetLen(v.Len() - 1)
		}
	default:
		return false
	}
	return true
}

// TestReceiptNeverReplacesAnotherRecord checks that res.reserve refuses a
// receipt key holding a record that is not a receipt, charging nothing.
func TestReceiptNeverReplacesAnotherRecord(t *testing.T) {
	f := newFixture(t)
	target := budget("target", 3, 15*minute, true)
	f.run(t, "p", engine.Hit(1, fixed("w", 10, minute)), engine.Reserve("r1", 1, target))

	_, err := f.eng.Do(context.Background(), one(engine.Reserve("w", 1, target)))
	if !errors.Is(err, engine.ErrWrongType) {
		t.Fatalf("a receipt over a window: %v, want ErrWrongType", err)
	}
	if got := f.run(t, "p", engine.Get("target")).Results[0].Value; got != "1" {
		t.Errorf("target = %q after a failed reservation, want 1", got)
	}
	// A receipt does replace an earlier receipt.
	res := f.run(t, "p", engine.Reserve("r1", 1, target), engine.Refund("r1"), engine.Refund("r1"))
	if !res.Results[0].Allowed || !res.Results[1].Found || res.Results[2].Found {
		t.Errorf("reserve, refund, refund = %+v", res.Results)
	}
	if got := f.run(t, "p", engine.Get("target")).Results[0].Value; got != "1" {
		t.Errorf("target = %q after reserving and refunding once, want 1", got)
	}
}

// TestDeniedReserveRemainingAtTheInt64Edge drives a budget's counter, a
// value record any caller may write, to the bottom of the int64 range: a
// denied reservation reports the budget that admitted it with its
// remaining allowance, saturated, never a negative one.
func TestDeniedReserveRemainingAtTheInt64Edge(t *testing.T) {
	f := newFixture(t)
	f.run(t, "p", engine.Incr("low", math.MinInt64+1, minute))
	f.run(t, "p", engine.Incr("full", 5, minute))
	// Without a receipt and with one: the memory store's fast path and the
	// executor.
	for _, receipt := range []string{"", "r"} {
		out := f.run(t, "p", engine.Reserve(receipt, 1, budget("low", 5, minute, receipt != ""), budget("full", 5, minute, false)))
		r := out.Results[0]
		if r.Allowed || r.Remaining != 0 || r.Windows[0].Remaining != math.MaxInt64 || r.Windows[1].Remaining != 0 {
			t.Errorf("receipt %q: %+v; want denied by full, low reporting the most it can", receipt, r)
		}
	}
}

// TestRefundAtTheInt64Edge refunds to a budget whose counter was set to
// the bottom of the int64 range: the counter is left at zero, as a refund
// never goes below it, rather than wrapped round to the top of the range.
func TestRefundAtTheInt64Edge(t *testing.T) {
	f := newFixture(t)
	f.run(t, "p", engine.Reserve("receipt", 1, budget("min", 5, minute, true)))
	f.run(t, "p", engine.Set("min", strconv.FormatInt(math.MinInt64, 10), minute))
	f.run(t, "p", engine.Refund("receipt"))
	if got := f.run(t, "p", engine.Get("min")).Results[0].Value; got != "0" {
		t.Errorf("a refund to a counter at the bottom of the range left %s, want 0", got)
	}
}
