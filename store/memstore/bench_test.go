package memstore_test

// Decisions per second through the in-memory store, beside two references
// measured in the same run: golang.org/x/time/rate's Limiter.Allow on one
// limiter, and benchref.Buckets, a plain sharded map of float token buckets
// (the floor: a shared limiter that does nothing but decide).
//
// docs/benchmarks.md records the figures; reproduce them with
//
//	for i in 1 2 3 4 5; do
//		go test -run '^$' -bench '^BenchmarkHit$' -benchmem -cpu 1,2 ./store/memstore/
//	done | tee hit.txt
//	benchstat -col /impl hit.txt
//
// Every run=parallel benchmark runs 64 goroutines whatever GOMAXPROCS is,
// so -cpu 1,2 shows how the same load scales from one core to two.

import (
	"context"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/benchref"
	"github.com/sluicehq/sluice/store/memstore"
)

const (
	// goroutines is the number of callers in every run=parallel benchmark.
	goroutines = 64
	// manyKeys is the key count of the large-keyspace benchmarks.
	manyKeys = 1_000_000
	// benchLimit and benchWindow make every hit an admitted one, so every
	// decision takes the write path: 2^40 per 120 days is never exhausted
	// here, and no fixed window ends during a run.
	benchLimit  = algo.MaxLimit
	benchWindow = time.Duration(algo.MaxWindow) * time.Millisecond
	// gcraCharge is the cost, a day's worth of emission intervals, charged to
	// each gcra window before timing starts. A gcra record lives only until
	// its bucket is full again, so without it a key hit once a second would
	// be created anew by every hit; with it every timed hit updates a live
	// record, as it does for a busy caller.
	gcraCharge = benchLimit / int64(benchWindow/(24*time.Hour))
)

// BenchmarkHit measures one single-window win.hit decision on 1 hot key and
// on 1,000,000 keys, for each implementation:
//
//	impl=bucket     benchref.Buckets (the floor)
//	impl=xrate      rate.Limiter.Allow on one limiter (1 key only)
//	impl=fixed      Engine.Apply, fixed window
//	impl=gcra       Engine.Apply, gcra window
//	impl=do         Engine.Do, fixed window, no operation id
//	impl=do-replay  Engine.Do, fixed window, a fresh operation id per request
//	                (each request writes a replay record kept for 180 s)
func BenchmarkHit(b *testing.B) {
	for _, keys := range []int{1, manyKeys} {
		b.Run("keys="+strconv.Itoa(keys), func(b *testing.B) {
			names := partitionNames(keys)
			b.Run("impl=bucket", func(b *testing.B) {
				buckets := benchref.NewBuckets(benchLimit, benchWindow, memstore.DefaultConfig().Shards)
				for _, i := range fillOrder(len(names)) {
					// Store a copy, as the stores do: a lookup with the very
					// string stored would skip reading the stored key, which
					// no caller with a fresh request in hand can do.
					buckets.Allow(strings.Clone(names[i]))
				}
				settle()
				runBoth(b, names, func() func(key string) bool { return buckets.Allow })
			})
			if keys == 1 {
				b.Run("impl=xrate", func(b *testing.B) {
					lim := rate.NewLimiter(rate.Limit(float64(benchLimit)/benchWindow.Seconds()), int(benchLimit))
					runBoth(b, names, func() func(string) bool {
						return func(string) bool { return lim.Allow() }
					})
				})
			}
			for _, kind := range []algo.Kind{algo.KindFixed, algo.KindGCRA} {
				b.Run("impl="+kind.String(), func(b *testing.B) {
					eng := populated(b, names, kind)
					runBoth(b, names, func() func(string) bool { return applier(b, eng, kind) })
				})
			}
			for _, replay := range []bool{false, true} {
				impl := "impl=do"
				if replay {
					impl = "impl=do-replay"
				}
				b.Run(impl, func(b *testing.B) {
					eng := populated(b, names, algo.KindFixed)
					runBoth(b, names, func() func(string) bool { return doer(b, eng, replay) })
				})
			}
		})
	}
}

// runBoth runs the decision made by each goroutine's newDecide first on one
// goroutine, then on 64, each walking names from a start of its own (see
// newPicker).
func runBoth(b *testing.B, names []string, newDecide func() func(key string) bool) {
	b.Run("run=serial", func(b *testing.B) {
		b.ReportAllocs()
		decide, pick := newDecide(), newPicker(len(names))
		for b.Loop() {
			if !decide(names[pick()]) {
				b.Fatal("hit denied: the benchmark must measure admitted hits")
			}
		}
		reportRate(b)
	})
	b.Run("run=parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.SetParallelism(max(1, goroutines/runtime.GOMAXPROCS(0)))
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			decide, pick := newDecide(), newPicker(len(names))
			for pb.Next() {
				if !decide(names[pick()]) {
					b.Error("hit denied: the benchmark must measure admitted hits")
					return
				}
			}
		})
		reportRate(b)
	})
}

func reportRate(b *testing.B) {
	if s := b.Elapsed().Seconds(); s > 0 {
		b.ReportMetric(float64(b.N)/s, "decisions/s")
	}
}

var (
	namesMu sync.Mutex
	names   = map[int][]string{}
)

// partitionNames returns n distinct partition names, built once per n so the
// benchmarks measure decisions, not string formatting.
func partitionNames(n int) []string {
	namesMu.Lock()
	defer namesMu.Unlock()
	if s, ok := names[n]; ok {
		return s
	}
	s := make([]string, n)
	for i := range s {
		s[i] = "client:" + strconv.Itoa(i)
	}
	names[n] = s
	return s
}

var pickerSeed atomic.Uint64

// newPicker returns a generator of indexes in [0, n) for one goroutine: a
// walk through names in order from a random start. The caller's key is then
// in the cache, as a key just read from a request is, while the stores,
// filled in fillOrder, hold their state for consecutive names at unrelated
// addresses, so that every lookup among many keys pays the cache misses it
// pays in production.
func newPicker(n int) func() int {
	i := int(pickerSeed.Add(0x9e3779b97f4a7c15) % uint64(n))
	return func() int {
		if i++; i == n {
			i = 0
		}
		return i
	}
}

// fillOrder returns the order in which benchmarks put names into a store: a
// fixed shuffle, so that memory allocated in turn is not walked in turn.
func fillOrder(n int) []int {
	return rand.New(rand.NewPCG(1, 2)).Perm(n)
}

// newEngine returns an engine on a memstore large enough to hold the
// benchmark's windows and every replay record it writes.
func newEngine(b *testing.B) *engine.Engine {
	cfg := memstore.DefaultConfig()
	cfg.MaxKeys = 1 << 28
	s, err := memstore.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return engine.New(s)
}

func hitCommands(kind algo.Kind) []engine.Command {
	return []engine.Command{engine.Hit(1, engine.Window{
		Key: "rps", Kind: kind, Limit: benchLimit, WindowMs: benchWindow.Milliseconds(),
	})}
}

// populated returns an engine whose store already holds a window of kind in
// every partition of names, so the timed hits update existing records.
func populated(b *testing.B, names []string, kind algo.Kind) *engine.Engine {
	eng := newEngine(b)
	cmds := hitCommands(kind)
	if kind == algo.KindGCRA {
		cmds[0].Cost = gcraCharge
	}
	var out engine.StepResult
	for _, i := range fillOrder(len(names)) {
		if err := eng.Apply(context.Background(), names[i], &out, cmds...); err != nil {
			b.Fatal(err)
		}
	}
	settle()
	return eng
}

// settle collects the garbage of building a benchmark's state, and of the
// benchmarks before it, so that the collector does not run during timing.
func settle() { runtime.GC() }

// applier returns a decision through Engine.Apply for one goroutine. The
// commands and the StepResult are built once and reused: Apply then
// allocates nothing, which is the point of the single-step path.
func applier(b *testing.B, eng *engine.Engine, kind algo.Kind) func(string) bool {
	ctx := context.Background()
	cmds := hitCommands(kind)
	var out engine.StepResult
	return func(partition string) bool {
		if err := eng.Apply(ctx, partition, &out, cmds...); err != nil {
			b.Error(err)
			return false
		}
		return !out.Denied
	}
}

var opSeq atomic.Uint64

// doer returns a decision through Engine.Do for one goroutine, with a fresh
// operation id per request when replay is set. Building the id costs one
// allocation (the string), which a caller pays too.
func doer(b *testing.B, eng *engine.Engine, replay bool) func(string) bool {
	ctx := context.Background()
	req := &engine.Request{Steps: []engine.Step{{Commands: hitCommands(algo.KindFixed)}}}
	prefix := []byte("bench-" + strconv.FormatUint(opSeq.Add(1), 10) + "-")
	var seq uint64
	return func(partition string) bool {
		req.Steps[0].Partition = partition
		if replay {
			seq++
			req.OperationID = string(strconv.AppendUint(prefix, seq, 10))
		}
		resp, err := eng.Do(ctx, req)
		if err != nil {
			b.Error(err)
			return false
		}
		return !resp.Steps[0].Denied
	}
}

// BenchmarkHitNewKey measures the fast path's route-quota batch (a win.hit
// of a fixed window and a kv.ttl of its key, as package httplimit sends)
// on 20,000 partitions named as httplimit names them:
//
//	key=new   every partition is new to the store, so every hit creates
//	          its record: the store is replaced, untimed, every 20,000
//	          hits, and its shard maps grow as they do in service
//	key=held  every partition's record exists already; it also reports
//	          the heap each record takes (heap-B/record)
//
// It runs on one goroutine only: the cost of a creation is the point, and
// the replacement of the store would serialise parallel callers anyway.
func BenchmarkHitNewKey(b *testing.B) {
	const perStore = 20_000
	parts := make([]string, perStore)
	for i := range parts {
		parts[i] = "bench:" + strconv.FormatUint(uint64(i)*0x9e3779b97f4a7c15, 16) + strings.Repeat("0", 16)
	}
	win := engine.Window{Key: "default:fixed", Kind: algo.KindFixed, Limit: benchLimit, WindowMs: benchWindow.Milliseconds()}
	batch := engine.Batch{Commands: []engine.Command{engine.Hit(1, win), engine.TTL(win.Key)}}
	newStore := func() *memstore.Store {
		s, err := memstore.New(memstore.DefaultConfig())
		if err != nil {
			b.Fatal(err)
		}
		return s
	}
	hit := func(s *memstore.Store, partition string, out *engine.StepResult) {
		batch.Partition = partition
		if err := s.Apply(context.Background(), &batch, out); err != nil || out.Denied {
			b.Fatalf("hit: %v, denied %v", err, out.Denied)
		}
	}
	b.Run("key=new", func(b *testing.B) {
		var out engine.StepResult
		var s *memstore.Store
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if i%perStore == 0 {
				b.StopTimer()
				s = newStore()
				b.StartTimer()
			}
			hit(s, parts[i%perStore], &out)
		}
	})
	b.Run("key=held", func(b *testing.B) {
		var out engine.StepResult
		s := newStore()
		var before, after runtime.MemStats
		settle()
		runtime.ReadMemStats(&before)
		for _, i := range fillOrder(perStore) {
			hit(s, parts[i], &out)
		}
		settle()
		runtime.ReadMemStats(&after)
		pick := newPicker(perStore)
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			hit(s, parts[pick()], &out)
		}
		// The heap a record takes: the record, its share of the shard
		// map, and whatever else the store allocates for it.
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/perStore, "heap-B/record")
	})
}
