package engine_test

import (
	"context"
	"errors"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/engine"
)

// withID returns r with its operation id set.
func withID(id string, r *engine.Request) *engine.Request {
	r.OperationID = id
	return r
}

// unreplayed returns a copy of resp with every Replayed flag cleared.
func unreplayed(resp *engine.Response) *engine.Response {
	c := &engine.Response{Steps: append([]engine.StepResult(nil), resp.Steps...)}
	for i := range c.Steps {
		c.Steps[i].Replayed = false
	}
	return c
}

// remaining reads what is left of w without charging it.
func (f *fixture) remaining(t *testing.T, partition string, w engine.Window) int64 {
	t.Helper()
	r := f.run(t, partition, probe(w)).Results[0]
	if r.Allowed {
		t.Fatalf("probe of %s was allowed: the window was empty", w.Key)
	}
	return r.Remaining
}

func (f *fixture) value(t *testing.T, partition, key string) string {
	t.Helper()
	r := f.run(t, partition, engine.Get(key)).Results[0]
	if !r.Found {
		return "<absent>"
	}
	return r.Value
}

func TestReplayReturnsRecordedResults(t *testing.T) {
	f := newFixture(t)
	w := fixed("w", 10, minute)
	target := budget("target", 3, 15*minute, true)
	req := func() *engine.Request {
		return withID("op-1", request(
			step("a", engine.Hit(2, w), engine.Incr("n", 1, hour), engine.Get("n")),
			step("b", engine.Reserve("rcpt", 1, target), engine.Acquire("gate", "lease", 1, minute)),
			step("a", engine.TTL("n")),
		))
	}
	run1 := f.do(t, req())
	for i, s := range run1.Steps {
		if s.Replayed || s.Denied {
			t.Fatalf("first run, step %d = %+v", i, s)
		}
	}
	records := f.mem.Len()

	f.clock.Advance(10 * time.Second)
	run2 := f.do(t, req())
	for i, want := range []bool{true, true, false} {
		if run2.Steps[i].Replayed != want {
			t.Errorf("step %d replayed = %v, want %v", i, run2.Steps[i].Replayed, want)
		}
	}
	// The replayed steps return exactly what the first run returned; the
	// read-only step, which recorded nothing, ran again ten seconds later.
	got, want := unreplayed(run2), unreplayed(run1)
	if !reflect.DeepEqual(got.Steps[:2], want.Steps[:2]) {
		t.Errorf("replayed results differ:\n got %+v\nwant %+v", got.Steps[:2], want.Steps[:2])
	}
	if ttl := run2.Steps[2].Results[0].TTLMs; ttl != run1.Steps[2].Results[0].TTLMs-10*second {
		t.Errorf("read-only step: ttl %d ms, want %d", ttl, run1.Steps[2].Results[0].TTLMs-10*second)
	}

	// Nothing was charged again.
	if n := f.remaining(t, "a", w); n != 8 {
		t.Errorf("window remaining = %d, want 8: the replay charged it", n)
	}
	if v := f.value(t, "a", "n"); v != "1" {
		t.Errorf("counter = %s, want 1", v)
	}
	if v := f.value(t, "b", "target"); v != "1" {
		t.Errorf("budget = %s, want 1", v)
	}
	if f.mem.Len() != records {
		t.Errorf("the replay wrote records: %d, had %d", f.mem.Len(), records)
	}
}

func TestReplayConflict(t *testing.T) {
	f := newFixture(t)
	w := fixed("w", 10, minute)
	f.do(t, withID("op", request(
		step("a", engine.Hit(1, w)),
		step("b", engine.Incr("n", 1, hour)),
	)))
	records := f.mem.Len()

	for _, tc := range []struct {
		name  string
		req   *engine.Request
		step  int
		steps int // completed steps returned with the error
	}{
		{"different cost", request(step("a", engine.Hit(2, w)), step("b", engine.Incr("n", 1, hour))), 0, 0},
		{"different window", request(step("a", engine.Hit(1, fixed("w", 11, minute)))), 0, 0},
		{"extra command", request(step("a", engine.Hit(1, w), engine.Incr("m", 1, hour))), 0, 0},
		{"second step differs", request(step("a", engine.Hit(1, w)), step("b", engine.Incr("n", 2, hour))), 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := f.eng.Do(context.Background(), withID("op", tc.req))
			if !errors.Is(err, engine.ErrOperationConflict) {
				t.Fatalf("Do = %v, want ErrOperationConflict", err)
			}
			if len(resp.Steps) != tc.steps {
				t.Fatalf("%d completed steps, want %d", len(resp.Steps), tc.steps)
			}
			for _, s := range resp.Steps {
				if !s.Replayed {
					t.Errorf("completed step %+v was not a replay", s)
				}
			}
			if n := f.remaining(t, "a", w); n != 9 {
				t.Errorf("window remaining = %d, want 9", n)
			}
			if v := f.value(t, "b", "n"); v != "1" {
				t.Errorf("counter = %s, want 1", v)
			}
			if v := f.value(t, "a", "m"); v != "<absent>" {
				t.Errorf("m = %s, want absent", v)
			}
			if f.mem.Len() != records {
				t.Errorf("%d records, had %d", f.mem.Len(), records)
			}
		})
	}
}

// TestUnchangedStepRecordsNothing checks that steps that change nothing
// write no replay record, and that a step that does writes exactly one.
func TestUnchangedStepRecordsNothing(t *testing.T) {
	full := fixed("full", 1, minute)
	for _, tc := range []struct {
		name    string
		cmds    []engine.Command
		records int // records the step adds, replay record included
	}{
		{"read-only", []engine.Command{engine.Get("v"), engine.TTL("v"), engine.Get("absent"), engine.TTL("full")}, 0},
		{"denied hit", []engine.Command{engine.Hit(1, full)}, 0},
		{"unapplied nx", []engine.Command{engine.SetIf("v", "new", minute, engine.SetNX)}, 0},
		{"unapplied xx", []engine.Command{engine.SetIf("absent", "new", minute, engine.SetXX)}, 0},
		{"nothing to delete or refund", []engine.Command{engine.Del("absent"), engine.Expire("absent", minute), engine.Refund("absent"), engine.Release("gate", "none")}, 0},
		{"denied hit beside a read", []engine.Command{engine.Get("v"), engine.Hit(1, full)}, 0},
		{"one new counter", []engine.Command{engine.Incr("n", 1, minute)}, 2},
		{"one overwrite", []engine.Command{engine.Set("v", "new", minute)}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.run(t, "p", engine.Set("v", "old", minute), engine.Hit(1, full))
			before := f.mem.Len()
			resp := f.do(t, withID("op", request(step("p", tc.cmds...))))
			if added := f.mem.Len() - before; added != tc.records {
				t.Errorf("the step added %d records, want %d", added, tc.records)
			}
			// A step that recorded nothing is not replayed: it runs again.
			again := f.do(t, withID("op", request(step("p", tc.cmds...))))
			if again.Steps[0].Replayed != (tc.records > 0) {
				t.Errorf("replayed = %v, want %v", again.Steps[0].Replayed, tc.records > 0)
			}
			if resp.Steps[0].Replayed {
				t.Error("the first run was a replay")
			}
		})
	}
}

// TestReplayRecordExpires checks that a record lives exactly ReplayTTL, after
// which the same operation id runs afresh.
func TestReplayRecordExpires(t *testing.T) {
	f := newFixture(t)
	req := func() *engine.Request { return withID("op", request(step("p", engine.Incr("n", 1, hour)))) }
	f.do(t, req())

	f.clock.Advance(engine.ReplayTTL - time.Millisecond)
	if r := f.do(t, req()).Steps[0]; !r.Replayed || r.Results[0].Int != 1 {
		t.Fatalf("1 ms before expiry: %+v, want the replayed first result", r)
	}
	f.clock.Advance(time.Millisecond)
	r := f.do(t, req()).Steps[0]
	if r.Replayed || r.Results[0].Int != 2 {
		t.Fatalf("at expiry: %+v, want a fresh increment to 2", r)
	}
	// The fresh run recorded anew.
	f.clock.Advance(engine.ReplayTTL - time.Millisecond)
	if r := f.do(t, req()).Steps[0]; !r.Replayed || r.Results[0].Int != 2 {
		t.Fatalf("second record: %+v, want the replayed second result", r)
	}
}

// TestReplayPerStep retries a request whose second step was denied: the
// first step replays, the second (which recorded nothing) runs afresh.
func TestReplayPerStep(t *testing.T) {
	w := fixed("w", 1, minute)
	f := exhausted(t, w)
	req := func() *engine.Request {
		return withID("op", request(
			step("a", engine.Incr("n", 1, hour)),
			step("limits", engine.Hit(1, w)),
			step("b", engine.Incr("n", 1, hour)),
		))
	}
	run1 := f.do(t, req())
	if !run1.Steps[1].Denied || !run1.Steps[2].Skipped {
		t.Fatalf("first run = %+v, want step 1 denied and step 2 skipped", run1.Steps)
	}
	f.clock.Advance(time.Minute) // the window rolls over; the record lives on
	run2 := f.do(t, req())
	if !run2.Steps[0].Replayed || run2.Steps[1].Replayed || run2.Steps[1].Denied || run2.Steps[2].Skipped {
		t.Fatalf("retry = %+v, want step 0 replayed and steps 1 and 2 run", run2.Steps)
	}
	if v := f.value(t, "a", "n"); v != "1" {
		t.Errorf("a/n = %s, want 1", v)
	}
	if v := f.value(t, "b", "n"); v != "1" {
		t.Errorf("b/n = %s, want 1", v)
	}
}

// TestConcurrentDuplicates runs one operation from many goroutines at once:
// exactly one charges, every other replays its result.
func TestConcurrentDuplicates(t *testing.T) {
	f := newFixture(t)
	const callers = 32
	req := func() *engine.Request {
		return withID("op", request(step("p", engine.Hit(1, fixed("w", 100, minute)), engine.Incr("n", 1, hour))))
	}
	results := make([]*engine.Response, callers)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			resp, err := f.eng.Do(context.Background(), req())
			if err != nil {
				t.Error(err)
				return
			}
			results[i] = resp
		})
	}
	wg.Wait()
	fresh := 0
	for _, r := range results {
		if r == nil {
			t.FailNow()
		}
		if !r.Steps[0].Replayed {
			fresh++
		}
		if got := r.Steps[0].Results[1].Int; got != 1 {
			t.Errorf("a caller saw the counter at %d, want 1", got)
		}
	}
	if fresh != 1 {
		t.Errorf("%d callers ran the operation, want 1", fresh)
	}
	if v := f.value(t, "p", "n"); v != "1" {
		t.Errorf("counter = %s, want 1", v)
	}
}

// TestReplayIntoReusedResult replays into a StepResult that a previous
// batch filled: no field of the earlier result may survive.
func TestReplayIntoReusedResult(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.run(t, "p", engine.Set("v", "value", hour))
	cmds := []engine.Command{engine.Incr("n", 1, hour), engine.Del("absent")}
	b := engine.Batch{Partition: "p", Commands: cmds, OperationID: "op"}
	var err error
	if b.Hash, err = (&engine.Step{Partition: "p", Commands: cmds}).Hash(); err != nil {
		t.Fatal(err)
	}
	var fresh engine.StepResult
	if err := f.mem.Apply(ctx, &b, &fresh); err != nil {
		t.Fatal(err)
	}

	var reused engine.StepResult
	dirty := engine.Batch{Partition: "p", Commands: []engine.Command{
		engine.Get("v"),
		engine.Hit(1, fixed("w", 5, minute), fixed("x", 7, hour)),
	}}
	if err := f.mem.Apply(ctx, &dirty, &reused); err != nil {
		t.Fatal(err)
	}
	if err := f.mem.Apply(ctx, &b, &reused); err != nil {
		t.Fatal(err)
	}
	if !reused.Replayed {
		t.Fatal("the batch was not replayed")
	}
	reused.Replayed = false
	if !reflect.DeepEqual(normalize(reused), normalize(fresh)) {
		t.Errorf("replay into a reused result:\n got %+v\nwant %+v", reused, fresh)
	}
}

// normalize maps empty Windows slices to nil, which JSON does not tell
// apart.
func normalize(s engine.StepResult) engine.StepResult {
	s.Results = append([]engine.Result(nil), s.Results...)
	for i := range s.Results {
		if len(s.Results[i].Windows) == 0 {
			s.Results[i].Windows = nil
		}
	}
	return s
}
