package storetest

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"testing/fstest"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/testclock"
	"github.com/sluicehq/sluice/store/memstore"
)

// The suite's own tests: the script format, and that the suite fails stores
// that break the rules it exists to hold.

func newMemstore(t *testing.T, clock engine.Clock) engine.Store {
	t.Helper()
	cfg := memstore.DefaultConfig()
	cfg.Clock = clock
	s, err := memstore.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func mustParse(t *testing.T, text string) *script {
	t.Helper()
	s, err := parseScript("test", text)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestParse(t *testing.T) {
	s := mustParse(t, `
epoch 1000000
at 1s # a comment
p: win.hit cost=2 win=a/gcra/4/1m win=b/log/3/10s
   -> denied remaining=1 resetAt=2s retryAfter=500ms
   -> win=ok/2/1m win=denied/1/2s/500ms
advance -1ms
do op=x mode=all
step q -> skipped
  kv.set key=k value="a b" ttl=1m mode=nx keepTtl
step r
  pace.claim pace=z/5/1s/250 at=3s cost=1 maxWait=2s -> ok at=3s
step s
  res.reserve receipt=rc cost=1 budget=b1/2/1h/refundable budget=b2/9/1m
    -> error wrong_type
`)
	if s.epoch != 1_000_000 || len(s.actions) != 4 {
		t.Fatalf("epoch %d, %d actions", s.epoch, len(s.actions))
	}
	if a := s.actions[0]; a.kind != actAt || a.ms != 1000 {
		t.Errorf("at: %+v", a)
	}
	if a := s.actions[2]; a.kind != actAdvance || a.ms != -1 {
		t.Errorf("advance: %+v", a)
	}
	hit := s.actions[1].req.steps[0].cmds[0]
	if got := hit.cmd.Windows; len(got) != 2 || got[0] != (engine.Window{Key: "a", Kind: algo.KindGCRA, Limit: 4, WindowMs: 60_000}) {
		t.Errorf("windows: %+v", got)
	}
	w := hit.want.res
	if w.Allowed || w.Remaining != 1 || w.ResetAt != 1_002_000 || w.RetryAfterMs != 500 || len(w.Windows) != 2 ||
		w.Windows[1] != (engine.WindowResult{Remaining: 1, ResetAt: 1_002_000, RetryAfterMs: 500}) {
		t.Errorf("want: %+v", w)
	}
	req := s.actions[3].req
	if req.opID != "x" || req.mode != engine.All || !req.steps[0].skipped {
		t.Errorf("request: %+v", req)
	}
	set := req.steps[0].cmds[0].cmd
	if set.Value != "a b" || set.Mode != engine.SetNX || !set.KeepTTL || set.TTLMs != 60_000 {
		t.Errorf("set: %+v", set)
	}
	claim := req.steps[1].cmds[0]
	if c := claim.cmd; c.Key != "z" || c.Limit != 5 || c.WindowMs != 1000 || *c.RefillPermille != 250 || c.At != 1_003_000 || c.MaxWaitMs != 2000 {
		t.Errorf("claim: %+v", c)
	}
	if claim.want.res.At != 1_003_000 {
		t.Errorf("claim want: %+v", claim.want.res)
	}
	if w := req.steps[2].cmds[0].want; w.err != engine.ErrWrongType {
		t.Errorf("reserve want: %+v", w)
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ text, want string }{
		{"at 1s\nbogus 1", "test:2: unknown directive"},
		{"at 1.5ms", "whole number of milliseconds"},
		{"p: kv.get key=a", "test:1: command has no expectation"},
		{"at 0\np: kv.get key=a\nat 1s", "test:2: command has no expectation"},
		{"p: kv.get key=a -> maybe", "starts with ok, denied or error"},
		{"p: kv.get key=a -> error nope", "unknown error"},
		{"p: kv.nope key=a -> ok", "unknown command"},
		{"p: kv.get kee=a -> ok", "unknown field"},
		{"p: kv.get key=a -> ok founds", `"founds" needs a value`},
		{"p: kv.get key=a -> ok founds=1", "unknown result field"},
		{`p: kv.set key=a value="x ttl=1s -> ok`, "unterminated quote"},
		{"step p", "step outside a do block"},
		{"p: kv.get key=a -> ok\nstep q", "step outside a do block"},
		{"p: kv.get key=a -> ok\nkv.get key=b -> ok", "outside a do block needs a partition"},
		{"-> ok", "continues no command"},
		{"at 1s\nepoch 5", "must come first"},
		{"p: win.hit cost=1 win=a/fixed/1/1m win=b/fixed/1/1m -> ok", "list the outcome of each of the 2 windows"},
		{"p: win.hit cost=1 win=a/fixed/1 -> ok", "KEY/KIND/LIMIT/WINDOW"},
		{"p: win.hit cost=1 win=a/square/1/1m -> ok", "unknown window kind"},
		{"do\nstep p\n  kv.get key=a -> error invalid\n  kv.get key=b -> ok", "only its failing command"},
		{"do\nstep p\n  kv.get key=a -> error wrong_type\nstep q\n  kv.get key=b -> ok", "does not run has no expectation"},
		{"do\nstep p\n  kv.get key=a\nstep q\n  kv.get key=b -> error invalid", ""},
		{"do\nstep p\n  kv.get key=a\nstep q\n  kv.get key=b -> error wrong_type", "command has no expectation"},
		{"do\nstep p -> skipped\n  kv.get key=a -> ok", "does not run has no expectation"},
		{"do\nat 0", "a request needs a step"},
	} {
		_, err := parseScript("test", tc.text)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%q: %v", tc.text, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%q: error %v, want one containing %q", tc.text, err, tc.want)
		}
	}
}

func TestLoadScriptsReportsTheFile(t *testing.T) {
	fsys := fstest.MapFS{
		"testdata/a.txt":  {Data: []byte("at 0\n")},
		"testdata/b.txt":  {Data: []byte("at 0\nat\n")},
		"testdata/c.json": {Data: []byte("{}")},
	}
	if _, err := loadScripts(fsys); err == nil || !strings.HasPrefix(err.Error(), "b:2: ") {
		t.Fatalf("error %v, want one at b:2", err)
	}
	delete(fsys, "testdata/b.txt")
	scripts, err := loadScripts(fsys)
	if err != nil || len(scripts) != 1 || scripts[0].name != "a" {
		t.Fatalf("scripts %v, error %v", scripts, err)
	}
}

// runText runs a script's text against a fresh memstore.
func runText(t *testing.T, text string) error {
	t.Helper()
	s := mustParse(t, text)
	clock := testclock.At(s.epoch)
	store := newMemstore(t, clock)
	defer store.Close()
	return s.run(t.Context(), store, clock)
}

func TestRunReportsMismatches(t *testing.T) {
	for _, tc := range []struct{ text, want string }{
		{"p: kv.get key=a -> ok found", "test:1: at 0s: kv.get\n\tgot:  ok\n\twant: ok found"},
		{"at 1m\np: win.hit cost=1 win=w/fixed/2/1m -> ok remaining=1 resetAt=1m",
			"got:  ok remaining=1 resetAt=2m0s win=ok/1/2m0s"},
		{"p: kv.set key=a value=1 ttl=1m -> error invalid", "want error invalid, got none"},
		{"p: kv.set key=a value=x ttl=1m -> ok\np: kv.incr key=a delta=1 ttl=1m -> error overflow", "want error overflow, got"},
		{"p: kv.set key=a value=x ttl=1m -> ok\np: kv.incr key=a delta=1 ttl=1m -> ok", "unexpected error"},
		{"do\nstep p\n  win.hit cost=1 win=w/fixed/1/1m -> ok remaining=0 resetAt=1m\nstep q -> skipped\n  kv.get key=a",
			"skipped = false, want true"},
		{"do op=o\nstep p -> replayed\n  kv.set key=a value=1 ttl=1m -> ok", "replayed = false, want true"},
	} {
		err := runText(t, tc.text)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q:\nerror %v\nwant one containing %q", tc.text, err, tc.want)
		}
	}
}

// Faulty stores, each breaking one rule on top of a correct memstore.

// lateClock reads its clock 1 ms late.
type lateClock struct{ engine.Clock }

func (c lateClock) Now() time.Time { return c.Clock.Now().Add(time.Millisecond) }

// amnesiac forgets everything after each batch.
type amnesiac struct {
	t     *testing.T
	clock engine.Clock
}

func (a amnesiac) Apply(ctx context.Context, b *engine.Batch, out *engine.StepResult) error {
	s := newMemstore(a.t, a.clock)
	defer s.Close()
	return s.Apply(ctx, b, out)
}

func (amnesiac) Close() error { return nil }

// piecemeal runs each command of a batch as a batch of its own, keeping
// the effects of the commands before a failing one.
type piecemeal struct{ engine.Store }

func (p piecemeal) Apply(ctx context.Context, b *engine.Batch, out *engine.StepResult) error {
	var results []engine.Result
	denied := false
	for i := range b.Commands {
		one := *b
		one.Commands = b.Commands[i : i+1]
		var r engine.StepResult
		if err := p.Store.Apply(ctx, &one, &r); err != nil {
			return err
		}
		results = append(results, r.Results...)
		denied = denied || r.Denied
	}
	*out = engine.StepResult{Results: results, Denied: denied}
	return nil
}

// unrecorded ignores operation ids.
type unrecorded struct{ engine.Store }

func (u unrecorded) Apply(ctx context.Context, b *engine.Batch, out *engine.StepResult) error {
	plain := *b
	plain.OperationID, plain.Hash = "", [32]byte{}
	return u.Store.Apply(ctx, &plain, out)
}

// replicas spreads batches round-robin over two stores, each with its own
// quotas: two processes each with an in-process limiter.
type replicas struct {
	stores [2]engine.Store
	next   atomic.Uint64
}

func (r *replicas) Apply(ctx context.Context, b *engine.Batch, out *engine.StepResult) error {
	return r.stores[r.next.Add(1)%2].Apply(ctx, b, out)
}

func (r *replicas) Close() error { return nil }

func TestScriptsCatchFaults(t *testing.T) {
	scripts, err := loadScripts(testdata)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*script{}
	for _, s := range scripts {
		byName[s.name] = s
	}
	for _, tc := range []struct {
		fault string
		store func(t *testing.T, clock engine.Clock) engine.Store
		fails []string // scripts that must fail
	}{
		{"a clock 1 ms late", func(t *testing.T, c engine.Clock) engine.Store { return newMemstore(t, lateClock{c}) },
			[]string{"win_fixed", "win_sliding", "win_log", "win_gcra", "gate", "pace", "replay"}},
		{"no memory", func(t *testing.T, c engine.Clock) engine.Store { return amnesiac{t, c} },
			[]string{"win_fixed", "kv_basic", "kv_incr", "res_reserve", "gate", "pace", "pace_penalty", "clock_backwards"}},
		{"batches not atomic", func(t *testing.T, c engine.Clock) engine.Store { return piecemeal{newMemstore(t, c)} },
			[]string{"batch_atomic"}},
		{"no replay records", func(t *testing.T, c engine.Clock) engine.Store { return unrecorded{newMemstore(t, c)} },
			[]string{"replay"}},
	} {
		t.Run(tc.fault, func(t *testing.T) {
			for _, name := range tc.fails {
				s := byName[name]
				if s == nil {
					t.Fatalf("no script %q", name)
				}
				clock := testclock.At(s.epoch)
				store := tc.store(t, clock)
				err := s.run(t.Context(), store, clock)
				store.Close()
				if err == nil {
					t.Errorf("script %s passed a store with %s", name, tc.fault)
				}
			}
		})
	}
}

func TestChecksCatchFaults(t *testing.T) {
	pair := func(t *testing.T, clock engine.Clock) engine.Store {
		return &replicas{stores: [2]engine.Store{newMemstore(t, clock), newMemstore(t, clock)}}
	}
	for _, tc := range []struct {
		name string
		c    check
		want string
	}{
		{"kv_set_nx_race", checkSetNXRace, "racers won kv.set nx, want exactly 1"},
		{"one_key_limit/fixed", checkOneKeyLimit(algo.KindFixed), "admitted 2"},
		{"one_key_limit/sliding", checkOneKeyLimit(algo.KindSliding), "admitted 2"},
		{"one_key_limit/log", checkOneKeyLimit(algo.KindLog), "admitted 2"},
		{"one_key_limit/gcra", checkOneKeyLimit(algo.KindGCRA), "admitted 2"},
		{"many_partitions", checkManyPartitions, "increments, want 64"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := testclock.At(DefaultEpoch)
			err := tc.c(t.Context(), pair(t, clock), clock)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("on two replicas: error %v, want one containing %q", err, tc.want)
			}
		})
	}
	t.Run("closed", func(t *testing.T) {
		clock := testclock.At(DefaultEpoch)
		if err := checkClosed(t.Context(), amnesiac{t, clock}, clock); err == nil {
			t.Fatal("a store that ignores Close passed")
		}
	})
}
