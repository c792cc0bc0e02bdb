package pace_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice/pace"
)

func TestConfigReadsTheStoredConfiguration(t *testing.T) {
	ctx := context.Background()
	store := newStore(t)
	reg := pace.NewRegistry(store)
	if _, err := reg.Config(ctx, "billing"); !errors.Is(err, pace.ErrNoSuchLimiter) {
		t.Errorf("Config of an unconfigured name: %v, want ErrNoSuchLimiter", err)
	}
	if _, err := reg.Config(ctx, "no spaces"); !errors.Is(err, pace.ErrInvalidConfig) {
		t.Errorf("Config of an invalid name: %v, want ErrInvalidConfig", err)
	}
	want := config(100, time.Minute)
	want.Concurrency, want.RefillFraction = 4, 0.25
	want.Retry = pace.Retry{Attempts: 2, Factor: 3}
	configure(t, reg, "billing", want)
	// A second registry has no cached state: it reads the store.
	got, err := pace.NewRegistry(store).Config(ctx, "billing")
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Errorf("Config = %+v, want %+v", got, want)
	}
}
