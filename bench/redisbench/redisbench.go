// Package redisbench measures Sluice's Redis store side by side with a raw
// token-bucket script and with go-redis/redis_rate, against one
// redis-server in one run: decisions per second for concurrent callers,
// call latency, and what each decision costs the Redis server — the
// figure that bounds every Redis-backed limiter, since Redis runs scripts
// on one thread.
//
// Configurations (see Configs):
//
//   - sluice-1: the Redis store, one win.hit (a GCRA window) per batch,
//     through engine.Engine.Apply.
//   - sluice-8: the same with eight win.hit commands on eight windows of one
//     partition per batch.
//   - raw-script: EVALSHA of a minimal token bucket, two keys (tokens and
//     last refill), Redis TIME as the clock: the least a correct
//     server-side limiter costs, called through the same go-redis client.
//   - redis_rate: github.com/go-redis/redis_rate/v10 Limiter.Allow (GCRA).
//   - redis-benchmark-P16: the raw script again, driven by redis-benchmark
//     with 16 commands pipelined per connection: what the server does when
//     no Go client is in the way.
//
// Every limit is large enough that every decision admits. Server cost is
// read from INFO commandstats (usec_per_call of the script commands: the
// script's own run time) and INFO cpu (the server's whole CPU time, I/O and
// parsing included), both reset at the start of each measurement.
package redisbench

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha1"
	"encoding/csv"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/bench/internal/stats"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/store/redisstore"
)

// The configurations, in the order a round runs them.
const (
	Sluice1        = "sluice-1"
	Sluice8        = "sluice-8"
	Sluice1Piped   = "sluice-1-piped"
	Sluice8Piped   = "sluice-8-piped"
	RawScript      = "raw-script"
	RedisRate      = "redis_rate"
	RedisBenchmark = "redis-benchmark-P16"
)

// DefaultKeys is the number of distinct limiter keys calls spread over.
const DefaultKeys = 10_000

// batch is the number of commands of a sluice-8 batch.
const batch = 8

// Config is one measured configuration.
type Config struct {
	Name    string
	Title   string
	PerCall int // decisions per call
	// External configurations run a program rather than Go callers.
	External bool
	start    func(ctx context.Context, srv *Server, o Options) (instance, error)
}

// Configs returns every configuration, in run order.
func Configs() []Config {
	return []Config{
		{Name: Sluice1, Title: "Sluice redisstore, 1 win.hit (GCRA) per batch", PerCall: 1, start: startSluice(1, false)},
		{Name: Sluice1Piped, Title: "sluice-1 with Config.Pipeline (-coalesce)", PerCall: 1, start: startSluice(1, true)},
		{Name: Sluice8, Title: "Sluice redisstore, 8 win.hit (GCRA) on one partition per batch", PerCall: batch, start: startSluice(batch, false)},
		{Name: Sluice8Piped, Title: "sluice-8 with Config.Pipeline (-coalesce)", PerCall: batch, start: startSluice(batch, true)},
		{Name: RawScript, Title: "EVALSHA of a minimal 2-key token-bucket script, go-redis", PerCall: 1, start: startRaw},
		{Name: RedisRate, Title: "go-redis/redis_rate v10 Allow (GCRA)", PerCall: 1, start: startRedisRate},
		{Name: RedisBenchmark, Title: "the same token-bucket script, redis-benchmark -P 16", PerCall: 1, External: true},
	}
}

// Select returns the configurations named in a comma-separated list, in
// run order; an empty list selects all of them.
func Select(list string) ([]Config, error) {
	all := Configs()
	if strings.TrimSpace(list) == "" {
		return all, nil
	}
	want := map[string]bool{}
	for name := range strings.SplitSeq(list, ",") {
		name = strings.TrimSpace(name)
		found := false
		for _, c := range all {
			found = found || c.Name == name
		}
		if !found {
			return nil, fmt.Errorf("redisbench: unknown configuration %q", name)
		}
		want[name] = true
	}
	var out []Config
	for _, c := range all {
		if want[c.Name] {
			out = append(out, c)
		}
	}
	return out, nil
}

// Options bound one measurement. Exactly one of Duration and Calls is set.
type Options struct {
	// Clients is the number of concurrent callers (connections, for
	// redis-benchmark).
	Clients int
	// Warmup runs, uncounted, before a timed measurement.
	Warmup time.Duration
	// Duration is the measured time.
	Duration time.Duration
	// Calls, when Duration is zero, is the number of calls to make.
	Calls int
	// Keys is the number of distinct limiter keys.
	Keys int
	// Pipeline is redis-benchmark's -P (default 16).
	Pipeline int
	// Coalesce is the Config.Pipeline of the -piped configurations
	// (default DefaultCoalesce).
	Coalesce int
}

// DefaultCoalesce is the default Options.Coalesce.
const DefaultCoalesce = redisstore.DefaultPipeline

// Result is one measurement of one configuration.
type Result struct {
	Config   string
	PerCall  int
	Calls    uint64
	Errors   uint64
	Denied   uint64
	Elapsed  time.Duration
	P50, P99 time.Duration // zero for redis-benchmark
	// ScriptCalls and ScriptUsec are the server's count of script calls
	// (EVALSHA, EVAL, FCALL) and their run time, from INFO commandstats.
	ScriptCalls uint64
	ScriptUsec  float64
	// ServerCPU is the server's CPU time (user and system) over the
	// measurement, from INFO cpu.
	ServerCPU time.Duration
	// ClientCPU is this process's CPU time (user and system, every
	// goroutine and the collector) over the measurement: the Go client's
	// cost, zero for redis-benchmark. Only one configuration runs at a
	// time, so it is all the configuration's.
	ClientCPU time.Duration
	FirstErr  error
}

// ClientCPUPerDecision returns this process's CPU time per decision.
func (r Result) ClientCPUPerDecision() time.Duration {
	n := r.Calls * uint64(r.PerCall)
	if n == 0 {
		return 0
	}
	return r.ClientCPU / time.Duration(n)
}

// processCPU returns this process's CPU time so far, user and system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// DecisionsPerSec returns successful decisions per second.
func (r Result) DecisionsPerSec() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Calls) * float64(r.PerCall) / r.Elapsed.Seconds()
}

// UsecPerDecision returns the script run time per decision on the server.
func (r Result) UsecPerDecision() float64 {
	if r.ScriptCalls == 0 {
		return 0
	}
	return r.ScriptUsec / float64(r.ScriptCalls) / float64(r.PerCall)
}

// CPUPerDecision returns the server's whole CPU time per decision.
func (r Result) CPUPerDecision() time.Duration {
	if r.ScriptCalls == 0 {
		return 0
	}
	return r.ServerCPU / time.Duration(r.ScriptCalls*uint64(r.PerCall))
}

// instance is a client of the server under one configuration.
type instance interface {
	// call makes one call, reporting how many decisions were denials.
	call(ctx context.Context, rng *rand.Rand) (denied int, err error)
	close() error
}

// Measure runs one configuration against srv. The server's data is
// flushed first, so every configuration starts from empty keys.
func Measure(ctx context.Context, srv *Server, cfg Config, o Options) (Result, error) {
	if o.Clients < 1 {
		return Result{}, errors.New("redisbench: at least one client")
	}
	if (o.Duration > 0) == (o.Calls > 0) {
		return Result{}, errors.New("redisbench: set exactly one of Duration and Calls")
	}
	if o.Keys < 1 {
		o.Keys = DefaultKeys
	}
	if o.Pipeline < 1 {
		o.Pipeline = 16
	}
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	defer admin.Close()
	if err := admin.FlushAll(ctx).Err(); err != nil {
		return Result{}, err
	}
	if cfg.External {
		return runRedisBenchmark(ctx, srv, admin, cfg, o)
	}
	inst, err := cfg.start(ctx, srv, o)
	if err != nil {
		return Result{}, fmt.Errorf("%s: %w", cfg.Name, err)
	}
	res, err := drive(ctx, admin, cfg, inst, o)
	if cerr := inst.close(); err == nil {
		err = cerr
	}
	return res, err
}

// serverStats is a reading of the server's counters.
type serverStats struct {
	calls uint64
	usec  float64
	cpu   time.Duration
}

func resetStats(ctx context.Context, admin *redis.Client) (serverStats, error) {
	if err := admin.ConfigResetStat(ctx).Err(); err != nil {
		return serverStats{}, err
	}
	return readStats(ctx, admin)
}

// readStats reads the script commands' counters and the server's CPU time.
func readStats(ctx context.Context, admin *redis.Client) (serverStats, error) {
	info, err := admin.Info(ctx, "commandstats", "cpu").Result()
	if err != nil {
		return serverStats{}, err
	}
	var s serverStats
	var cpu float64
	for line := range strings.SplitSeq(info, "\n") {
		line = strings.TrimSpace(line)
		for _, cmd := range []string{"evalsha", "eval", "fcall"} {
			rest, ok := strings.CutPrefix(line, "cmdstat_"+cmd+":")
			if !ok {
				continue
			}
			for field := range strings.SplitSeq(rest, ",") {
				k, v, _ := strings.Cut(field, "=")
				switch k {
				case "calls":
					n, _ := strconv.ParseUint(v, 10, 64)
					s.calls += n
				case "usec":
					f, _ := strconv.ParseFloat(v, 64)
					s.usec += f
				}
			}
		}
		for _, k := range []string{"used_cpu_user:", "used_cpu_sys:"} {
			if v, ok := strings.CutPrefix(line, k); ok {
				f, _ := strconv.ParseFloat(v, 64)
				cpu += f
			}
		}
	}
	s.cpu = time.Duration(cpu * float64(time.Second))
	return s, nil
}

func (r *Result) setStats(before, after serverStats) {
	r.ScriptCalls = after.calls - before.calls
	r.ScriptUsec = after.usec - before.usec
	r.ServerCPU = after.cpu - before.cpu
}

func drive(ctx context.Context, admin *redis.Client, cfg Config, inst instance, o Options) (Result, error) {
	const (
		warmup int32 = iota
		measure
		done
	)
	var (
		phase    atomic.Int32
		tickets  atomic.Int64
		calls    atomic.Uint64
		errs     atomic.Uint64
		denied   atomic.Uint64
		errOnce  sync.Once
		firstErr error
		mu       sync.Mutex
		hist     stats.Histogram
		wg       sync.WaitGroup
	)
	timed := o.Duration > 0
	if timed {
		phase.Store(warmup)
	} else {
		phase.Store(measure)
		tickets.Store(int64(o.Calls))
	}
	var before serverStats
	var err error
	cpu0 := processCPU()
	if !timed {
		if before, err = resetStats(ctx, admin); err != nil {
			return Result{}, err
		}
	}
	start := time.Now()
	for i := range o.Clients {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(i)+1, uint64(time.Now().UnixNano())))
			var h stats.Histogram
			defer func() { mu.Lock(); hist.Merge(&h); mu.Unlock() }()
			for ctx.Err() == nil {
				p := phase.Load()
				if p == done || (!timed && tickets.Add(-1) < 0) {
					return
				}
				t0 := time.Now()
				d, err := inst.call(ctx, rng)
				elapsed := time.Since(t0)
				if p != measure || phase.Load() != measure {
					continue // straddles the start or the end
				}
				if err != nil {
					errs.Add(1)
					errOnce.Do(func() { firstErr = err })
					continue
				}
				calls.Add(1)
				denied.Add(uint64(d))
				h.Record(elapsed)
			}
		})
	}
	if timed {
		select {
		case <-time.After(o.Warmup):
		case <-ctx.Done():
		}
		if before, err = resetStats(ctx, admin); err != nil {
			phase.Store(done)
			wg.Wait()
			return Result{}, err
		}
		start = time.Now()
		cpu0 = processCPU()
		phase.Store(measure)
		select {
		case <-time.After(o.Duration):
		case <-ctx.Done():
		}
		phase.Store(done)
	}
	elapsed := time.Since(start)
	cpu := processCPU() - cpu0
	after, serr := readStats(context.WithoutCancel(ctx), admin)
	wg.Wait()
	if !timed {
		elapsed = time.Since(start)
		cpu = processCPU() - cpu0
		after, serr = readStats(context.WithoutCancel(ctx), admin)
	}
	r := Result{Config: cfg.Name, PerCall: cfg.PerCall, Calls: calls.Load(), Errors: errs.Load(), Denied: denied.Load(),
		Elapsed: elapsed, P50: hist.Quantile(0.5), P99: hist.Quantile(0.99), ClientCPU: cpu, FirstErr: firstErr}
	r.setStats(before, after)
	if serr != nil {
		return r, serr
	}
	return r, ctx.Err()
}

// newClient returns a go-redis client for the load: one connection per
// caller, context deadlines honoured, no retries.
func newClient(srv *Server, o Options) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: o.Clients, ContextTimeoutEnabled: true, MaxRetries: -1})
}

// callTimeout bounds one call; it is a failure bound, never reached on a
// healthy run.
const callTimeout = 5 * time.Second

// Sluice.

type sluiceInst struct {
	store      *redisstore.Store
	eng        *engine.Engine
	partitions []string
	cmds       []engine.Command
	outs       sync.Pool
}

func startSluice(perCall int, piped bool) func(context.Context, *Server, Options) (instance, error) {
	return func(ctx context.Context, srv *Server, o Options) (instance, error) {
		cfg := redisstore.DefaultConfig()
		cfg.Timeout = callTimeout
		cfg.Pipeline = -1
		if piped {
			cfg.Pipeline = cmp.Or(o.Coalesce, DefaultCoalesce)
		}
		st, err := redisstore.New(newClient(srv, o), cfg)
		if err != nil {
			return nil, err
		}
		in := &sluiceInst{store: st, eng: engine.New(st)}
		in.outs.New = func() any { return new(engine.StepResult) }
		for i := range max(1, o.Keys/perCall) {
			in.partitions = append(in.partitions, "p"+strconv.Itoa(i))
		}
		for i := range perCall {
			w := engine.Window{Key: "w" + strconv.Itoa(i), Kind: algo.KindGCRA, Limit: 1_000_000_000, WindowMs: 60_000}
			in.cmds = append(in.cmds, engine.Hit(1, w))
		}
		return in, nil
	}
}

func (s *sluiceInst) call(ctx context.Context, rng *rand.Rand) (int, error) {
	out := s.outs.Get().(*engine.StepResult)
	defer s.outs.Put(out)
	if err := s.eng.Apply(ctx, s.partitions[rng.IntN(len(s.partitions))], out, s.cmds...); err != nil {
		return 0, err
	}
	if len(out.Results) != len(s.cmds) {
		return 0, fmt.Errorf("%d results for %d commands", len(out.Results), len(s.cmds))
	}
	denied := 0
	for _, r := range out.Results {
		if !r.Allowed {
			denied++
		}
	}
	return denied, nil
}

func (s *sluiceInst) close() error { return s.store.Close() }

// The raw script.

// TokenBucket is a minimal token bucket of the common form: tokens and the
// last refill instant in two keys, refilled by elapsed time, Redis TIME as
// the clock. KEYS: tokens, timestamp. ARGV: rate (tokens per ms),
// capacity, requested. It returns {allowed, tokens left}.
const TokenBucket = `
local rate = tonumber(ARGV[1])
local capacity = tonumber(ARGV[2])
local requested = tonumber(ARGV[3])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = math.max(1, math.floor(capacity / rate / 1000 * 2))
local tokens = tonumber(redis.call('GET', KEYS[1])) or capacity
local last = tonumber(redis.call('GET', KEYS[2])) or 0
local filled = math.min(capacity, tokens + math.max(0, now - last) * rate)
local allowed = filled >= requested
if allowed then
	filled = filled - requested
end
redis.call('SET', KEYS[1], filled, 'EX', ttl)
redis.call('SET', KEYS[2], now, 'EX', ttl)
return {allowed and 1 or 0, math.floor(filled)}
`

// tokenBucketSHA is the digest of TokenBucket.
var tokenBucketSHA = func() string {
	h := sha1.Sum([]byte(TokenBucket))
	return hex.EncodeToString(h[:])
}()

// The token bucket's arguments: a refill far above any load, so every
// call admits.
const (
	bucketRate     = "1000000"
	bucketCapacity = "1000000000"
)

type rawInst struct {
	client *redis.Client
	keys   [][]string
}

func startRaw(ctx context.Context, srv *Server, o Options) (instance, error) {
	c := newClient(srv, o)
	if err := c.ScriptLoad(ctx, TokenBucket).Err(); err != nil {
		c.Close()
		return nil, err
	}
	in := &rawInst{client: c}
	for i := range o.Keys {
		tag := "{tb" + strconv.Itoa(i) + "}"
		in.keys = append(in.keys, []string{tag + ":tokens", tag + ":ts"})
	}
	return in, nil
}

func (r *rawInst) call(ctx context.Context, rng *rand.Rand) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	v, err := r.client.EvalSha(ctx, tokenBucketSHA, r.keys[rng.IntN(len(r.keys))], bucketRate, bucketCapacity, 1).Slice()
	if err != nil {
		return 0, err
	}
	if len(v) != 2 {
		return 0, fmt.Errorf("reply %v", v)
	}
	if v[0] != int64(1) {
		return 1, nil
	}
	return 0, nil
}

func (r *rawInst) close() error { return r.client.Close() }

// redis_rate.

type rateInst struct {
	client  *redis.Client
	limiter *redis_rate.Limiter
	keys    []string
}

// rateLimit admits far more than any load.
var rateLimit = redis_rate.Limit{Rate: 1 << 30, Burst: 1 << 30, Period: time.Second}

func startRedisRate(ctx context.Context, srv *Server, o Options) (instance, error) {
	c := newClient(srv, o)
	in := &rateInst{client: c, limiter: redis_rate.NewLimiter(c)}
	for i := range o.Keys {
		in.keys = append(in.keys, "k"+strconv.Itoa(i))
	}
	return in, nil
}

func (r *rateInst) call(ctx context.Context, rng *rand.Rand) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	res, err := r.limiter.Allow(ctx, r.keys[rng.IntN(len(r.keys))], rateLimit)
	if err != nil {
		return 0, err
	}
	if res.Allowed != 1 {
		return 1, nil
	}
	return 0, nil
}

func (r *rateInst) close() error { return r.client.Close() }

// redis-benchmark.

// runRedisBenchmark runs redis-benchmark on the token-bucket script: first
// a short uncounted run sized by Warmup to learn the rate, then one sized
// to last about Duration (or Calls requests).
func runRedisBenchmark(ctx context.Context, srv *Server, admin *redis.Client, cfg Config, o Options) (Result, error) {
	bin, err := exec.LookPath("redis-benchmark")
	if err != nil {
		return Result{}, fmt.Errorf("%s: redis-benchmark is not installed (apt-get install redis-tools): %w", cfg.Name, err)
	}
	if err := admin.ScriptLoad(ctx, TokenBucket).Err(); err != nil {
		return Result{}, err
	}
	host, port, _ := strings.Cut(srv.Addr, ":")
	run := func(n int) (float64, error) {
		// Each __rand_int__ is drawn apart, so the two keys of one call
		// may differ: a single server does not mind, and the script's
		// work is the same.
		args := []string{"-h", host, "-p", port, "-c", strconv.Itoa(o.Clients), "-n", strconv.Itoa(n),
			"-P", strconv.Itoa(o.Pipeline), "-r", strconv.Itoa(o.Keys), "--csv",
			"EVALSHA", tokenBucketSHA, "2", "{tb__rand_int__}:tokens", "{tb__rand_int__}:ts", bucketRate, bucketCapacity, "1"}
		out, err := exec.CommandContext(ctx, bin, args...).Output()
		if err != nil {
			return 0, fmt.Errorf("redis-benchmark: %w: %s", err, out)
		}
		return parseBenchmarkCSV(out)
	}
	n := o.Calls
	if o.Duration > 0 {
		warm := max(1000, int(o.Warmup.Seconds()*20_000))
		rps, err := run(warm)
		if err != nil {
			return Result{}, err
		}
		n = max(1000, int(rps*o.Duration.Seconds()))
	}
	before, err := resetStats(ctx, admin)
	if err != nil {
		return Result{}, err
	}
	start := time.Now()
	rps, err := run(n)
	if err != nil {
		return Result{}, err
	}
	after, err := readStats(ctx, admin)
	r := Result{Config: cfg.Name, PerCall: cfg.PerCall, Calls: uint64(n)}
	// redis-benchmark's own rate excludes its start-up; the elapsed time
	// is derived from it.
	r.Elapsed = time.Duration(float64(n) / rps * float64(time.Second))
	if r.Elapsed <= 0 || r.Elapsed > time.Since(start) {
		r.Elapsed = time.Since(start)
	}
	r.setStats(before, after)
	if r.ScriptCalls < uint64(n) {
		r.Errors = uint64(n) - r.ScriptCalls
	}
	return r, err
}

// parseBenchmarkCSV reads the rate of the one test of redis-benchmark
// --csv output: a header line, then "name","rps",….
func parseBenchmarkCSV(out []byte) (float64, error) {
	recs, err := csv.NewReader(bytes.NewReader(out)).ReadAll()
	if err != nil || len(recs) < 2 || len(recs[1]) < 2 {
		return 0, fmt.Errorf("redis-benchmark output %q: %v", out, err)
	}
	rps, err := strconv.ParseFloat(recs[1][1], 64)
	if err != nil || rps <= 0 {
		return 0, fmt.Errorf("redis-benchmark rate %q", recs[1][1])
	}
	return rps, nil
}
