package rpcbench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/bench/internal/stats"
	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/store/diskstore"
)

// Options bound one measurement. Exactly one of Duration and Calls is set:
// a timed measurement (the harness) or a counted one (the smoke test).
type Options struct {
	// Clients is the number of concurrent callers, each making one call at
	// a time, back to back.
	Clients int
	// Warmup is run, and not counted, before a timed measurement.
	Warmup time.Duration
	// Duration is the measured time.
	Duration time.Duration
	// Calls, when Duration is zero, is the number of calls to make; the
	// measurement ends when they are done.
	Calls int
	// Keys is the number of distinct limiter keys the calls spread over.
	Keys int
	// Dir is where a durable store creates its temporary data directory;
	// empty means the system's temporary directory.
	Dir string
	// Store adjusts the durable store's configuration, which starts as
	// diskstore.DefaultConfig (fsync always); nil keeps it. For
	// experiments, such as measuring what durability costs.
	Store func(*diskstore.Config)
	// HTTPVersion is the HTTP version of the Sluice configurations' client
	// (client.Config.HTTPVersion); empty means the client's default.
	HTTPVersion client.HTTPVersion
	// HexNames gives the Sluice configurations a pepper of the hex form,
	// whose clients name every partition and key by 64 hex digits, instead
	// of one from client.NewPepper (22 characters), which a new data
	// directory gets: for comparing the two, and with the figures of
	// builds before names of 22 characters.
	HexNames bool
	// Coalesce is client.Config.Coalesce of the Sluice configurations
	// that coalesce (all but sluice-1-single); zero means the client's
	// default.
	Coalesce int
	// CPUProfile, when set, receives a CPU profile of the measured time.
	// Server goroutines carry the pprof label side=server and callers
	// side=client, so the two can be told apart (go tool pprof -tagfocus).
	CPUProfile io.Writer
	// Trace, when set, receives an execution trace of the measured time
	// (go tool trace; its -pprof=sync and -pprof=syscall views show where
	// calls wait).
	Trace io.Writer
	// SluiceProcs, when positive, is GOMAXPROCS while a Sluice
	// configuration is started, driven and stopped; the peers and the
	// floors run at the process's. It lets each system be measured at its
	// own best setting: Sluice's server over fsync always does better with
	// a processor more than cores at 32 decisions per call, gubernator
	// worse (docs/operations.md, "Processors and the log's fsync").
	SluiceProcs int
	// AllocsBase and Allocs, when set, receive the allocation profile as
	// it stands at the start of the measured time and at its end, each
	// after a garbage collection: go tool pprof -base on the two shows what
	// the measured time allocated.
	AllocsBase, Allocs io.Writer
}

// writeAllocs writes the allocation profile, up to date, to w if w is set.
func writeAllocs(w io.Writer) error {
	if w == nil {
		return nil
	}
	runtime.GC() // the profile holds what the last collection saw
	return pprof.Lookup("allocs").WriteTo(w, 0)
}

// Result is one measurement of one configuration.
type Result struct {
	Config   string
	PerCall  int // decisions per call
	Calls    uint64
	Errors   uint64
	Denied   uint64 // decisions that were denials (still decisions)
	Elapsed  time.Duration
	P50, P99 time.Duration
	// CPU is the CPU time (user and system) the whole process — servers and
	// callers — used during the measured time; zero where not measured.
	CPU time.Duration
	// Switches counts the context switches of the process's threads during
	// the measured time (getrusage's ru_nvcsw and ru_nivcsw); zero where not
	// measured. Each is a thread that stopped running: at one decision per
	// call, a durable store's waits for its log show here.
	Switches uint64
	// WALSyncs counts the durable store's write-ahead log fsyncs during the
	// measured time, WALBytes the bytes written to the log, and WALSyncTime
	// the time spent in those fsyncs (wall time, the wait for a processor
	// after each included); zero for systems without one.
	WALSyncs, WALBytes uint64
	WALSyncTime        time.Duration
	// Procs is GOMAXPROCS during the measurement.
	Procs int
	// FirstErr is the first error met, if any.
	FirstErr error
}

// CallsPerSec returns successful calls per second.
func (r Result) CallsPerSec() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Calls) / r.Elapsed.Seconds()
}

// DecisionsPerSec returns decisions per second: successful calls times the
// decisions each carries.
func (r Result) DecisionsPerSec() float64 { return r.CallsPerSec() * float64(r.PerCall) }

// Cores returns the average number of cores the process kept busy.
func (r Result) Cores() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return r.CPU.Seconds() / r.Elapsed.Seconds()
}

// CPUPerDecision returns the process CPU time, servers and callers
// together, spent per decision. It depends much less than throughput on
// what else runs on a shared machine.
func (r Result) CPUPerDecision() time.Duration {
	n := r.Calls * uint64(r.PerCall)
	if n == 0 {
		return 0
	}
	return r.CPU / time.Duration(n)
}

// SwitchesPerCall returns the process's context switches per successful
// call.
func (r Result) SwitchesPerCall() float64 {
	if r.Calls == 0 {
		return 0
	}
	return float64(r.Switches) / float64(r.Calls)
}

// usage is what processUsage reads.
type usage struct {
	cpu      time.Duration
	switches uint64
}

// minus returns what u counts beyond an earlier reading.
func (u usage) minus(earlier usage) usage {
	return usage{cpu: u.cpu - earlier.cpu, switches: u.switches - earlier.switches}
}

// CallsPerWALSync returns the calls answered per write-ahead log fsync:
// how many commits Pebble's group commit puts behind one fsync. Zero when
// the system made no fsync.
func (r Result) CallsPerWALSync() float64 {
	if r.WALSyncs == 0 {
		return 0
	}
	return float64(r.Calls) / float64(r.WALSyncs)
}

// WALSyncMean returns the mean time of one write-ahead log fsync. Zero when
// the system made no fsync.
func (r Result) WALSyncMean() time.Duration {
	if r.WALSyncs == 0 {
		return 0
	}
	return r.WALSyncTime / time.Duration(r.WALSyncs)
}

// WALSyncBusy returns the share of the measured time the log spent in
// fsyncs: near 1, commits wait for the log's fsyncs one after another.
func (r Result) WALSyncBusy() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return r.WALSyncTime.Seconds() / r.Elapsed.Seconds()
}

// WALBytesPerDecision returns the bytes written to the write-ahead log per
// decision. Zero when the system has no log.
func (r Result) WALBytesPerDecision() float64 {
	n := r.Calls * uint64(r.PerCall)
	if n == 0 {
		return 0
	}
	return float64(r.WALBytes) / float64(n)
}

// walCounts are the write-ahead log's fsyncs, the time spent in them and
// the bytes written so far.
type walCounts struct{ syncs, bytes, syncNanos uint64 }

func (c walCounts) minus(d walCounts) walCounts {
	return walCounts{syncs: c.syncs - d.syncs, bytes: c.bytes - d.bytes, syncNanos: c.syncNanos - d.syncNanos}
}

// walCounter is an instance with a durable store that counts its
// write-ahead log's fsyncs and bytes.
type walCounter interface{ walCounts() walCounts }

func countWAL(inst instance) walCounts {
	if w, ok := inst.(walCounter); ok {
		return w.walCounts()
	}
	return walCounts{}
}

// instance is a running system under test with its callers' client.
type instance interface {
	// call makes one call for caller w. It fails if the call failed or its
	// answer lacks a decision, and reports how many decisions were denials.
	call(ctx context.Context, w *caller) (denied int, err error)
	close() error
}

// caller is the state of one concurrent caller. Each has its own random
// source and scratch, so callers share nothing but the client.
type caller struct {
	rng     *rand.Rand
	hist    stats.Histogram
	scratch any // the instance's per-caller request, reused between calls
}

var (
	serverLabels = pprof.Labels("side", "server")
	clientLabels = pprof.Labels("side", "client")
)

// asServer runs f with the side=server pprof label; goroutines f starts
// (listeners, connection handlers, store background work) inherit it.
func asServer(ctx context.Context, f func(context.Context) error) error {
	var err error
	pprof.Do(ctx, serverLabels, func(ctx context.Context) { err = f(ctx) })
	return err
}

// The phases of a timed measurement.
const (
	phaseWarmup int32 = iota
	phaseMeasure
	phaseDone
)

// Measure starts cfg, drives it with o.Clients concurrent callers and stops
// it. A timed measurement counts only calls that started and ended within
// the measured time.
func Measure(ctx context.Context, cfg Config, o Options) (Result, error) {
	if o.Clients < 1 {
		return Result{}, errors.New("rpcbench: at least one client")
	}
	if (o.Duration > 0) == (o.Calls > 0) {
		return Result{}, errors.New("rpcbench: set exactly one of Duration and Calls")
	}
	if o.Keys < 1 {
		o.Keys = DefaultKeys
	}
	if cfg.sluice && o.SluiceProcs > 0 {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(o.SluiceProcs))
	}
	runtime.GC() // start from a clean heap, not the previous configuration's
	inst, err := cfg.start(ctx, o)
	if err != nil {
		return Result{}, fmt.Errorf("%s: starting: %w", cfg.Name, err)
	}
	res, runErr := drive(ctx, cfg, inst, o)
	if err := inst.close(); err != nil && runErr == nil {
		runErr = fmt.Errorf("%s: stopping: %w", cfg.Name, err)
	}
	return res, runErr
}

func drive(ctx context.Context, cfg Config, inst instance, o Options) (Result, error) {
	var (
		phase    atomic.Int32
		tickets  atomic.Int64 // counted mode: calls left to hand out
		calls    atomic.Uint64
		errs     atomic.Uint64
		denied   atomic.Uint64
		errOnce  sync.Once
		firstErr error
		wg       sync.WaitGroup
	)
	timed := o.Duration > 0
	if timed {
		phase.Store(phaseWarmup)
	} else {
		phase.Store(phaseMeasure)
		tickets.Store(int64(o.Calls))
	}
	callers := make([]*caller, o.Clients)
	for i := range callers {
		callers[i] = &caller{rng: rand.New(rand.NewPCG(uint64(i)+1, uint64(time.Now().UnixNano())))}
	}
	// A counted measurement's counters start before its first call; a
	// timed one's when its measured time starts.
	var use0 usage
	var wal0 walCounts
	if !timed {
		use0, wal0 = processUsage(), countWAL(inst)
	}
	start := time.Now()
	for _, w := range callers {
		wg.Add(1)
		go pprof.Do(ctx, clientLabels, func(ctx context.Context) {
			defer wg.Done()
			for ctx.Err() == nil {
				p := phase.Load()
				if p == phaseDone {
					return
				}
				if !timed && tickets.Add(-1) < 0 {
					return
				}
				t0 := time.Now()
				d, err := inst.call(ctx, w)
				elapsed := time.Since(t0)
				if p != phaseMeasure || phase.Load() != phaseMeasure {
					continue // straddles the start or the end: not counted
				}
				if err != nil {
					errs.Add(1)
					errOnce.Do(func() { firstErr = err })
					continue
				}
				calls.Add(1)
				denied.Add(uint64(d))
				w.hist.Record(elapsed)
			}
		})
	}
	var measured time.Duration
	var use usage
	var wal walCounts
	if timed {
		if !sleep(ctx, o.Warmup) {
			phase.Store(phaseDone)
			wg.Wait()
			return Result{}, ctx.Err()
		}
		if o.CPUProfile != nil {
			if err := pprof.StartCPUProfile(o.CPUProfile); err != nil {
				phase.Store(phaseDone)
				wg.Wait()
				return Result{}, err
			}
		}
		if o.Trace != nil {
			if err := trace.Start(o.Trace); err != nil {
				if o.CPUProfile != nil {
					pprof.StopCPUProfile()
				}
				phase.Store(phaseDone)
				wg.Wait()
				return Result{}, err
			}
		}
		if err := writeAllocs(o.AllocsBase); err != nil {
			if o.CPUProfile != nil {
				pprof.StopCPUProfile()
			}
			if o.Trace != nil {
				trace.Stop()
			}
			phase.Store(phaseDone)
			wg.Wait()
			return Result{}, err
		}
		use0, wal0 = processUsage(), countWAL(inst)
		t0 := time.Now()
		phase.Store(phaseMeasure)
		sleep(ctx, o.Duration)
		phase.Store(phaseDone)
		measured, use, wal = time.Since(t0), processUsage().minus(use0), countWAL(inst).minus(wal0)
		if o.CPUProfile != nil {
			pprof.StopCPUProfile()
		}
		if o.Trace != nil {
			trace.Stop()
		}
		err := writeAllocs(o.Allocs)
		wg.Wait()
		if err != nil {
			return Result{}, err
		}
	} else {
		wg.Wait()
		measured, use, wal = time.Since(start), processUsage().minus(use0), countWAL(inst).minus(wal0)
	}
	var h stats.Histogram
	for _, w := range callers {
		h.Merge(&w.hist)
	}
	res := Result{
		Config: cfg.Name, PerCall: cfg.PerCall,
		Calls: calls.Load(), Errors: errs.Load(), Denied: denied.Load(),
		Elapsed: measured, P50: h.Quantile(0.50), P99: h.Quantile(0.99), CPU: use.cpu, Switches: use.switches,
		WALSyncs: wal.syncs, WALBytes: wal.bytes, WALSyncTime: time.Duration(wal.syncNanos),
		Procs: runtime.GOMAXPROCS(0), FirstErr: firstErr,
	}
	return res, ctx.Err()
}

// sleep waits for d or ctx, reporting whether d elapsed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
