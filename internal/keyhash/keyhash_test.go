package keyhash_test

import (
	"context"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/keyhash"
	"github.com/sluicehq/sluice/store/memstore"
)

const (
	pepper        = "test-key-pepper-0123456789abcdefghij"
	compactPepper = keyhash.CompactPrefix + pepper
)

// TestHashKnownAnswers pins the hash to HMAC-SHA256(pepper, purpose ‖ 0 ‖
// value), computed independently, in hex:
//
//	printf 'partition\0user:42' | openssl dgst -sha256 -hmac "$PEPPER"
//
// and under a pepper in the compact form, whose prefix keys the MAC with
// the rest, by its first 16 bytes in unpadded base64url:
//
//	printf 'partition\0user:42' | openssl dgst -sha256 -hmac "$PEPPER" -binary |
//		head -c 16 | base64 | tr '+/' '-_' | tr -d =
func TestHashKnownAnswers(t *testing.T) {
	h, compact := keyhash.New([]byte(pepper)), keyhash.New([]byte(compactPepper))
	for _, c := range []struct {
		h                    *keyhash.Hasher
		purpose, value, want string
	}{
		{h, keyhash.PurposePartition, "user:42", "5dac9a48e538f50e896ac2f09043b11c2e3fe5da263043a2c624dc0ad2ff889b"},
		{h, keyhash.PurposeKey, "per-minute", "6614b26a98aa17e0e309e37fb2a0506764a4e103e12290f8cfb470ebc804fff0"},
		{compact, keyhash.PurposePartition, "user:42", "TcOPGYhVyNcZnafRzJPqAw"},
		{compact, keyhash.PurposeKey, "per-minute", "PepM98cwRrfoE-PYls7G-Q"},
	} {
		// Twice: the second call reuses a pooled MAC, which must start clean.
		for range 2 {
			if got := c.h.Hash(c.purpose, c.value); got != c.want {
				t.Errorf("Hash(%q, %q) = %s, want %s", c.purpose, c.value, got, c.want)
			}
		}
	}
	if keyhash.New([]byte(pepper+"x")).Hash(keyhash.PurposeKey, "per-minute") == h.Hash(keyhash.PurposeKey, "per-minute") {
		t.Error("another pepper gives the same hash")
	}
	if h.Hash(keyhash.PurposeKey, "a") == h.Hash(keyhash.PurposePartition, "a") {
		t.Error("two purposes give the same hash")
	}
}

// TestNewPepperIsCompact checks that a new pepper is in the compact form,
// random, and names every value by 22 base64url characters.
func TestNewPepperIsCompact(t *testing.T) {
	a, b := keyhash.NewPepper(), keyhash.NewPepper()
	if a == b {
		t.Fatalf("two new peppers are equal: %q", a)
	}
	for _, p := range []string{a, b} {
		rest, ok := strings.CutPrefix(p, keyhash.CompactPrefix)
		if !ok || len(rest) != 43 || strings.Trim(rest, base64URL) != "" {
			t.Fatalf("NewPepper = %q, want %q and 43 base64url characters", p, keyhash.CompactPrefix)
		}
		h := keyhash.New([]byte(p))
		for _, v := range []string{"", "user:42", strings.Repeat("x", 1000)} {
			if name := h.Hash(keyhash.PurposeKey, v); len(name) != 22 || strings.Trim(name, base64URL) != "" {
				t.Errorf("Hash(key, %.10q…) = %q, want 22 base64url characters", v, name)
			}
		}
	}
	if name := keyhash.New([]byte(pepper)).Hash(keyhash.PurposeKey, "user:42"); len(name) != 64 || strings.Trim(name, "0123456789abcdef") != "" {
		t.Errorf("a pepper of the hex form named %q, want 64 lowercase hex digits", name)
	}
}

const base64URL = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"

// TestStepHashesEveryIdentifier checks that every key a command can name is
// hashed, that data is not, and that the input is left as it was.
func TestStepHashesEveryIdentifier(t *testing.T) {
	h := keyhash.New([]byte(pepper))
	refill := int64(500)
	cmds := []engine.Command{
		{Op: engine.OpHit, Cost: 1, Windows: []engine.Window{{Key: "w", Kind: algo.KindFixed, Limit: 1, WindowMs: 1000}}},
		{Op: engine.OpReserve, Cost: 1, Receipt: "r", Budgets: []engine.Budget{{Key: "b", Limit: 1, WindowMs: 1000, Refundable: true}}},
		{Op: engine.OpSet, Key: "k", Value: "v", TTLMs: 1000},
		{Op: engine.OpAcquire, Key: "g", Lease: "lease-1", Limit: 1, TTLMs: 1000},
		{Op: engine.OpPaceTake, Key: "p", Limit: 1, WindowMs: 1000, RefillPermille: &refill},
	}
	orig := deepCopy(cmds)
	st := h.Step("part", cmds)
	if !reflect.DeepEqual(cmds, orig) {
		t.Fatal("Step modified its input")
	}
	k := func(v string) string { return h.Hash(keyhash.PurposeKey, v) }
	if want := h.Hash(keyhash.PurposePartition, "part"); st.Partition != want {
		t.Errorf("partition %q, want %q", st.Partition, want)
	}
	c := st.Commands
	if c[0].Windows[0].Key != k("w") || c[1].Budgets[0].Key != k("b") || c[1].Receipt != k("r") ||
		c[2].Key != k("k") || c[3].Key != k("g") || c[4].Key != k("p") {
		t.Errorf("a key was not hashed: %+v", c)
	}
	if c[2].Value != "v" || c[3].Lease != "lease-1" || c[0].Windows[0].Limit != 1 || *c[4].RefillPermille != 500 {
		t.Errorf("data was changed: %+v", c)
	}
	steps := h.StepsIn(new(keyhash.Scratch), []engine.Step{{Partition: "part", Commands: cmds}, {Partition: "other", Commands: cmds}})
	if !reflect.DeepEqual(steps[0], st) {
		t.Errorf("StepsIn = %+v, want %+v", steps[0], st)
	}
	// The copies share backing arrays, each slice capped at its length:
	// appending to one never writes into the next.
	want := deepCopy(steps[1].Commands)
	_ = append(steps[0].Commands, engine.Command{Op: engine.OpGet, Key: "x"})
	_ = append(steps[0].Commands[0].Windows, engine.Window{Key: "x"})
	_ = append(steps[0].Commands[1].Budgets, engine.Budget{Key: "x"})
	if !reflect.DeepEqual(steps[1].Commands, want) {
		t.Errorf("appending to the first step's copies changed the second's: %+v", steps[1].Commands)
	}
}

// TestStepsInReusesItsScratch checks that a copy made in a Scratch is the
// copy Steps makes, that a Scratch grown to a request's size copies the
// next without allocating, and that Reset drops every value a copy
// referred to, so that a pooled Scratch keeps no caller's data alive.
func TestStepsInReusesItsScratch(t *testing.T) {
	h := keyhash.New([]byte(pepper))
	big := []engine.Step{
		{Partition: "a", Commands: []engine.Command{
			engine.Hit(1, engine.Window{Key: "w1", Kind: algo.KindFixed, Limit: 1, WindowMs: 1000}, engine.Window{Key: "w2", Kind: algo.KindFixed, Limit: 2, WindowMs: 1000}),
			{Op: engine.OpReserve, Cost: 1, Receipt: "r", Budgets: []engine.Budget{{Key: "b", Limit: 1, WindowMs: 1000}}},
		}},
		{Partition: "b", Commands: []engine.Command{{Op: engine.OpSet, Key: "k", Value: "a value", TTLMs: 1000}}},
	}
	small := []engine.Step{{Partition: "c", Commands: []engine.Command{{Op: engine.OpGet, Key: "k"}}}}
	var sc keyhash.Scratch
	for _, steps := range [][]engine.Step{big, small, big} {
		if got, want := h.StepsIn(&sc, steps), h.StepsIn(new(keyhash.Scratch), steps); !reflect.DeepEqual(got, want) {
			t.Fatalf("StepsIn = %+v, want %+v", got, want)
		}
		sc.Reset()
	}
	if n := testing.AllocsPerRun(100, func() {
		_ = h.StepsIn(&sc, big)
		sc.Reset()
	}); n != 0 {
		t.Errorf("StepsIn in a grown Scratch: %v allocations, want 0", n)
	}
	// The copy's slices alias the Scratch's arrays: after Reset every
	// element of them, to their capacity, is zero.
	copied := h.StepsIn(&sc, big)
	cmds := copied[0].Commands[:cap(copied[0].Commands)]
	windows := copied[0].Commands[0].Windows[:cap(copied[0].Commands[0].Windows)]
	budgets := copied[0].Commands[1].Budgets[:cap(copied[0].Commands[1].Budgets)]
	sc.Reset()
	for i := range cmds {
		if !reflect.DeepEqual(cmds[i], engine.Command{}) {
			t.Errorf("after Reset, command %d still holds %+v", i, cmds[i])
		}
	}
	for i := range windows {
		if windows[i] != (engine.Window{}) {
			t.Errorf("after Reset, window %d still holds %+v", i, windows[i])
		}
	}
	for i := range budgets {
		if budgets[i] != (engine.Budget{}) {
			t.Errorf("after Reset, budget %d still holds %+v", i, budgets[i])
		}
	}
	for i := range copied {
		if !reflect.DeepEqual(copied[i], engine.Step{}) {
			t.Errorf("after Reset, step %d still holds %+v", i, copied[i])
		}
	}
}

// TestStoreReachesHashedRecords checks that a batch through Store lands in
// the hashed partition under hashed keys of the wrapped store, where a
// client hashing with the same pepper finds it.
func TestStoreReachesHashedRecords(t *testing.T) {
	ctx := context.Background()
	mem, err := memstore.New(memstore.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	h := keyhash.New([]byte(pepper))
	hashed := engine.New(keyhash.NewStore(mem, h))
	raw := engine.New(mem)

	var out engine.StepResult
	if err := hashed.Apply(ctx, "limiter", &out, engine.Set("config", "v1", 60_000)); err != nil {
		t.Fatal(err)
	}
	if err := raw.Apply(ctx, "limiter", &out, engine.Get("config")); err != nil {
		t.Fatal(err)
	}
	if out.Results[0].Found {
		t.Error("the record is under the raw partition name")
	}
	if err := raw.Apply(ctx, h.Hash(keyhash.PurposePartition, "limiter"), &out, engine.Get(h.Hash(keyhash.PurposeKey, "config"))); err != nil {
		t.Fatal(err)
	}
	if !out.Results[0].Found || out.Results[0].Value != "v1" {
		t.Errorf("hashed record: %+v, want v1", out.Results[0])
	}

	// A request with an operation id records its replay under the hashed
	// step: a retry replays rather than charging again.
	req := &engine.Request{OperationID: engine.NewOperationID(), Steps: []engine.Step{{Partition: "ctr", Commands: []engine.Command{engine.Incr("n", 1, 60_000)}}}}
	for i, want := range []struct {
		n        int64
		replayed bool
	}{{1, false}, {1, true}} {
		resp, err := hashed.Do(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if got := resp.Steps[0]; got.Results[0].Int != want.n || got.Replayed != want.replayed {
			t.Errorf("attempt %d: %+v, want n=%d replayed=%v", i, got, want.n, want.replayed)
		}
	}
	if err := keyhash.NewStore(mem, h).Close(); err != nil {
		t.Fatal(err)
	}
	if err := raw.Apply(ctx, "x", &out, engine.Get("y")); err != nil {
		t.Errorf("closing the wrapper closed the wrapped store: %v", err)
	}
}

func deepCopy(cmds []engine.Command) []engine.Command {
	out := make([]engine.Command, len(cmds))
	for i, c := range cmds {
		c.Windows = append([]engine.Window(nil), c.Windows...)
		c.Budgets = append([]engine.Budget(nil), c.Budgets...)
		if c.RefillPermille != nil {
			v := *c.RefillPermille
			c.RefillPermille = &v
		}
		out[i] = c
	}
	return out
}

// BenchmarkHash hashes one key again and again (one), keys drawn in turn
// from a set of 10,000 (repeated), from a set of 20,000, more than the memo
// holds (churn), and keys never seen in the last 2^18 (distinct), on one
// goroutine and on 64 (-parallel). Each runs on a Hasher of its own.
func BenchmarkHash(b *testing.B) {
	const pepper = "0123456789abcdef0123456789abcdef"
	b.Run("one", func(b *testing.B) {
		h := keyhash.New([]byte(pepper))
		b.ReportAllocs()
		for b.Loop() {
			_ = h.Hash(keyhash.PurposeKey, "user:12345:orders")
		}
	})
	for _, c := range []struct {
		name string
		keys []string
	}{{"repeated", benchKeys(10_000)}, {"churn", benchKeys(20_000)}, {"distinct", benchKeys(1 << 18)}} {
		b.Run(c.name, func(b *testing.B) {
			h := keyhash.New([]byte(pepper))
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				_ = h.Hash(keyhash.PurposeKey, c.keys[i])
				if i++; i == len(c.keys) {
					i = 0
				}
			}
		})
		b.Run(c.name+"-parallel", func(b *testing.B) {
			h := keyhash.New([]byte(pepper))
			b.ReportAllocs()
			b.SetParallelism(max(1, 64/runtime.GOMAXPROCS(0)))
			var next atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				// Each goroutine starts at its own place in the keys.
				i := int(next.Add(7919)) % len(c.keys)
				for pb.Next() {
					_ = h.Hash(keyhash.PurposeKey, c.keys[i])
					if i++; i == len(c.keys) {
						i = 0
					}
				}
			})
		})
	}
}

// benchKeys returns n distinct keys shaped like a per-user limit's.
func benchKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "user:" + strconv.Itoa(1_000_000+i) + ":orders"
	}
	return keys
}

func BenchmarkSteps(b *testing.B) {
	h := keyhash.New([]byte("0123456789abcdef0123456789abcdef"))
	steps := make([]engine.Step, 4)
	for i := range steps {
		steps[i].Partition = "tenant-" + strconv.Itoa(i)
		for j := range 8 {
			steps[i].Commands = append(steps[i].Commands, engine.Hit(1, engine.Window{Key: "w" + strconv.Itoa(j), Kind: algo.KindFixed, Limit: 10, WindowMs: 60_000}))
		}
	}
	b.Run("copy=new", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = h.StepsIn(new(keyhash.Scratch), steps)
		}
	})
	b.Run("copy=scratch", func(b *testing.B) {
		b.ReportAllocs()
		var sc keyhash.Scratch
		for b.Loop() {
			_ = h.StepsIn(&sc, steps)
			sc.Reset()
		}
	})
}
