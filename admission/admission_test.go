package admission

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/testclock"
	"github.com/sluicehq/sluice/store/memstore"
	"github.com/sluicehq/sluice/wire"
)

// epoch is 2026-01-01T12:00:00Z: mid-day, so tests cross midnight on purpose.
var epoch = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

type fixture struct {
	t     *testing.T
	clock *testclock.Clock
	store *memstore.Store
	probe *storeProbe // between the engine and the store
	joint *jointProbe // the probe of a fixture over a store of joint steps, or nil
	eng   *engine.Engine
	logs  *countingHandler
}

// storeProbe counts the batches reaching the store by partition, and lets
// a test hold a batch (hook) or fail one (fail).
type storeProbe struct {
	engine.Store
	mu      sync.Mutex
	batches map[string]int
	// hook, when set, runs before each batch reaches the store.
	hook func(partition string, cmds []engine.Command)
	// fail, when set, fails the batches it returns true for.
	fail func(partition string, cmds []engine.Command) bool
}

var errInjected = errors.New("injected store failure")

func (p *storeProbe) Apply(ctx context.Context, b *engine.Batch, out *engine.StepResult) error {
	if err := p.see(b); err != nil {
		return err
	}
	return p.Store.Apply(ctx, b, out)
}

// see counts b on its partition and runs the hook, then returns
// errInjected if fail says so.
func (p *storeProbe) see(b *engine.Batch) error {
	p.mu.Lock()
	if p.batches == nil {
		p.batches = map[string]int{}
	}
	p.batches[b.Partition]++
	hook, fail := p.hook, p.fail
	p.mu.Unlock()
	if hook != nil {
		hook(b.Partition, b.Commands)
	}
	if fail != nil && fail(b.Partition, b.Commands) {
		return errInjected
	}
	return nil
}

// count returns how many batches reached partitions whose reserved name
// begins with prefix.
func (p *storeProbe) count(prefix string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for part, c := range p.batches {
		if strings.HasPrefix(part, engine.ReservedPartition(prefix)) {
			n += c
		}
	}
	return n
}

func (p *storeProbe) set(hook func(string, []engine.Command), fail func(string, []engine.Command) bool) {
	p.mu.Lock()
	p.hook, p.fail = hook, fail
	p.mu.Unlock()
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	clock := testclock.New(epoch)
	cfg := memstore.DefaultConfig()
	cfg.Clock = clock
	st, err := memstore.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	probe := &storeProbe{Store: st}
	return &fixture{t: t, clock: clock, store: st, probe: probe, eng: engine.New(probe), logs: &countingHandler{}}
}

// admitter returns a new Admitter over the fixture's store, as a restarted
// server would build one.
func (fx *fixture) admitter(cfg Config) *Admitter {
	cfg.Now = fx.clock.Now
	cfg.Logger = slog.New(fx.logs)
	return New(fx.eng, cfg)
}

// rpc returns a request of n commands in family fam.
func rpc(fam string, n int) *wire.Request {
	cmds := make([]engine.Command, n)
	for i := range cmds {
		cmds[i] = engine.Get(fmt.Sprintf("k%d", i))
	}
	var steps []engine.Step
	for len(cmds) > 0 {
		k := min(len(cmds), engine.MaxCommandsPerStep)
		steps = append(steps, engine.Step{Partition: "p", Commands: cmds[:k]})
		cmds = cmds[k:]
	}
	return &wire.Request{OperationID: engine.NewOperationID(), Family: fam, Steps: steps}
}

func code(err error) wire.Code {
	var we *wire.Error
	if errors.As(err, &we) {
		return we.Code
	}
	if err == nil {
		return ""
	}
	return "other: " + wire.Code(err.Error())
}

// countingHandler counts log records by message and keeps the attributes
// of the last one of each.
type countingHandler struct {
	mu   sync.Mutex
	n    map[string]int
	last map[string]map[string]slog.Value
}

func (h *countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countingHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n == nil {
		h.n, h.last = map[string]int{}, map[string]map[string]slog.Value{}
	}
	h.n[r.Message]++
	attrs := map[string]slog.Value{}
	r.Attrs(func(a slog.Attr) bool {
		attrs[a.Key] = a.Value
		return true
	})
	h.last[r.Message] = attrs
	return nil
}

// attr returns attribute key of the last record logged with msg.
func (h *countingHandler) attr(msg, key string) slog.Value {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.last[msg][key]
}
func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countingHandler) WithGroup(string) slog.Handler      { return h }
func (h *countingHandler) count(msg string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n[msg]
}

func smallConfig(total int64) Config {
	cfg := DefaultConfig()
	cfg.Total = total
	cfg.Chunk = 7
	return cfg
}

// admitAll admits rpcs of n commands until the first refusal and returns
// how many commands were admitted and the refusal.
func admitAll(ctx context.Context, a *Admitter, fam string, n int) (int64, error) {
	var admitted int64
	for {
		if err := a.Admit(ctx, rpc(fam, n)); err != nil {
			return admitted, err
		}
		admitted += int64(n)
	}
}

// TestBudgetExactAcrossChunks admits batches of 3 from chunks of 7 (of an
// allowance of 10,000, whose 1 % cap is 100), so that most chunks end in
// the middle of a batch: the day admits its allowance to the command, and
// a batch larger than what is left is refused.
func TestBudgetExactAcrossChunks(t *testing.T) {
	fx := newFixture(t)
	cfg := smallConfig(10_000)
	if EffectiveChunk(cfg.Chunk, cfg.Total) != 7 {
		t.Fatalf("chunk %d, want the test's 7", EffectiveChunk(cfg.Chunk, cfg.Total))
	}
	a := fx.admitter(cfg)
	admitted, err := admitAll(context.Background(), a, DefaultFamily, 3)
	// 10,000 = 3,333·3 + 1: the 3,334th batch of 3 is larger than the 1 left.
	if admitted != 9_999 || code(err) != wire.CodeStopped {
		t.Fatalf("admitted %d then %v, want 9,999 then guard_stopped", admitted, err)
	}
	if err := a.Admit(context.Background(), rpc(DefaultFamily, 1)); err != nil {
		t.Fatalf("the last command should still fit: %v", err)
	}
	if err := a.Admit(context.Background(), rpc(DefaultFamily, 1)); code(err) != wire.CodeStopped {
		t.Fatalf("after exhaustion: %v, want guard_stopped", err)
	}
	if n := fx.logs.count("daily operation budget exhausted"); n != 1 {
		t.Fatalf("exhaustion logged %d times, want 1", n)
	}
}

func TestBudgetStopPersistsAcrossRestartAndClearsAtRollover(t *testing.T) {
	fx := newFixture(t)
	ctx := context.Background()
	a := fx.admitter(smallConfig(20))
	if admitted, err := admitAll(ctx, a, DefaultFamily, 1); admitted != 20 || code(err) != wire.CodeStopped {
		t.Fatalf("admitted %d then %v", admitted, err)
	}
	// A restarted server (a new Admitter on the same store) sees the stop.
	b := fx.admitter(smallConfig(20))
	if err := b.Admit(ctx, rpc(DefaultFamily, 1)); code(err) != wire.CodeStopped {
		t.Fatalf("after restart: %v, want guard_stopped", err)
	}
	st, err := b.State(ctx)
	if err != nil || len(st) != 1 || !st[0].Stopped || st[0].OperatorStop || st[0].Used != 20 {
		t.Fatalf("state after restart = %+v, %v", st, err)
	}
	// One millisecond before UTC midnight: still stopped.
	fx.clock.Set(time.Date(2026, 1, 1, 23, 59, 59, 999e6, time.UTC))
	if err := b.Admit(ctx, rpc(DefaultFamily, 1)); code(err) != wire.CodeStopped {
		t.Fatalf("before midnight: %v, want guard_stopped", err)
	}
	fx.clock.Set(time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC))
	if admitted, err := admitAll(ctx, b, DefaultFamily, 1); admitted != 20 || code(err) != wire.CodeStopped {
		t.Fatalf("new day: admitted %d then %v, want a fresh 20", admitted, err)
	}
}

func TestBurstAcrossMidnightAdmitsAtMostTwoAllowances(t *testing.T) {
	fx := newFixture(t)
	ctx := context.Background()
	a := fx.admitter(smallConfig(50))
	burst := func() int64 {
		var admitted atomic.Int64
		var wg sync.WaitGroup
		for range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 10 {
					if a.Admit(ctx, rpc(DefaultFamily, 1)) == nil {
						admitted.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		return admitted.Load()
	}
	fx.clock.Set(time.Date(2026, 1, 1, 23, 59, 59, 0, time.UTC))
	before := burst()
	fx.clock.Set(time.Date(2026, 1, 2, 0, 0, 0, 1e6, time.UTC))
	after := burst()
	// 160 attempts on each side of midnight: each UTC day admits exactly
	// its allowance, so the burst admits two allowances and no more.
	if before != 50 || after != 50 {
		t.Fatalf("admitted %d before and %d after midnight, want 50 and 50", before, after)
	}
}

// TestChunkLeftAtMidnightIsNotSpentTomorrow leases a chunk of 100 of an
// allowance of 10,000 one second before UTC midnight and spends 1 of it:
// the 99 left are yesterday's, so the new day admits exactly its own
// allowance, not its allowance and the 99.
func TestChunkLeftAtMidnightIsNotSpentTomorrow(t *testing.T) {
	fx := newFixture(t)
	ctx := context.Background()
	cfg := smallConfig(10_000)
	cfg.Chunk = 100
	a := fx.admitter(cfg)
	fx.clock.Set(time.Date(2026, 1, 1, 23, 59, 59, 0, time.UTC))
	if err := a.Admit(ctx, rpc(DefaultFamily, 1)); err != nil {
		t.Fatal(err)
	}
	if st, err := a.State(ctx); err != nil || st[0].Used != 100 || st[0].LeasedLeft != 99 {
		t.Fatalf("state %+v, %v: want a chunk of 100 leased, 99 of it unspent", st, err)
	}
	fx.clock.Set(time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC))
	if admitted, err := admitAll(ctx, a, DefaultFamily, 1); admitted != 10_000 || code(err) != wire.CodeStopped {
		t.Fatalf("the new day admitted %d then %v, want its own 10,000 then guard_stopped", admitted, err)
	}
}

// TestChunkUnspentAtACrashIsLostNeverSpentTwice: a server leases a chunk
// of 100 of an allowance of 10,000, spends 1 and ends without giving the
// rest back, as a crash would (nothing of an Admitter outlives it but the
// store). The server started after it spends what the durable counter has
// left, 9,900: the day admits 9,901 commands. The 99 unspent are lost, and
// none is admitted twice.
func TestChunkUnspentAtACrashIsLostNeverSpentTwice(t *testing.T) {
	fx := newFixture(t)
	ctx := context.Background()
	cfg := smallConfig(10_000)
	cfg.Chunk = 100
	if err := fx.admitter(cfg).Admit(ctx, rpc(DefaultFamily, 1)); err != nil {
		t.Fatal(err)
	}
	restarted := fx.admitter(cfg)
	if admitted, err := admitAll(ctx, restarted, DefaultFamily, 1); admitted != 9_900 || code(err) != wire.CodeStopped {
		t.Fatalf("the restarted server admitted %d then %v, want the 9,900 the crashed one had not leased", admitted, err)
	}
	if st, err := restarted.State(ctx); err != nil || st[0].Used != 10_000 || st[0].LeasedLeft != 0 {
		t.Fatalf("state %+v, %v: want the whole allowance leased and nothing left", st, err)
	}
}

func TestWarningOncePerFamilyAndDay(t *testing.T) {
	fx := newFixture(t)
	ctx := context.Background()
	cfg := smallConfig(100)
	cfg.Chunk = 1
	a := fx.admitter(cfg)
	for range 79 {
		if err := a.Admit(ctx, rpc(DefaultFamily, 1)); err != nil {
			t.Fatal(err)
		}
	}
	if n := fx.logs.count("daily operation budget at threshold"); n != 0 {
		t.Fatalf("warned at 79 %%: %d", n)
	}
	for range 15 {
		if err := a.Admit(ctx, rpc(DefaultFamily, 1)); err != nil {
			t.Fatal(err)
		}
	}
	// A restarted server on the same store does not warn again.
	b := fx.admitter(cfg)
	for range 5 {
		if err := b.Admit(ctx, rpc(DefaultFamily, 1)); err != nil {
			t.Fatal(err)
		}
	}
	if n := fx.logs.count("daily operation budget at threshold"); n != 1 {
		t.Fatalf("warned %d times, want exactly 1", n)
	}
}

func TestConcurrentAdmissionNeverExceedsAllowance(t *testing.T) {
	fx := newFixture(t)
	ctx := context.Background()
	cfg := smallConfig(1000)
	cfg.Chunk = 13
	// Three servers sharing one store.
	servers := []*Admitter{fx.admitter(cfg), fx.admitter(cfg), fx.admitter(cfg)}
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for g := range 48 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a := servers[g%len(servers)]
			for range 40 {
				if a.Admit(ctx, rpc(DefaultFamily, 1+g%3)) == nil {
					admitted.Add(int64(1 + g%3))
				}
			}
		}()
	}
	wg.Wait()
	if n := admitted.Load(); n > 1000 {
		t.Fatalf("admitted %d commands, allowance 1000", n)
	}
}

func TestInvalidConfigurationRefusesEverything(t *testing.T) {
	for _, split := range []string{"nope=5", "default=5,default=6", "default=x", "default=+5", "default=-0", "default=2000000", "default"} {
		fx := newFixture(t)
		cfg := DefaultConfig()
		cfg.Split = split
		a := fx.admitter(cfg)
		for range 3 {
			if err := a.Admit(context.Background(), rpc(DefaultFamily, 1)); code(err) != wire.CodeUnavailable {
				t.Fatalf("split %q: %v, want guard_unavailable", split, err)
			}
		}
		if fx.store.Len() != 0 {
			t.Fatalf("split %q: a refused RPC wrote %d records", split, fx.store.Len())
		}
	}
}

func TestAllowances(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Families = []string{"offline", "replay", "proxy", "password"}
	cfg.Split = "offline=600000,replay=100000"
	got, err := cfg.Allowances()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"offline": 600000, "replay": 100000, "proxy": 150000, "password": 150000}
	for f, n := range want {
		if got[f] != n {
			t.Errorf("%s = %d, want %d", f, got[f], n)
		}
	}
	cfg.Split = ""
	if got, _ := cfg.Allowances(); got["offline"] != 250000 {
		t.Errorf("equal shares: offline = %d, want 250000", got["offline"])
	}
}

// TestSplitAboveTheTotalWhenTheSumOverflows: budgets whose sum does not
// fit an int64 are above any total, not a negative sum below it.
func TestSplitAboveTheTotalWhenTheSumOverflows(t *testing.T) {
	for _, split := range []string{
		"a=9223372036854775807,b=1",
		"a=9223372036854775807,b=9223372036854775807",
		"a=5000000000000000000,b=5000000000000000000,c=1",
	} {
		cfg := DefaultConfig()
		cfg.Families = []string{"a", "b", "c"}
		cfg.Split = split
		got, err := cfg.Allowances()
		if err == nil || !strings.Contains(err.Error(), "above the daily total") {
			t.Errorf("split %q: allowances %v, error %v; want one about the parts above the daily total", split, got, err)
		}
	}
}

// A family listed twice is refused in Fair as in Families, whether the
// configuration comes from flags or is built in code.
func TestFairFamilyListedTwice(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Families = []string{"a", "b"}
	cfg.Fair = []string{"a", "b", "a"}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), `fair family "a" listed twice`) {
		t.Errorf("Validate() = %v, want the fair family listed twice refused", err)
	}
}

func TestOperatorStopAndResume(t *testing.T) {
	fx := newFixture(t)
	ctx := context.Background()
	cfg := smallConfig(100)
	cfg.Families = []string{"a", "b"}
	a := fx.admitter(cfg)
	if err := a.StopFamily(ctx, "a", "maintenance"); err != nil {
		t.Fatal(err)
	}
	if err := a.Admit(ctx, rpc("a", 1)); code(err) != wire.CodeStopped {
		t.Fatalf("stopped family: %v", err)
	}
	if err := a.Admit(ctx, rpc("b", 1)); err != nil {
		t.Fatalf("other family: %v", err)
	}
	// The stop is durable: a restarted server sees it, also on a later day.
	fx.clock.Advance(48 * time.Hour)
	b := fx.admitter(cfg)
	if err := b.Admit(ctx, rpc("a", 1)); code(err) != wire.CodeStopped {
		t.Fatalf("restarted, two days later: %v", err)
	}
	if err := b.ResumeFamily(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if err := b.Admit(ctx, rpc("a", 1)); err != nil {
		t.Fatalf("after resume: %v", err)
	}
}

// TestOperatorStopOutlivesTheLongestTTL: an operator stop holds until
// resumed, past the 120-day lifetime of any record, as long as the server
// reads it now and then.
func TestOperatorStopOutlivesTheLongestTTL(t *testing.T) {
	fx := newFixture(t)
	ctx := context.Background()
	cfg := smallConfig(100)
	a := fx.admitter(cfg)
	if err := a.StopFamily(ctx, DefaultFamily, "indefinitely"); err != nil {
		t.Fatal(err)
	}
	for day := 1; day <= 200; day += 30 {
		fx.clock.Advance(30 * 24 * time.Hour)
		b := fx.admitter(cfg) // a fresh server: no cached stop
		if err := b.Admit(ctx, rpc(DefaultFamily, 1)); code(err) != wire.CodeStopped {
			t.Fatalf("after %d days: %v, want guard_stopped", day+29, err)
		}
	}
}

// TestNoSpuriousRefusalUnderContention: while the allowance is far from
// spent, concurrent admissions are never refused, even when other callers
// take a freshly leased chunk before the caller that leased it.
func TestNoSpuriousRefusalUnderContention(t *testing.T) {
	fx := newFixture(t)
	cfg := smallConfig(1_000_000)
	cfg.Chunk = 1 // every lease is taken at once by whoever is fastest
	a := fx.admitter(cfg)
	var mu sync.Mutex
	var refusals []error
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for range 200 {
				if err := a.Admit(context.Background(), rpc(DefaultFamily, 1)); err != nil {
					mu.Lock()
					refusals = append(refusals, err)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if len(refusals) != 0 {
		t.Fatalf("%d of 12,800 admissions refused with 987,200 commands left; first: %v", len(refusals), refusals[0])
	}
}

// TestWarningCountsAdmittedCommands: on one server the warning comes with
// the command that reaches 80 % of the allowance, not with the lease that
// does (with chunks of 100, the lease reaching 8,000 is taken by command
// 7,901).
func TestWarningCountsAdmittedCommands(t *testing.T) {
	fx := newFixture(t)
	ctx := context.Background()
	cfg := smallConfig(10_000)
	cfg.Chunk = 100
	a := fx.admitter(cfg)
	for i := range 7_999 {
		if err := a.Admit(ctx, rpc(DefaultFamily, 1)); err != nil {
			t.Fatalf("command %d: %v", i+1, err)
		}
	}
	const msg = "daily operation budget at threshold"
	if n := fx.logs.count(msg); n != 0 {
		t.Fatalf("warned before the 8,000th command (%d times, used %v)", n, fx.logs.attr(msg, "used"))
	}
	if err := a.Admit(ctx, rpc(DefaultFamily, 1)); err != nil {
		t.Fatal(err)
	}
	if n, used := fx.logs.count(msg), fx.logs.attr(msg, "used").Int64(); n != 1 || used != 8_000 {
		t.Fatalf("after the 8,000th command: warned %d times with used %d, want once with 8000", n, used)
	}
}

// TestWarningAcrossServersIsNeverLate: with two servers the warning may
// come early by what the other server holds unspent (less than a chunk),
// never late.
func TestWarningAcrossServersIsNeverLate(t *testing.T) {
	fx := newFixture(t)
	ctx := context.Background()
	cfg := smallConfig(10_000)
	cfg.Chunk = 100
	one, two := fx.admitter(cfg), fx.admitter(cfg)
	if err := two.Admit(ctx, rpc(DefaultFamily, 1)); err != nil { // two holds 99 unspent
		t.Fatal(err)
	}
	total := int64(1)
	for fx.logs.count("daily operation budget at threshold") == 0 {
		if err := one.Admit(ctx, rpc(DefaultFamily, 1)); err != nil {
			t.Fatal(err)
		}
		if total++; total > 8_000 {
			t.Fatal("no warning by the 8,000th command")
		}
	}
	if total < 8_000-99 {
		t.Fatalf("warned at %d commands admitted, earlier than 8,000 less the 99 the other server holds", total)
	}
}

func TestChunkIsCappedAtOnePercentOfTheAllowance(t *testing.T) {
	for _, tc := range []struct{ chunk, allowance, want int64 }{
		{1000, 1_000_000, 1000}, {1000, 100_000, 1000}, {1000, 50_000, 500},
		{7, 100, 1}, {7, 99, 1}, {1000, 0, 1}, {5, 10_000, 5},
	} {
		if got := EffectiveChunk(tc.chunk, tc.allowance); got != tc.want {
			t.Errorf("EffectiveChunk(%d, %d) = %d, want %d", tc.chunk, tc.allowance, got, tc.want)
		}
	}
	fx := newFixture(t)
	cfg := smallConfig(10_000)
	cfg.Chunk = 5_000
	a := fx.admitter(cfg)
	if err := a.Admit(context.Background(), rpc(DefaultFamily, 1)); err != nil {
		t.Fatal(err)
	}
	st, err := a.State(context.Background())
	if err != nil || st[0].Used != 100 || st[0].LeasedLeft != 99 {
		t.Fatalf("state %+v, %v: want a lease of 100 (1 %% of 10,000), 99 of it unspent", st, err)
	}
}

// TestBudgetAboveTheLargestCounterIsRefused: a family's daily budget must
// fit the store's counters (algo.MaxLimit). A larger one is a
// configuration error with a clear reason, not a store failure met and
// logged by every RPC.
func TestBudgetAboveTheLargestCounterIsRefused(t *testing.T) {
	fx := newFixture(t)
	for _, c := range []struct {
		total    int64
		families []string
		split    string
		ok       bool
	}{
		{total: algo.MaxLimit, ok: true},
		{total: algo.MaxLimit + 1},
		{total: 4 * algo.MaxLimit, families: []string{"a", "b", "c", "d"}, ok: true},
		{total: 4*algo.MaxLimit + 4, families: []string{"a", "b", "c", "d"}},
		{total: 4 * algo.MaxLimit, families: []string{"a", "b"}, split: "a=" + strconv.FormatInt(algo.MaxLimit+1, 10)},
	} {
		cfg := smallConfig(c.total)
		cfg.Families, cfg.Split = c.families, c.split
		a := fx.admitter(cfg)
		if c.ok {
			if err := a.Err(); err != nil {
				t.Errorf("total %d over %v: %v", c.total, c.families, err)
			}
			continue
		}
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "above the largest") {
			t.Errorf("total %d over %v, split %q: Validate() = %v, want the budget above the largest refused", c.total, c.families, c.split, err)
		}
		fam := DefaultFamily
		if len(c.families) > 0 {
			fam = c.families[0]
		}
		if err := a.Admit(context.Background(), rpc(fam, 1)); code(err) != wire.CodeUnavailable || !strings.Contains(err.Error(), "invalid admission configuration") {
			t.Errorf("total %d over %v, split %q: Admit = %v, want guard_unavailable for the configuration", c.total, c.families, c.split, err)
		}
	}
	if n := fx.logs.count("admission store failure"); n != 0 {
		t.Errorf("%d store failures logged, want none", n)
	}
}

// TestOperatorStopHoldsForRPCsBeingAdmitted: once StopFamily has returned,
// this server admits nothing more for the family, including an RPC that
// read the family's state before the stop and was still being admitted
// when it returned: one waiting for a lease of the family's allowance, or
// for its fairness charge. Its commands go back to the chunk.
func TestOperatorStopHoldsForRPCsBeingAdmitted(t *testing.T) {
	for _, tc := range []struct {
		name      string
		principal string
		// during tells the batch the stop is made during.
		during string
	}{
		{"during a lease", "", "adm/f/"},
		{"during a fairness charge", "alice", "adm/p/"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fx := newFixture(t)
			ctx := context.Background()
			cfg := smallConfig(10_000)
			a := fx.admitter(cfg)
			var stopped atomic.Bool
			fx.probe.set(func(partition string, cmds []engine.Command) {
				if strings.HasPrefix(partition, engine.ReservedPartition(tc.during)) && cmds[0].Op == engine.OpReserve &&
					stopped.CompareAndSwap(false, true) {
					if err := a.StopFamily(ctx, DefaultFamily, "suspected drain"); err != nil {
						t.Error(err)
					}
				}
			}, nil)
			r := rpc(DefaultFamily, 3)
			r.Principal = tc.principal
			err := a.Admit(ctx, r)
			if !stopped.Load() {
				t.Fatal("the stop was not made during the RPC")
			}
			if code(err) != wire.CodeStopped {
				t.Fatalf("an RPC admitted after StopFamily returned: %v, want guard_stopped", err)
			}
			fx.probe.set(nil, nil)
			if err := a.ResumeFamily(ctx, DefaultFamily); err != nil {
				t.Fatal(err)
			}
			if admitted, err := admitAll(ctx, a, DefaultFamily, 1); admitted != 10_000 || code(err) != wire.CodeStopped {
				t.Fatalf("after the resume the family admitted %d then %v, want its allowance of 10,000", admitted, err)
			}
		})
	}
}

// TestWarningOfADayCountsThatDayOnly: an RPC admitted from the last chunk
// of a day checks that day's warning with what that day leased, not with
// what the next day has leased meanwhile. Here the RPC's fairness charge
// is still running at midnight while the next day's traffic passes 80 %:
// the day before, which admitted one command, is not warned of.
func TestWarningOfADayCountsThatDayOnly(t *testing.T) {
	fx := newFixture(t)
	ctx := context.Background()
	cfg := smallConfig(10_000)
	cfg.Chunk = 100
	a := fx.admitter(cfg)
	// The other server logs elsewhere: its warning of the next day is due.
	otherCfg := cfg
	otherCfg.Now, otherCfg.Logger = fx.clock.Now, slog.New(slog.DiscardHandler)
	other := New(fx.eng, otherCfg)
	fx.clock.Advance(12*time.Hour - time.Second) // 23:59:59
	var crossed atomic.Bool
	fx.probe.set(func(partition string, cmds []engine.Command) {
		if !strings.HasPrefix(partition, engine.ReservedPartition("adm/p/")) || !crossed.CompareAndSwap(false, true) {
			return
		}
		fx.clock.Advance(2 * time.Second) // the next day
		for range 80 {
			if err := other.Admit(ctx, rpc(DefaultFamily, 100)); err != nil {
				t.Error(err)
				return
			}
		}
		if err := a.Admit(ctx, rpc(DefaultFamily, 1)); err != nil { // a leases of the next day
			t.Error(err)
		}
	}, nil)
	late := rpc(DefaultFamily, 1)
	late.Principal = "alice"
	if err := a.Admit(ctx, late); err != nil || !crossed.Load() {
		t.Fatalf("the RPC charged across midnight (%v): %v", crossed.Load(), err)
	}
	const msg = "daily operation budget at threshold"
	if n := fx.logs.count(msg); n != 0 {
		t.Fatalf("warned %d times, of day %v with used %v; the day admitted 1 command of 10,000", n, fx.logs.attr(msg, "day"), fx.logs.attr(msg, "used"))
	}
}

// TestStateKeepsTheStopInForce: reading the control state reads the
// family's stored state afresh, without a moment in which this server's
// own stop is forgotten: an RPC still being admitted when StopFamily
// returned, and finishing while the state is read, is refused.
func TestStateKeepsTheStopInForce(t *testing.T) {
	fx := newFixture(t)
	ctx := context.Background()
	cfg := smallConfig(10_000)
	cfg.Chunk = 100
	a := fx.admitter(cfg)
	if err := a.Admit(ctx, rpc(DefaultFamily, 1)); err != nil { // the state read, a chunk leased
		t.Fatal(err)
	}
	inLease, release, result := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	var leasing, reading atomic.Bool
	var admitErr error
	fx.probe.set(func(partition string, cmds []engine.Command) {
		if partition != engine.ReservedPartition(familyPartition(DefaultFamily)) {
			return
		}
		switch {
		case cmds[0].Op == engine.OpReserve && leasing.CompareAndSwap(false, true):
			// The RPC leases: hold it until the state is being read.
			close(inLease)
			<-release
		case cmds[0].Op == engine.OpGet && cmds[0].Key == operatorStopKey && reading.CompareAndSwap(true, false):
			// The state is being read: let the RPC finish meanwhile.
			close(release)
			admitErr = <-result
		}
	}, nil)
	go func() { result <- a.Admit(ctx, rpc(DefaultFamily, 200)) }()
	<-inLease
	if err := a.StopFamily(ctx, DefaultFamily, "suspected drain"); err != nil {
		t.Fatal(err)
	}
	reading.Store(true)
	st, err := a.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if reading.Load() {
		t.Fatal("the state was not read from the store")
	}
	if len(st) != 1 || !st[0].Stopped {
		t.Fatalf("state after the stop: %+v", st)
	}
	if code(admitErr) != wire.CodeStopped {
		t.Fatalf("an RPC admitted after StopFamily returned, while the state was read: %v, want guard_stopped", admitErr)
	}
}
