package engine_test

import (
	"context"
	"errors"
	"testing"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/store/memstore"
)

// shortStore answers one result fewer than the commands it ran, as a
// broken store would.
type shortStore struct{ *memstore.Store }

func (s shortStore) Apply(ctx context.Context, b *engine.Batch, out *engine.StepResult) error {
	err := s.Store.Apply(ctx, b, out)
	out.Results = out.Results[:len(out.Results)-1]
	return err
}

func (s shortStore) ApplyJoint(ctx context.Context, bs []*engine.Batch, outs []engine.StepResult) error {
	for i, b := range bs {
		if err := s.Apply(ctx, b, &outs[i]); err != nil {
			return err
		}
	}
	return nil
}

func (s shortStore) Joins() bool { return true }

// shortRequests answers a request with one step result fewer than its
// steps, as a broken RequestStore would.
type shortRequests struct{ *memstore.Store }

func (s shortRequests) Do(ctx context.Context, r *engine.Request) (*engine.Response, error) {
	resp, err := engine.New(s.Store).Do(ctx, r)
	if err != nil {
		return nil, err
	}
	resp.Steps = resp.Steps[:len(resp.Steps)-1]
	return resp, nil
}

// A store whose answer does not match what it ran (a result per command,
// a step result per step) is refused with ErrCorrupt on every path of the
// engine, so that no caller indexing the results can fail on it.
func TestStoreAnswersOfTheWrongShapeAreCorrupt(t *testing.T) {
	st, err := memstore.New(memstore.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	cmds := []engine.Command{engine.Set("k", "v", 60_000), engine.Get("k")}
	var out engine.StepResult

	short := engine.New(shortStore{st})
	if err := short.Apply(ctx, "p", &out, cmds...); !errors.Is(err, engine.ErrCorrupt) {
		t.Errorf("Apply: %v, want ErrCorrupt", err)
	}
	if err := short.ApplyReserved(ctx, "p", &out, cmds...); !errors.Is(err, engine.ErrCorrupt) {
		t.Errorf("ApplyReserved: %v, want ErrCorrupt", err)
	}
	if _, err := short.Do(ctx, &engine.Request{Steps: []engine.Step{{Partition: "p", Commands: cmds}}}); !errors.Is(err, engine.ErrCorrupt) {
		t.Errorf("Do: %v, want ErrCorrupt", err)
	}
	outs := make([]engine.StepResult, 1)
	steps := []engine.Step{{Partition: engine.ReservedPartition("j"), Commands: cmds}}
	if err := short.ApplyReservedJointDeferred(ctx, steps, outs); !errors.Is(err, engine.ErrCorrupt) {
		t.Errorf("ApplyReservedJointDeferred: %v, want ErrCorrupt", err)
	}

	two := &engine.Request{Steps: []engine.Step{{Partition: "a", Commands: cmds}, {Partition: "b", Commands: cmds}}}
	if _, err := engine.New(shortRequests{st}).Do(ctx, two); !errors.Is(err, engine.ErrCorrupt) {
		t.Errorf("Do on a RequestStore: %v, want ErrCorrupt", err)
	}

	// The same calls on the store itself answer in full.
	whole := engine.New(st)
	if err := whole.Apply(ctx, "p", &out, cmds...); err != nil || len(out.Results) != 2 {
		t.Fatalf("Apply on the store itself: %d results, %v", len(out.Results), err)
	}
	if resp, err := whole.Do(ctx, two); err != nil || len(resp.Steps) != 2 {
		t.Fatalf("Do on the store itself: %+v, %v", resp, err)
	}
}
