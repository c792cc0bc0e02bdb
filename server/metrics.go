package server

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/wire"
)

// The server's metrics (Config.Registerer). Their labels take a small,
// fixed set of values: never a partition, a key, an operation id or a
// client's address. docs/operations.md lists them.
const (
	metricCalls     = "sluice_rpc_calls_total"
	metricDuration  = "sluice_rpc_call_duration_seconds"
	metricRequests  = "sluice_rpc_requests_total"
	metricCommands  = "sluice_commands_total"
	metricStopped   = "sluice_stopped"
	metricBuildInfo = "sluice_build_info"
	metricAllowance = "sluice_family_allowance"
	metricUsed      = "sluice_family_used"
	metricFamStop   = "sluice_family_stopped"
)

// The endpoints counted: a lone request and an envelope of several.
const (
	endpointRPC = iota
	endpointRPCs
	numEndpoints
)

var endpointNames = [numEndpoints]string{endpointRPC: "rpc", endpointRPCs: "rpcs"}

// codeOK labels a call or request answered 200.
const codeOK = "ok"

// rpcCodes are the codes an RPC call or request may be answered with; the
// index of each is its counter's.
var rpcCodes = []wire.Code{
	codeOK, wire.CodeInvalid, wire.CodeUnauthorized, wire.CodeWrongType,
	wire.CodeOverflow, wire.CodeConflict, wire.CodeTooLarge, wire.CodeLimited,
	wire.CodeUnavailable, wire.CodeStopped,
}

// otherCode labels a code outside rpcCodes: none today, but a new code
// must be counted somewhere rather than dropped.
const otherCode = "other"

func codeIndex(code wire.Code) int {
	for i, c := range rpcCodes {
		if c == code {
			return i
		}
	}
	return len(rpcCodes)
}

// ops are the commands counted by sluice_commands_total, in the order of
// their counters.
var ops = []engine.Op{
	engine.OpHit, engine.OpGet, engine.OpSet, engine.OpDel, engine.OpTTL,
	engine.OpExpire, engine.OpIncr, engine.OpReserve, engine.OpRefund,
	engine.OpAcquire, engine.OpRenew, engine.OpRelease, engine.OpPaceTake,
	engine.OpPaceClaim, engine.OpPacePenalize,
}

// The outcomes of a command answered 200.
const (
	outcomeAllowed  = iota // run, and allowed (the only outcome of most commands)
	outcomeDenied          // run, and denied: nothing of its step was charged
	outcomeReplayed        // answered from a replay record: nothing charged again
	outcomeSkipped         // not run: an earlier step of a sequential request was denied
	numOutcomes
)

var outcomeNames = [numOutcomes]string{"allowed", "denied", "replayed", "skipped"}

// callBuckets bound an RPC call's time, from a replay answered from memory
// (tens of microseconds) to a store at its timeout.
var callBuckets = []float64{
	0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
	0.25, 0.5, 1, 2.5,
}

// metrics are a server's Prometheus metrics. A nil *metrics counts
// nothing, so a server without a registerer pays one nil check per call.
// Every counter the RPC path touches is resolved once, here, so that
// counting is an atomic add, with no label lookup.
type metrics struct {
	calls    [numEndpoints][]prometheus.Counter // by codeIndex; the last is otherCode
	duration [numEndpoints]prometheus.Observer
	requests []prometheus.Counter              // by codeIndex; the last is otherCode
	commands [][numOutcomes]prometheus.Counter // by the op's index in ops
}

// newMetrics registers s's metrics with reg.
func newMetrics(s *Server, reg prometheus.Registerer) (*metrics, error) {
	calls := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: metricCalls,
		Help: "HTTP calls to the RPC endpoints (endpoint rpc: POST /v1/rpc; rpcs: POST /v1/rpcs), by the code of their answer: ok for 200, otherwise the problem's code.",
	}, []string{"endpoint", "code"})
	duration := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    metricDuration,
		Help:    "Time from an RPC call's arrival at its handler to its answer's being written, in seconds.",
		Buckets: callBuckets,
	}, []string{"endpoint"})
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: metricRequests,
		Help: "Authenticated RPC requests answered (the body of POST /v1/rpc, or one request of an envelope), by the code of their answer: ok, or the problem's code.",
	}, []string{"code"})
	commands := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: metricCommands,
		Help: "Commands of requests answered ok, by command and outcome: allowed, denied (nothing of its step charged), replayed (answered from a replay record, nothing charged again) or skipped (not run after an earlier step's denial).",
	}, []string{"op", "outcome"})
	build := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        metricBuildInfo,
		Help:        "Always 1; its labels name the server's version and the Go release that built it.",
		ConstLabels: prometheus.Labels{"version": s.cfg.Version, "go_version": runtime.Version()},
	})
	collectors := []prometheus.Collector{calls, duration, requests, commands, build, &stateCollector{s: s}}
	for i, c := range collectors {
		if err := reg.Register(c); err != nil {
			for _, r := range collectors[:i] {
				reg.Unregister(r)
			}
			return nil, err
		}
	}
	build.Set(1)

	m := &metrics{requests: resolveCodes(requests)}
	for e, name := range endpointNames {
		m.calls[e] = resolveCodes(calls.MustCurryWith(prometheus.Labels{"endpoint": name}))
		m.duration[e] = duration.WithLabelValues(name)
	}
	m.commands = make([][numOutcomes]prometheus.Counter, len(ops))
	for i, op := range ops {
		for o, outcome := range outcomeNames {
			m.commands[i][o] = commands.WithLabelValues(string(op), outcome)
		}
	}
	return m, nil
}

// resolveCodes returns v's counter of each code of rpcCodes, then
// otherCode's.
func resolveCodes(v *prometheus.CounterVec) []prometheus.Counter {
	out := make([]prometheus.Counter, 0, len(rpcCodes)+1)
	for _, c := range rpcCodes {
		out = append(out, v.WithLabelValues(string(c)))
	}
	return append(out, v.WithLabelValues(otherCode))
}

// called counts a call to endpoint answered with code ("" for 200) that
// arrived at start.
func (m *metrics) called(endpoint int, code wire.Code, start time.Time) {
	if m == nil {
		return
	}
	if code == "" {
		code = codeOK
	}
	m.calls[endpoint][codeIndex(code)].Inc()
	m.duration[endpoint].Observe(time.Since(start).Seconds())
}

// answered counts an authenticated request of steps answered with code,
// or ok with resp; steps is nil for a request refused before it was
// decoded.
func (m *metrics) answered(steps []engine.Step, resp *engine.Response, code wire.Code) {
	if m == nil {
		return
	}
	if code != "" {
		m.requests[codeIndex(code)].Inc()
		return
	}
	m.requests[0].Inc()
	if resp == nil {
		return
	}
	for i := range min(len(steps), len(resp.Steps)) {
		step, res := &steps[i], &resp.Steps[i]
		for j := range step.Commands {
			op := opIndex(step.Commands[j].Op)
			if op < 0 {
				continue
			}
			outcome := outcomeAllowed
			switch {
			case res.Replayed:
				outcome = outcomeReplayed
			case res.Skipped:
				outcome = outcomeSkipped
			case j < len(res.Results) && !res.Results[j].Allowed:
				outcome = outcomeDenied
			}
			m.commands[op][outcome].Inc()
		}
	}
}

func opIndex(op engine.Op) int {
	for i, o := range ops {
		if o == op {
			return i
		}
	}
	return -1
}

// scrapeTimeout bounds the store reads of one scrape.
const scrapeTimeout = 2 * time.Second

// stateCollector reports, at each scrape, the stop fence as an RPC would
// read it (its cached copy while fresh, otherwise the store) and, with
// admission, each family's daily budget as GET /control/state does. A read
// that fails is reported to the scrape as an error.
type stateCollector struct{ s *Server }

var (
	stoppedDesc = prometheus.NewDesc(metricStopped,
		"1 while the operator stop fence is set (every RPC answered guard_stopped), otherwise 0.", nil, nil)
	allowanceDesc = prometheus.NewDesc(metricAllowance,
		"An admission family's allowance for the current UTC day, in decisions.", []string{"family"}, nil)
	usedDesc = prometheus.NewDesc(metricUsed,
		"The part of an admission family's allowance for the current UTC day leased by every server on the store (spent, or held by a server to spend).", []string{"family"}, nil)
	famStopDesc = prometheus.NewDesc(metricFamStop,
		"1 while an admission family is stopped, by an operator or by its exhausted budget, otherwise 0.", []string{"family"}, nil)
)

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- stoppedDesc
	if c.s.cfg.Admission != nil {
		ch <- allowanceDesc
		ch <- usedDesc
		ch <- famStopDesc
	}
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	if st, err := c.s.fence.get(ctx); err != nil {
		ch <- prometheus.NewInvalidMetric(stoppedDesc, err)
	} else {
		ch <- prometheus.MustNewConstMetric(stoppedDesc, prometheus.GaugeValue, flag(st.Stopped))
	}
	if c.s.cfg.Admission == nil {
		return
	}
	fams, err := c.s.cfg.Admission.State(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(allowanceDesc, err)
		return
	}
	for _, f := range fams {
		ch <- prometheus.MustNewConstMetric(allowanceDesc, prometheus.GaugeValue, float64(f.Allowance), f.Family)
		ch <- prometheus.MustNewConstMetric(usedDesc, prometheus.GaugeValue, float64(f.Used), f.Family)
		ch <- prometheus.MustNewConstMetric(famStopDesc, prometheus.GaugeValue, flag(f.Stopped), f.Family)
	}
}

func flag(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// metricsHandler serves GET /metrics: Config.Gatherer's metrics in the
// Prometheus exposition formats, behind the operator token.
func (s *Server) metricsHandler() http.Handler {
	return promhttp.HandlerFor(s.cfg.Gatherer, promhttp.HandlerOpts{
		ErrorLog:      slogErrorLog{s},
		ErrorHandling: promhttp.ContinueOnError,
		Timeout:       2 * scrapeTimeout,
	})
}

// slogErrorLog passes promhttp's errors to the server's log.
type slogErrorLog struct{ s *Server }

func (l slogErrorLog) Println(v ...any) {
	l.s.log.Warn("gathering metrics", "err", fmt.Sprint(v...))
}
