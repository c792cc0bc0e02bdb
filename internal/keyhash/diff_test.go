package keyhash_test

import (
	"math/rand/v2"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/keyhash"
)

// randValues returns n values drawn from r: mostly short, some either side
// of the longest input memoised, a few long; of ASCII, zero bytes, invalid
// UTF-8 and multi-byte runes.
func randValues(r *rand.Rand, n int) []string {
	pieces := []string{"a", "b", "user:", "\x00", "\x00\x00", "é", "日本", "🙂", "\xff", "\xc3", "0", ":"}
	vs := make([]string, n)
	for i := range vs {
		var l int
		switch r.IntN(10) {
		case 0:
			l = r.IntN(3000)
		case 1, 2:
			l = keyhash.MemoMaxIn - 16 + r.IntN(32)
		default:
			l = r.IntN(40)
		}
		var b strings.Builder
		for b.Len() < l {
			b.WriteString(pieces[r.IntN(len(pieces))])
		}
		vs[i] = b.String()
	}
	return vs
}

var randPurposes = []string{keyhash.PurposePartition, keyhash.PurposeKey, "", "k", "kez", "partitiom", "é"}

// TestHashMatchesHMAC draws random inputs, most of them asked for several
// times so that they are answered from the memo, and requires Hash, Step
// and StepsIn (one Scratch serving every request in turn) to give exactly
// the names computed here, on a plain Hasher and on a narrow one, under a
// pepper of each form.
func TestHashMatchesHMAC(t *testing.T) {
	r := rand.New(rand.NewPCG(76, 1))
	vs := randValues(r, 3000)
	for _, c := range []struct {
		name, pepper string
		h            *keyhash.Hasher
	}{
		{"plain", pepper, keyhash.New([]byte(pepper))},
		{"narrow", pepper, keyhash.NewNarrow([]byte(pepper))},
		{"compact", compactPepper, keyhash.New([]byte(compactPepper))},
		{"compact narrow", compactPepper, keyhash.NewNarrow([]byte(compactPepper))},
	} {
		fresh := func(p, v string) string { return freshWith(c.pepper, p, v) }
		for k := range 40_000 {
			p, v := randPurposes[r.IntN(len(randPurposes))], vs[r.IntN(len(vs))]
			if got, want := c.h.Hash(p, v), fresh(p, v); got != want {
				t.Fatalf("%s, hash %d: Hash(%q, %q) = %s, want %s", c.name, k, p, v, got, want)
			}
		}
		var sc keyhash.Scratch
		for k := range 300 {
			steps := randSteps(r, vs)
			orig := make([]engine.Step, len(steps))
			for i, s := range steps {
				orig[i] = engine.Step{Partition: s.Partition, Commands: deepCopy(s.Commands)}
			}
			want := freshSteps(c.pepper, steps)
			if got := c.h.StepsIn(&sc, steps); !reflect.DeepEqual(got, want) {
				t.Fatalf("%s, request %d: StepsIn = %+v, want %+v", c.name, k, got, want)
			}
			sc.Reset()
			if !reflect.DeepEqual(steps, orig) {
				t.Fatalf("%s, request %d: StepsIn modified its input", c.name, k)
			}
			if got := c.h.Step(steps[0].Partition, steps[0].Commands); !reflect.DeepEqual(got, want[0]) {
				t.Fatalf("%s, request %d: Step = %+v, want %+v", c.name, k, got, want[0])
			}
		}
	}
}

// TestMemoUnderConcurrentRandomUse has 32 goroutines hash random inputs
// from a small pool at once on a narrow Hasher, so that they replace the
// same four entries again and again while others read them; every answer
// must be the fresh hash. Run with -race.
func TestMemoUnderConcurrentRandomUse(t *testing.T) {
	r := rand.New(rand.NewPCG(76, 2))
	vs := randValues(r, 64)
	type in struct{ p, v, want string }
	var ins []in
	for _, v := range vs {
		for _, p := range randPurposes[:4] {
			ins = append(ins, in{p, v, fresh(p, v)})
		}
	}
	for _, h := range []*keyhash.Hasher{keyhash.New([]byte(pepper)), keyhash.NewNarrow([]byte(pepper))} {
		var wg sync.WaitGroup
		for g := range 32 {
			wg.Go(func() {
				r := rand.New(rand.NewPCG(uint64(g), 3))
				for range 4000 {
					x := ins[r.IntN(len(ins))]
					if got := h.Hash(x.p, x.v); got != x.want {
						t.Errorf("Hash(%q, %q) = %s, want %s", x.p, x.v, got, x.want)
						return
					}
				}
			})
		}
		wg.Wait()
	}
}

// randSteps returns 1 to 4 steps of random commands naming values of vs.
func randSteps(r *rand.Rand, vs []string) []engine.Step {
	pick := func() string { return vs[r.IntN(len(vs))] }
	steps := make([]engine.Step, 1+r.IntN(4))
	for i := range steps {
		steps[i].Partition = pick()
		for range 1 + r.IntN(6) {
			var c engine.Command
			switch r.IntN(4) {
			case 0:
				c = engine.Command{Op: engine.OpHit, Cost: 1}
				for range 1 + r.IntN(3) {
					c.Windows = append(c.Windows, engine.Window{Key: pick(), Kind: algo.KindFixed, Limit: 10, WindowMs: 1000})
				}
			case 1:
				c = engine.Command{Op: engine.OpReserve, Cost: 1, Receipt: pick(), Budgets: []engine.Budget{{Key: pick(), Limit: 5, WindowMs: 1000}}}
			case 2:
				c = engine.Command{Op: engine.OpSet, Key: pick(), Value: pick(), TTLMs: 1000}
			default:
				c = engine.Command{Op: engine.OpAcquire, Key: pick(), Lease: pick(), Limit: 1, TTLMs: 1000}
			}
			steps[i].Commands = append(steps[i].Commands, c)
		}
	}
	return steps
}

// freshSteps is StepsIn under pepper p computed here with freshWith: the
// partition name, every non-empty command key and receipt, and every window
// and budget key hashed.
func freshSteps(p string, steps []engine.Step) []engine.Step {
	fresh := func(purpose, value string) string { return freshWith(p, purpose, value) }
	out := make([]engine.Step, len(steps))
	for i, s := range steps {
		cmds := deepCopy(s.Commands)
		for j := range cmds {
			c := &cmds[j]
			if c.Key != "" {
				c.Key = fresh(keyhash.PurposeKey, c.Key)
			}
			if c.Receipt != "" {
				c.Receipt = fresh(keyhash.PurposeKey, c.Receipt)
			}
			for k := range c.Windows {
				c.Windows[k].Key = fresh(keyhash.PurposeKey, c.Windows[k].Key)
			}
			for k := range c.Budgets {
				c.Budgets[k].Key = fresh(keyhash.PurposeKey, c.Budgets[k].Key)
			}
		}
		out[i] = engine.Step{Partition: fresh(keyhash.PurposePartition, s.Partition), Commands: cmds}
	}
	return out
}
