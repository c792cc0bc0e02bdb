package redisstore_test

import (
	"errors"
	"maps"
	"testing"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/testclock"
	"github.com/sluicehq/sluice/store/storetest"
)

// TestCorruptRecords plants records the batch code never writes, each one
// that algo's decoding refuses in its Go encoding — a count outside
// 0…MaxLimit, a log out of order, a number that is not an integer, a lease
// id too long — and runs a batch over it after a command that would write:
// the batch fails with ErrCorrupt, as on every other store, and changes
// nothing. A corrupt window is never evaluated: a negative count would
// admit more than the limit.
func TestCorruptRecords(t *testing.T) {
	srv := redistest.Start(t)
	raw := srv.Client(t)
	const epoch = storetest.DefaultEpoch
	cfg := freshConfig(testclock.At(epoch))
	s := openStore(t, srv, cfg)
	eng := engine.New(s)
	prefix := cfg.Prefix + ":{p}:"

	win := func(kind algo.Kind) engine.Command {
		return engine.Hit(1, engine.Window{Key: "k", Kind: kind, Limit: 3, WindowMs: 60_000})
	}
	// Each record is a Lua table constructor, packed by the same library
	// the batch code decodes with; E is a live expiry, S the epoch.
	for _, c := range []struct {
		name, record string
		cmd          engine.Command
	}{
		{"fixed count below zero", "{2, E, S, -5}", win(algo.KindFixed)},
		{"fixed count above MaxLimit", "{2, E, S, 2^40 + 1}", win(algo.KindFixed)},
		{"fixed count not an integer", "{2, E, S, 0.5}", win(algo.KindFixed)},
		{"sliding previous count below zero", "{3, E, S, 0, -5}", win(algo.KindSliding)},
		{"sliding count above MaxLimit", "{3, E, S, 2^40 + 1, 0}", win(algo.KindSliding)},
		{"log entry below one", "{4, E, {S, -5}}", win(algo.KindLog)},
		{"log entry above MaxLimit", "{4, E, {S, 2^40 + 1}}", win(algo.KindLog)},
		{"log entry not a number", "{4, E, {'x', 1}}", win(algo.KindLog)},
		{"log out of order", "{4, E, {S, 1, S - 1, 1}}", win(algo.KindLog)},
		{"log entries at one instant", "{4, E, {S, 1, S, 1}}", win(algo.KindLog)},
		{"gcra arrival time not an integer", "{5, E, S + 0.5, 0}", win(algo.KindGCRA)},
		{"kind not an integer", "{1.5, E, 'x'}", engine.Get("k")},
		{"expiry not an integer", "{1, E + 0.5, 'x'}", engine.Get("k")},
		{"lease id too long", "{7, E, {E, string.rep('x', 65)}}", engine.Acquire("k", "a", 3, 60_000)},
		{"lease expiry not an integer", "{7, E, {E + 0.5, 'x'}}", engine.Acquire("k", "a", 3, 60_000)},
		{"receipt cost not an integer", "{6, E, 1.5, {'b'}}", engine.Refund("k")},
	} {
		t.Run(c.name, func(t *testing.T) {
			plant := "local E, S = tonumber(ARGV[1]), tonumber(ARGV[2]) " +
				"redis.call('SET', KEYS[1], cmsgpack.pack(" + c.record + ")) return 1"
			if err := raw.Eval(t.Context(), plant, []string{prefix + "k:k"}, epoch+60_000, epoch).Err(); err != nil {
				t.Fatal(err)
			}
			var out engine.StepResult
			if err := eng.Apply(t.Context(), "p", &out, engine.Set("b", "1", 60_000)); err != nil {
				t.Fatal(err)
			}
			before := snapshot(t, raw, prefix+"*")
			err := eng.Apply(t.Context(), "p", &out, engine.Incr("b", 1, 60_000), c.cmd)
			if !errors.Is(err, engine.ErrCorrupt) {
				t.Fatalf("a batch over %s: %v (%+v), want ErrCorrupt", c.record, err, out.Results)
			}
			if after := snapshot(t, raw, prefix+"*"); !maps.Equal(before, after) {
				t.Fatalf("the partition changed:\n\tbefore: %q\n\tafter:  %q", before, after)
			}
		})
	}
}
