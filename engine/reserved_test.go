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
