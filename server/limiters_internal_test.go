package server

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"pgregory.net/rapid"

	"github.com/sluicehq/sluice/pace"
	"github.com/sluicehq/sluice/store/memstore"
	"github.com/sluicehq/sluice/wire"
)

// limiterEdges are, per field of a limiter configuration, the values at and
// around its bounds and a setter.
func limiterEdges() []struct {
	field  string
	values []float64
	set    func(*wire.LimiterConfig, float64)
} {
	const day = 24 * 3600 * 1000
	around := func(edges ...int64) []float64 {
		var vs []float64
		for _, e := range edges {
			vs = append(vs, float64(e-1), float64(e), float64(e+1))
		}
		return vs
	}
	return []struct {
		field  string
		values []float64
		set    func(*wire.LimiterConfig, float64)
	}{
		{"limitPerWindow", around(0, wire.MaxLimiterLimit), func(c *wire.LimiterConfig, v float64) { c.LimitPerWindow = int64(v) }},
		{"windowMs", around(0, wire.MaxLimiterMs), func(c *wire.LimiterConfig, v float64) { c.WindowMs = int64(v) }},
		{"concurrency", around(0, wire.MaxLimiterConcurrency), func(c *wire.LimiterConfig, v float64) { c.Concurrency = int64(v) }},
		{"leaseTtlMs", around(0, wire.MinLimiterLeaseTTLMs, wire.MaxLimiterMs), func(c *wire.LimiterConfig, v float64) { c.LeaseTTLMs = int64(v) }},
		{"refillFraction", []float64{-0.001, 0, 0.0005, 0.001, 0.3, 0.333, 0.3333, 0.5, 0.999, 1, 1.001}, func(c *wire.LimiterConfig, v float64) { c.RefillFraction = v }},
		{"maxWaitMs", around(0, wire.MaxLimiterMs), func(c *wire.LimiterConfig, v float64) { c.MaxWaitMs = int64(v) }},
		{"startToleranceMs", around(0, 100, wire.MaxLimiterMs-60_000, wire.MaxLimiterMs), func(c *wire.LimiterConfig, v float64) { c.StartToleranceMs = int64(v) }},
		{"retry.attempts", around(0, wire.MaxLimiterAttempts), func(c *wire.LimiterConfig, v float64) { c.Retry.Attempts = int64(v) }},
		{"retry.floorMs", around(0, 500, 30_000, day, wire.MaxLimiterMs), func(c *wire.LimiterConfig, v float64) { c.Retry.FloorMs = int64(v) }},
		{"retry.ceilingMs", around(0, 500, 30_000, day, wire.MaxLimiterMs), func(c *wire.LimiterConfig, v float64) { c.Retry.CeilingMs = int64(v) }},
		{"retry.factor", []float64{-1, 0, 0.5, 1, 2, 2.5, 100, 100.5}, func(c *wire.LimiterConfig, v float64) { c.Retry.Factor = v }},
	}
}

// checkAgreement fails unless the wire's validation, which names the fields
// as a limits file does, agrees with the pace package's, which decides: c
// is valid on the wire exactly when pace accepts it and its refill fraction
// is in thousandths (pace keeps thousandths, so a finer one would not read
// back as written). A valid configuration also survives the conversion both
// ways unchanged.
func checkAgreement(c wire.LimiterConfig) error {
	wireErr := c.Validate()
	paceErr := toPace(c).Validate()
	thousandths := c.RefillFraction != 0.0005 && c.RefillFraction != 0.3333
	if (wireErr == nil) != (paceErr == nil && thousandths) {
		return fmt.Errorf("%+v: the wire says %v, pace says %v", c, wireErr, paceErr)
	}
	if back := fromPace(toPace(c)); wireErr == nil && back != c {
		return fmt.Errorf("%+v reads back as %+v", c, back)
	}
	return nil
}

func validLimiterConfig() wire.LimiterConfig {
	return wire.LimiterConfig{LimitPerWindow: 100, WindowMs: 60_000, Concurrency: 4, LeaseTTLMs: 30_000, RefillFraction: 0.5, MaxWaitMs: 300_000}
}

// TestLimiterValidationAgreesWithPace checks every edge of every field
// alone, then random combinations of edges.
func TestLimiterValidationAgreesWithPace(t *testing.T) {
	edges := limiterEdges()
	for _, e := range edges {
		for _, v := range e.values {
			c := validLimiterConfig()
			e.set(&c, v)
			if err := checkAgreement(c); err != nil {
				t.Errorf("%s %v: %v", e.field, v, err)
			}
		}
	}
	rapid.Check(t, func(t *rapid.T) {
		c := validLimiterConfig()
		for _, i := range rapid.SliceOfNDistinct(rapid.IntRange(0, len(edges)-1), 2, 4, rapid.ID).Draw(t, "fields") {
			edges[i].set(&c, rapid.SampledFrom(edges[i].values).Draw(t, edges[i].field))
		}
		if err := checkAgreement(c); err != nil {
			t.Fatal(err)
		}
	})
}

// TestLimiterNamesAgreeWithPace holds wire.ValidateLimiterName to the names
// pace accepts: "." and "..", which a URL path cannot carry, are refused by
// both.
func TestLimiterNamesAgreeWithPace(t *testing.T) {
	mem, err := memstore.New(memstore.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	reg := pace.NewRegistry(mem)
	rapid.Check(t, func(t *rapid.T) {
		name := rapid.OneOf(
			rapid.StringMatching(`[A-Za-z0-9._-]{0,66}`),
			rapid.StringMatching(`[A-Za-z0-9._/ é:-]{1,8}`),
			rapid.SampledFrom([]string{".", "..", "...", "a.b"}),
		).Draw(t, "name")
		_, err := reg.Config(context.Background(), name)
		paceOK := errors.Is(err, pace.ErrNoSuchLimiter)
		if !paceOK && !errors.Is(err, pace.ErrInvalidConfig) {
			t.Fatalf("%q: %v", name, err)
		}
		wireOK := wire.ValidateLimiterName(name) == nil
		if wireOK != paceOK {
			t.Fatalf("%q: the wire accepts it: %v; pace: %v", name, wireOK, err)
		}
	})
}
