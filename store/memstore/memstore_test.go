package memstore_test

import (
	"errors"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/testclock"
	"github.com/sluicehq/sluice/store/memstore"
	"github.com/sluicehq/sluice/store/storetest"
)

// TestMain fails the package if any test leaves a goroutine behind: the
// store has no timers and no goroutines of its own.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConformance(t *testing.T) {
	for _, shards := range []int{64, 1} {
		t.Run("shards="+strconv.Itoa(shards), func(t *testing.T) {
			storetest.Run(t, func(t *testing.T, clock engine.Clock) engine.Store {
				cfg := memstore.DefaultConfig()
				cfg.Shards, cfg.Clock = shards, clock
				s, err := memstore.New(cfg)
				if err != nil {
					t.Fatal(err)
				}
				return s
			})
		})
	}
}

// fixture is a store on a test clock with helpers that fail the test on an
// unexpected error.
type fixture struct {
	t     *testing.T
	clock *testclock.Clock
	store *memstore.Store
	eng   *engine.Engine
}

func newFixture(t *testing.T, maxKeys, shards int) *fixture {
	t.Helper()
	clock := testclock.At(storetest.DefaultEpoch)
	s, err := memstore.New(memstore.Config{MaxKeys: maxKeys, Shards: shards, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return &fixture{t: t, clock: clock, store: s, eng: engine.New(s)}
}

// apply runs one batch and returns its results and error.
func (f *fixture) apply(partition string, cmds ...engine.Command) ([]engine.Result, error) {
	var out engine.StepResult
	err := f.eng.Apply(f.t.Context(), partition, &out, cmds...)
	return out.Results, err
}

// must runs one batch that must succeed.
func (f *fixture) must(partition string, cmds ...engine.Command) []engine.Result {
	f.t.Helper()
	res, err := f.apply(partition, cmds...)
	if err != nil {
		f.t.Fatalf("%s: %v", partition, err)
	}
	return res
}

// full runs one batch that must be refused for capacity.
func (f *fixture) full(partition string, cmds ...engine.Command) {
	f.t.Helper()
	if _, err := f.apply(partition, cmds...); !errors.Is(err, engine.ErrCapacity) {
		f.t.Fatalf("%s at capacity: error %v, want ErrCapacity", partition, err)
	}
}

// value reads key, failing the test unless it holds want.
func (f *fixture) value(partition, key, want string) {
	f.t.Helper()
	r := f.must(partition, engine.Get(key))[0]
	if !r.Found || r.Value != want {
		f.t.Fatalf("%s/%s = %q (found %t), want %q", partition, key, r.Value, r.Found, want)
	}
}

// absent fails the test if key holds a live record.
func (f *fixture) absent(partition, key string) {
	f.t.Helper()
	if r := f.must(partition, engine.Get(key))[0]; r.Found {
		f.t.Fatalf("%s/%s = %q, want no record", partition, key, r.Value)
	}
}

func (f *fixture) len(want int) {
	f.t.Helper()
	if got := f.store.Len(); got != want {
		f.t.Fatalf("Len() = %d, want %d", got, want)
	}
}

func TestCapacity(t *testing.T) {
	f := newFixture(t, 3, 1)
	f.must("p1", engine.Set("k", "1", 1000))
	f.must("p2", engine.Set("k", "2", 60_000))
	f.must("p3", engine.Set("k", "3", 60_000))
	f.len(3)

	// Full: a new key is refused, in any partition and for any command,
	// and no live record is evicted to make room.
	f.full("p4", engine.Set("k", "4", 60_000))
	f.full("p1", engine.Set("other", "x", 60_000))
	f.full("p4", engine.Incr("n", 1, 60_000))
	f.full("p4", engine.Acquire("g", "lease", 1, 60_000))
	hit := engine.Hit(1, engine.Window{Key: "w", Kind: algo.KindFixed, Limit: 5, WindowMs: 60_000})
	f.full("p4", hit) // an error, never an allowed hit
	f.len(3)
	f.value("p1", "k", "1")
	f.value("p2", "k", "2")
	f.value("p3", "k", "3")

	// Existing keys can still change.
	f.must("p2", engine.Set("k", "2b", 60_000))
	f.must("p3", engine.Del("k"), engine.Set("k", "3b", 60_000))

	// A batch that would create a key is refused whole.
	f.full("p2", engine.Set("k", "2c", 60_000), engine.Set("new", "x", 60_000))
	f.value("p2", "k", "2b")

	// A replay record is a record too: at capacity an operation id cannot
	// be recorded, so the request is refused rather than left unprotected.
	_, err := f.eng.Do(t.Context(), &engine.Request{
		OperationID: "op",
		Steps:       []engine.Step{{Partition: "p2", Commands: []engine.Command{engine.Set("k", "2d", 60_000)}}},
	})
	if !errors.Is(err, engine.ErrCapacity) {
		t.Fatalf("replay record at capacity: %v, want ErrCapacity", err)
	}
	f.value("p2", "k", "2b")

	// Once p1/k has expired its slot is reclaimed for a new key.
	f.clock.Advance(time.Second)
	f.must("p4", engine.Set("k", "4", 60_000))
	f.len(3)
	f.absent("p1", "k")
	f.value("p4", "k", "4")
	f.full("p5", engine.Set("k", "5", 60_000))

	// A deletion frees a slot at once.
	f.must("p4", engine.Del("k"))
	f.len(2)
	f.must("p5", engine.Set("k", "5", 60_000))
	f.len(3)
}

// TestCapacityReclaimsAnyShard checks that an expired record frees its slot
// for a new key in any partition, not only in partitions of its own shard.
func TestCapacityReclaimsAnyShard(t *testing.T) {
	f := newFixture(t, 1, 64)
	for i := range 16 {
		// Each round the previous round's record has expired. With 64
		// shards, consecutive partitions land in different shards in all
		// but a vanishing share of runs.
		f.must("p"+strconv.Itoa(i), engine.Set("k", "v", 1000))
		f.len(1)
		f.clock.Advance(time.Second)
	}
}

// TestCapacityKeepsPartitionOfSweptRecords checks that a batch whose
// partition holds only expired records, swept to make room for the batch's
// new key, keeps its write and the store keeps its count.
func TestCapacityKeepsPartitionOfSweptRecords(t *testing.T) {
	const maxKeys = 40
	f := newFixture(t, maxKeys, 1)
	for i := range maxKeys / 8 {
		var cmds []engine.Command
		for j := range 8 {
			cmds = append(cmds, engine.Set("old"+strconv.Itoa(8*i+j), "v", 1000))
		}
		f.must("p", cmds...)
	}
	f.len(maxKeys)

	// All 40 expire. The next batch sweeps 32 of them, leaving 8 in p.
	f.clock.Advance(time.Second)
	f.absent("probe", "k")
	f.len(maxKeys - memstore.SweepBatch)

	// Refill to capacity in the same millisecond: no sweep runs.
	for i := range memstore.SweepBatch {
		f.must("q"+strconv.Itoa(i), engine.Set("k", "v", 60_000))
	}
	f.len(maxKeys)

	// A new key in p needs the room p's own expired records hold.
	f.must("p", engine.Set("fresh", "v", 60_000))
	f.value("p", "fresh", "v")
	f.len(memstore.SweepBatch + 1)

	// When everything has expired the count returns to zero.
	f.clock.Advance(time.Minute)
	for range 2 {
		f.absent("probe", "k")
		f.clock.Advance(time.Millisecond)
	}
	f.len(0)
}

// TestModel runs a seeded random workload of sets, deletions, reads and
// clock steps on a small store and checks every answer against a plain map:
// reads see exactly the live records, a batch is refused for capacity
// exactly when the live records plus the keys it creates exceed MaxKeys, Len
// never exceeds MaxKeys, and an idle store empties. Steps of zero keep
// several batches in one millisecond, where lazy expiry is partial.
func TestModel(t *testing.T) {
	const (
		maxKeys    = 48
		partitions = 4
		keys       = 24
		ops        = 5_000
	)
	type rec struct {
		value    string
		expireAt int64
	}
	f := newFixture(t, maxKeys, 1)
	rng := rand.New(rand.NewPCG(1, 2))
	model := map[[2]string]rec{}
	now := func() int64 { return engine.UnixMilli(f.clock) }
	live := func() int {
		n := 0
		for _, r := range model {
			if r.expireAt > now() {
				n++
			}
		}
		return n
	}
	for i := range ops {
		part := "p" + strconv.Itoa(rng.IntN(partitions))
		key := func() string { return "k" + strconv.Itoa(rng.IntN(keys)) }
		ttl := int64(1000 + rng.IntN(2000))
		value := strconv.Itoa(i)
		var cmds []engine.Command
		next := map[[2]string]rec{} // the batch's effect: a zero rec deletes
		switch op := rng.IntN(10); {
		case op < 5:
			k := key()
			cmds = append(cmds, engine.Set(k, value, ttl))
			next[[2]string{part, k}] = rec{value, now() + ttl}
		case op < 6:
			k1, k2 := key(), key()
			cmds = append(cmds, engine.Set(k1, value, ttl), engine.Set(k2, value, ttl))
			next[[2]string{part, k1}] = rec{value, now() + ttl}
			next[[2]string{part, k2}] = rec{value, now() + ttl}
		case op < 7:
			k := key()
			cmds = append(cmds, engine.Set(k, value, ttl), engine.Del(k))
			next[[2]string{part, k}] = rec{}
		case op < 8:
			k := key()
			cmds = append(cmds, engine.Del(k))
			next[[2]string{part, k}] = rec{}
		default:
			f.clock.Advance(time.Duration(rng.IntN(3)*rng.IntN(700)) * time.Millisecond)
			continue
		}
		created := 0
		for mk, r := range next {
			if r.expireAt != 0 && model[mk].expireAt <= now() {
				created++
			}
		}
		_, err := f.apply(part, cmds...)
		if full := live()+created > maxKeys; full != errors.Is(err, engine.ErrCapacity) || (!full && err != nil) {
			t.Fatalf("op %d: %d live + %d created, max %d: error %v", i, live(), created, maxKeys, err)
		}
		if err == nil {
			for mk, r := range next {
				model[mk] = r
			}
		}
		if n := f.store.Len(); n < live() || n > maxKeys {
			t.Fatalf("op %d: Len() = %d with %d live records, max %d", i, n, live(), maxKeys)
		}
		// Read a random key back.
		k := [2]string{part, key()}
		r := f.must(part, engine.Get(k[1]))[0]
		want, ok := model[k]
		if ok = ok && want.expireAt > now(); r.Found != ok || (ok && r.Value != want.value) {
			t.Fatalf("op %d: %s/%s = %q (found %t), model %q (live %t)", i, k[0], k[1], r.Value, r.Found, want.value, ok)
		}
	}
	f.clock.Advance(time.Minute)
	for range maxKeys/memstore.SweepBatch + 1 {
		f.absent("probe", "k")
		f.clock.Advance(time.Millisecond)
	}
	f.len(0)
}

// TestWrittenAndDeletedInOneBatch checks the record count of keys created
// and deleted by the same batch: they were never stored, so they neither
// count nor free a slot.
func TestWrittenAndDeletedInOneBatch(t *testing.T) {
	f := newFixture(t, 1, 1)
	res := f.must("p",
		engine.Set("tmp", "v", 60_000), engine.Del("tmp"),
		engine.Acquire("g", "a", 1, 60_000), engine.Release("g", "a"),
		engine.Incr("n", 1, 60_000), engine.Del("n"))
	if !res[1].Found || !res[3].Found || !res[5].Found {
		t.Fatalf("results %+v: each deletion must find the record written before it", res)
	}
	f.len(0)
	f.absent("p", "tmp")
	f.must("p", engine.Set("a", "v", 60_000))
	f.full("p", engine.Set("b", "v", 60_000))
	f.len(1)
}

// TestSweepBatch checks lazy expiry: a batch removes at most SweepBatch
// expired records from its shard, so an idle store's expired records are
// all gone after ⌈expired/SweepBatch⌉ batches, and live records stay.
func TestSweepBatch(t *testing.T) {
	const expired, live = 100, 5
	f := newFixture(t, 1000, 1)
	for i := range expired / 4 {
		p := "p" + strconv.Itoa(i)
		f.must(p, engine.Set("a", "v", 1000), engine.Set("b", "v", 1000), engine.Set("c", "v", 1000), engine.Set("d", "v", 1000))
	}
	for i := range live {
		f.must("live", engine.Set("k"+strconv.Itoa(i), "v", 60_000))
	}
	f.len(expired + live)

	f.clock.Advance(time.Second)
	calls := (expired + memstore.SweepBatch - 1) / memstore.SweepBatch
	for i := range calls {
		before := f.store.Len()
		f.absent("probe", "k") // a read: it writes nothing
		if removed := before - f.store.Len(); removed < 1 || removed > memstore.SweepBatch {
			t.Fatalf("call %d removed %d expired records, want 1…%d", i, removed, memstore.SweepBatch)
		}
		f.clock.Advance(time.Millisecond)
	}
	f.len(live)
	for i := range live {
		f.value("live", "k"+strconv.Itoa(i), "v")
	}

	// Idle past the last expiry, the store empties.
	f.clock.Advance(time.Minute)
	f.absent("probe", "k")
	f.len(0)
}

func TestClosed(t *testing.T) {
	f := newFixture(t, 10, 1)
	f.must("p", engine.Set("k", "v", 60_000))
	if err := f.store.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.apply("p", engine.Get("k")); !errors.Is(err, engine.ErrClosed) {
		t.Fatalf("Apply after Close: %v, want ErrClosed", err)
	}
	if err := f.store.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	valid := memstore.DefaultConfig()
	if err := valid.Validate(); err != nil {
		t.Fatalf("DefaultConfig: %v", err)
	}
	for _, tc := range []struct {
		maxKeys, shards int
		ok              bool
	}{
		{1, 1, true},
		{1, 1 << 16, true},
		{1_000_000, 64, true},
		{0, 64, false},
		{-1, 64, false},
		{10, 0, false},
		{10, -4, false},
		{10, 3, false},
		{10, 48, false},
		{10, 1 << 17, false},
	} {
		cfg := memstore.Config{MaxKeys: tc.maxKeys, Shards: tc.shards}
		err := cfg.Validate()
		if tc.ok != (err == nil) || (err != nil && !errors.Is(err, engine.ErrInvalid)) {
			t.Errorf("Validate(MaxKeys %d, Shards %d) = %v, want ok %t", tc.maxKeys, tc.shards, err, tc.ok)
		}
		if tc.shards > 1024 {
			continue // valid, but slow to build under the race detector
		}
		if s, err := memstore.New(cfg); tc.ok != (err == nil) || (s == nil) == tc.ok {
			t.Errorf("New(MaxKeys %d, Shards %d) = %v, %v", tc.maxKeys, tc.shards, s, err)
		}
	}
}

// TestSweepPause checks that a sweep finding few expired records among
// many pauses the shard's sweeps for SweepPause, and that a batch needing
// room at capacity still reclaims them meanwhile.
func TestSweepPause(t *testing.T) {
	const live, expired, late = 200, 20, 10 // a sweep examines 128: never 32 expired
	const capacity = live + expired + late
	f := newFixture(t, capacity, 1)
	for i := range live {
		f.must("live", engine.Set("k"+strconv.Itoa(i), "v", 60_000))
	}
	for i := range expired {
		f.must("short", engine.Set("k"+strconv.Itoa(i), "v", 1000))
	}
	// Which expired records the first sweep finds depends on the map's
	// order; these expire within its pause, so some are left to reclaim.
	f.clock.Advance(50 * time.Millisecond)
	for i := range late {
		f.must("late", engine.Set("k"+strconv.Itoa(i), "v", 1000))
	}
	f.clock.Advance(950 * time.Millisecond)

	// The first sweep stops after 128 records, having found fewer than
	// SweepBatch expired, and pauses.
	f.absent("probe", "k")
	paused := f.store.Len()
	f.clock.Advance(50 * time.Millisecond) // the late records expire
	for range 10 {
		f.clock.Advance(time.Millisecond)
		f.absent("probe", "k")
	}
	if n := f.store.Len(); n != paused {
		t.Fatalf("%d records after 10 ms of batches, want %d: no sweep within the pause", n, paused)
	}
	// At capacity, a new key still reclaims an expired record.
	fills := 0
	for ; f.store.Len() < capacity; fills++ {
		f.must("fill", engine.Set("f"+strconv.Itoa(fills), "v", 60_000))
	}
	f.must("fill", engine.Set("one-more", "v", 60_000))
	// After each pause, a batch sweeps again, until every expired record
	// is gone.
	for range 100 {
		f.clock.Advance(memstore.SweepPause)
		f.absent("probe", "k")
	}
	f.len(live + fills + 1)
	for i := range live {
		f.value("live", "k"+strconv.Itoa(i), "v")
	}
}

// TestCapacityExaminesTheWholeShard checks that a batch needing room finds
// an expired record wherever it sits in its shard, not only among the
// records a routine sweep examines.
// TestSweepBatchPerStep: a batch, or a joint step over several shards,
// removes at most SweepBatch expired records in all, in passing and to
// make room at capacity together, however many shards it touches and
// however many expired records they hold.
func TestSweepBatchPerStep(t *testing.T) {
	const shards, expired = 8, 800 // about 100 expired records per shard
	fill := func(t *testing.T, maxKeys int) *fixture {
		f := newFixture(t, maxKeys, shards)
		for i := range expired {
			f.must("e"+strconv.Itoa(i), engine.Set("k", "v", 1000))
		}
		f.clock.Advance(time.Second)
		return f
	}
	t.Run("joint step", func(t *testing.T) {
		f := fill(t, 10_000)
		var bs []*engine.Batch
		for i := range engine.MaxJointBatches {
			bs = append(bs, &engine.Batch{Partition: "j" + strconv.Itoa(i), Commands: []engine.Command{engine.Get("k")}})
		}
		outs := make([]engine.StepResult, len(bs))
		before := f.store.Len()
		if err := f.store.ApplyJoint(t.Context(), bs, outs); err != nil {
			t.Fatal(err)
		}
		if removed := before - f.store.Len(); removed < 1 || removed > memstore.SweepBatch {
			t.Errorf("a joint step on %d partitions removed %d expired records, want 1…%d", len(bs), removed, memstore.SweepBatch)
		}
	})
	t.Run("at capacity", func(t *testing.T) {
		for round := range 20 {
			f := fill(t, expired)
			cmds := make([]engine.Command, engine.MaxCommandsPerStep)
			for i := range cmds {
				cmds[i] = engine.Set("n"+strconv.Itoa(i), "v", 60_000)
			}
			before := f.store.Len()
			f.must("new"+strconv.Itoa(round), cmds...)
			if removed := before + len(cmds) - f.store.Len(); removed < len(cmds) || removed > memstore.SweepBatch {
				t.Fatalf("round %d: a batch creating %d keys in a full store removed %d expired records, want %d…%d", round, len(cmds), removed, len(cmds), memstore.SweepBatch)
			}
		}
	})
}

func TestCapacityExaminesTheWholeShard(t *testing.T) {
	const live = 2000 // a routine sweep examines 128 of them
	for round := range 20 {
		f := newFixture(t, live+1, 1)
		for i := range live {
			f.must("live", engine.Set("k"+strconv.Itoa(i), "v", 60_000))
		}
		f.must("short", engine.Set("k", "v", 1000))
		f.clock.Advance(time.Second)
		if _, err := f.apply("new", engine.Set("k", "v", 60_000)); err != nil {
			t.Fatalf("round %d: one expired record among %d: %v", round, live, err)
		}
		f.len(live + 1)
		// Nothing is expired now: the next new key is refused.
		f.full("new", engine.Set("k2", "v", 60_000))
	}
}
