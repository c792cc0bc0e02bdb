package engine_test

import (
	"context"
	"errors"
	"testing"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/store/memstore"
)

// ApplyReservedPartition reaches the partition ApplyReserved names, and
// refuses a partition that is not reserved: a request's partition.
func TestApplyReservedPartition(t *testing.T) {
	st, err := memstore.New(memstore.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	e := engine.New(st)
	ctx := context.Background()
	var out engine.StepResult
	if err := e.ApplyReserved(ctx, "state", &out, engine.Set("k", "v", 60_000)); err != nil {
		t.Fatal(err)
	}
	if err := e.ApplyReservedPartition(ctx, engine.ReservedPartition("state"), &out, engine.Get("k")); err != nil {
		t.Fatal(err)
	}
	if r := out.Results[0]; !r.Found || r.Value != "v" {
		t.Fatalf("reserved partition read %+v, want the value ApplyReserved set", r)
	}
	if err := e.ApplyReservedPartition(ctx, "state", &out, engine.Get("k")); !errors.Is(err, engine.ErrInvalid) {
		t.Fatalf("an unreserved partition: %v, want ErrInvalid", err)
	}
	if err := e.Apply(ctx, "state", &out, engine.Get("k")); err != nil || out.Results[0].Found {
		t.Fatalf("the request partition of the same name read %+v, %v; want nothing found", out.Results[0], err)
	}
}

// jointStore records the joint steps it is given, running each batch on
// its memstore in turn (enough to see what the engine hands it).
type jointStore struct {
	*memstore.Store
	steps [][]string
}

func (s *jointStore) ApplyJoint(ctx context.Context, bs []*engine.Batch, outs []engine.StepResult) error {
	var names []string
	for i, b := range bs {
		names = append(names, b.Partition)
		if err := s.Apply(ctx, b, &outs[i]); err != nil {
			return err
		}
	}
	s.steps = append(s.steps, names)
	return nil
}

// ApplyReservedJointDeferred hands a JointStore the steps on their reserved
// partitions, refuses what is invalid before the store sees it, and on any
// other store runs nothing and answers errors.ErrUnsupported.
func TestApplyReservedJointDeferred(t *testing.T) {
	st, err := memstore.New(memstore.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	outs := make([]engine.StepResult, 2)
	steps := []engine.Step{
		{Partition: engine.ReservedPartition("a"), Commands: []engine.Command{engine.Set("k", "a", 60_000)}},
		{Partition: engine.ReservedPartition("b"), Commands: []engine.Command{engine.Set("k", "b", 60_000)}},
	}

	plain := engine.New(struct{ engine.Store }{st}) // the store's Apply alone
	if plain.Joins() {
		t.Fatal("a store without ApplyJoint reported as running joint steps")
	}
	if err := plain.ApplyReservedJointDeferred(ctx, steps, outs); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("on a store without joint steps: %v, want ErrUnsupported", err)
	}
	var out engine.StepResult
	if err := plain.ApplyReserved(ctx, "a", &out, engine.Get("k")); err != nil || out.Results[0].Found {
		t.Fatalf("the unsupported step ran: %+v, %v", out.Results, err)
	}

	js := &jointStore{Store: st}
	e := engine.New(js)
	if !e.Joins() {
		t.Fatal("a JointStore not reported as running joint steps")
	}
	if err := e.ApplyReservedJointDeferred(ctx, steps, outs); err != nil {
		t.Fatal(err)
	}
	if len(js.steps) != 1 || len(js.steps[0]) != 2 || js.steps[0][0] != steps[0].Partition || js.steps[0][1] != steps[1].Partition {
		t.Fatalf("the store was given %q, want one step on both partitions", js.steps)
	}
	invalid := map[string][]engine.Step{
		"no batch":           nil,
		"too many batches":   make([]engine.Step, engine.MaxJointBatches+1),
		"unreserved":         {steps[0], {Partition: "b", Commands: steps[1].Commands}},
		"a partition twice":  {steps[0], steps[0]},
		"an invalid command": {steps[0], {Partition: engine.ReservedPartition("b"), Commands: []engine.Command{engine.Set("", "x", 60_000)}}},
	}
	for name, bad := range invalid {
		if err := e.ApplyReservedJointDeferred(ctx, bad, make([]engine.StepResult, len(bad))); !errors.Is(err, engine.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	if err := e.ApplyReservedJointDeferred(ctx, steps, outs[:1]); !errors.Is(err, engine.ErrInvalid) {
		t.Errorf("too few results: %v, want ErrInvalid", err)
	}
	if len(js.steps) != 1 {
		t.Fatalf("invalid steps reached the store: %q", js.steps)
	}
}

// CheckJoint accepts a joint step of up to MaxJointBatches distinct
// partitions with a result for each, and refuses any other with
// ErrInvalid.
func TestCheckJoint(t *testing.T) {
	batch := func(p string) *engine.Batch { return &engine.Batch{Partition: p} }
	outs := make([]engine.StepResult, engine.MaxJointBatches+1)
	var full []*engine.Batch
	for i := range engine.MaxJointBatches {
		full = append(full, batch(string(rune('a'+i))))
	}
	for name, tc := range map[string]struct {
		bs    []*engine.Batch
		outs  int
		valid bool
	}{
		"empty":             {nil, 0, true},
		"one":               {full[:1], 1, true},
		"the most":          {full, engine.MaxJointBatches, true},
		"too many":          {append(full, batch("z")), engine.MaxJointBatches + 1, false},
		"too few results":   {full[:2], 1, false},
		"a partition twice": {[]*engine.Batch{batch("a"), batch("b"), batch("a")}, 3, false},
	} {
		err := engine.CheckJoint(tc.bs, outs[:tc.outs])
		if tc.valid != (err == nil) || err != nil && !errors.Is(err, engine.ErrInvalid) {
			t.Errorf("%s: %v, want valid %t", name, err, tc.valid)
		}
	}
}
