package admission_test

// The cost of admission, alone and on the full RPC path. Reproduce the
// figures of docs/benchmarks.md ("Admission") with rounds that run every
// benchmark back to back, so that admission on and off are compared within
// a round:
//
//	go test -c -o adm.test ./admission/
//	cd admission && for i in $(seq 16); do ../adm.test -test.run '^$' -test.bench . -test.benchmem -test.benchtime 1s; done | tee ../admission.txt
//	benchstat ../admission.txt
//
// Every benchmark runs 64 goroutines whatever GOMAXPROCS is. Besides the
// wall time per operation each reports cpu-ns/op, the CPU time the whole
// process spent per operation (getrusage): on a machine shared with other
// work the wall time swings with the neighbours' load, while the CPU an
// operation costs, which bounds the throughput of a dedicated machine,
// holds steady.

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/cputime"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/server"
	"github.com/sluicehq/sluice/store/diskstore"
	"github.com/sluicehq/sluice/store/memstore"
	"github.com/sluicehq/sluice/store/redisstore"
	"github.com/sluicehq/sluice/wire"
)

// goroutines is the number of concurrent callers in every benchmark.
const goroutines = 64

// benchTotal is a daily budget no benchmark exhausts (the largest budget a
// durable counter may hold), so every RPC measured is an admitted one.
const benchTotal = algo.MaxLimit

// runParallel runs body with b.RunParallel on 64 goroutines and reports
// the process CPU time per operation.
func runParallel(b *testing.B, body func(*testing.PB)) {
	b.SetParallelism(max(1, goroutines/runtime.GOMAXPROCS(0)))
	b.ReportAllocs()
	before, ok := cputime.Process()
	b.ResetTimer()
	b.RunParallel(body)
	b.StopTimer()
	if after, ok2 := cputime.Process(); ok && ok2 && b.N > 0 {
		b.ReportMetric(float64(after-before)/float64(b.N), "cpu-ns/op")
	}
}

func newEngine(b *testing.B) *engine.Engine {
	b.Helper()
	st, err := memstore.New(memstore.DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	return engine.New(st)
}

// benchConfig is one family of benchTotal commands, fair when fair is set.
func benchConfig(fair bool) admission.Config {
	cfg := admission.DefaultConfig()
	cfg.Total = benchTotal
	if fair {
		cfg.Fair = []string{admission.DefaultFamily}
	}
	return cfg
}

// caller numbers the goroutines of a RunParallel, so each has identities of
// its own, as distinct callers do.
type caller struct{ n atomic.Int64 }

func (c *caller) next() string { return strconv.FormatInt(c.n.Add(1), 10) }

// identify sets the identities of caller id on r: a source bucket with its
// two IPv6 tiers, as the Go client sends them, and a principal.
func identify(r *wire.Request, id string) {
	r.Source, r.Principal = "src-"+id, "principal-"+id
	r.SourceTiers = map[string]string{wire.TierV6Slash56: "n56-" + id, wire.TierV6Slash48: "n48-" + id}
}

// BenchmarkAdmit measures Admitter.Admit alone for a one-command RPC:
//
//	identities=none              the non-fair path: the stop check and a
//	                             take from the leased chunk, no store call
//	                             on most admissions
//	identities=source+principal  the fair path: a source with its two IPv6
//	                             tiers and a principal, distinct per
//	                             goroutine, charged from this server's
//	                             quota leases, and durably (two batches:
//	                             the source with its tiers, the principal)
//	                             once per chunk
//	identities=unleased          the same with no leases: every RPC's
//	                             quotas charged durably
//	identities=exhausted         the same RPC of a principal known to be
//	                             exhausted: refused from the denial memory,
//	                             without a store call
func BenchmarkAdmit(b *testing.B) {
	for _, tc := range []struct {
		name            string
		fair, exhausted bool
	}{{"identities=none", false, false}, {"identities=source+principal", true, false}, {"identities=unleased", true, false}, {"identities=exhausted", true, true}} {
		b.Run(tc.name, func(b *testing.B) {
			cfg := benchConfig(tc.fair)
			if tc.name == "identities=unleased" {
				cfg.QuotaChunk = 0
			}
			if tc.exhausted {
				cfg.Shares.Principal = benchTotal / 10 // a principal may spend 10
			}
			a := admission.New(newEngine(b), cfg)
			var callers caller
			runParallel(b, func(pb *testing.PB) {
				r := &wire.Request{OperationID: "op", Family: admission.DefaultFamily,
					Steps: []engine.Step{{Partition: "p", Commands: []engine.Command{engine.Get("k")}}}}
				if tc.fair {
					identify(r, callers.next())
				}
				ctx := context.Background()
				for tc.exhausted {
					if a.Admit(ctx, r) != nil {
						break // the principal is spent, and remembered
					}
				}
				for pb.Next() {
					err := a.Admit(ctx, r)
					if tc.exhausted {
						if err == nil {
							b.Error("an exhausted principal was admitted")
							return
						}
						continue
					}
					if err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// discard is a ResponseWriter that keeps only the status: the benchmark
// measures the server, not a recorder's buffers.
type discard struct {
	h      http.Header
	status int
}

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(p []byte) (int, error) { return len(p), nil }
func (d *discard) WriteHeader(status int)      { d.status = status }

// BenchmarkRPC measures the full POST /v1/rpc path through the server's
// handler over memstore — signature check, strict decoding, the stop fence,
// admission, one win.hit, the encoded answer — for 64 concurrent callers,
// each on a partition of its own:
//
//	admission=off             no Admitter
//	admission=on              one non-fair family
//	admission=off-identities  no Admitter, each RPC carrying a source (with
//	                          its two tiers) and a principal, which are
//	                          decoded and ignored: the baseline of on-fair
//	admission=on-fair         one fair family, each RPC carrying a source
//	                          (with its two tiers) and a principal,
//	                          charged from this server's quota leases and
//	                          in the store once per chunk (the default)
//	admission=on-fair-unleased  the same with every RPC's quotas charged
//	                          in the store (Config.QuotaChunk 0): the cost
//	                          of an identity's first RPC of a chunk
//
// Each iteration also builds and signs its request (a fresh operation id,
// so nothing is answered from a replay record), the same work in every
// variant.
func BenchmarkRPC(b *testing.B) {
	for _, tc := range rpcCases {
		b.Run(tc.name, func(b *testing.B) { benchRPC(b, newEngine(b), tc) })
	}
}

// BenchmarkRPCDurable is BenchmarkRPC over the embedded durable store
// (fsync always, the default), where a fair RPC's charges are Pebble
// commits: the store's share of bench/rpcbench's adm-* configurations,
// without HTTP and the client.
//
//	admission=on-fair-unleased   every RPC's charges in one joint step
//	                             (engine.JointStore)
//	admission=on-fair-two-steps  the same over the store without its joint
//	                             steps: the source with its tiers in one
//	                             batch, the principal in a second, as on a
//	                             store that cannot join them
func BenchmarkRPCDurable(b *testing.B) {
	for _, tc := range append(rpcCases, rpcCase{"admission=on-fair-two-steps", true, true, true, true}) {
		b.Run(tc.name, func(b *testing.B) {
			cfg := diskstore.DefaultConfig()
			cfg.Dir = b.TempDir()
			st, err := diskstore.Open(cfg)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { st.Close() })
			var s engine.Store = st
			if tc.name == "admission=on-fair-two-steps" {
				s = unjoined{st}
			}
			benchRPC(b, engine.New(s), tc)
		})
	}
}

// BenchmarkRPCRedis is BenchmarkRPC over the Redis store on one local
// redis-server (started by the benchmark), where each of a fair RPC's
// charges is a round trip to Redis:
//
//	admission=on-fair-unleased   every RPC's charges in one joint step:
//	                             one script call for the source, its tiers
//	                             and the principal
//	admission=on-fair-two-steps  the same over the store without its joint
//	                             steps: two script calls, as on a cluster
func BenchmarkRPCRedis(b *testing.B) {
	srv := redistest.Start(b)
	for i, tc := range append(rpcCases, rpcCase{"admission=on-fair-two-steps", true, true, true, true}) {
		b.Run(tc.name, func(b *testing.B) {
			cfg := redisstore.DefaultConfig()
			cfg.Prefix = fmt.Sprint("bench", i)
			st, err := redisstore.New(redis.NewClient(srv.Options()), cfg)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { st.Close() })
			var s engine.Store = st
			if tc.name == "admission=on-fair-two-steps" {
				s = struct{ engine.Store }{st}
			}
			benchRPC(b, engine.New(s), tc)
		})
	}
}

// unjoined is the embedded store without its joint steps: a
// DeferredSyncStore that is not a JointStore.
type unjoined struct{ st *diskstore.Store }

func (u unjoined) Apply(ctx context.Context, b *engine.Batch, out *engine.StepResult) error {
	return u.st.Apply(ctx, b, out)
}

func (u unjoined) ApplyDeferred(ctx context.Context, b *engine.Batch, out *engine.StepResult) error {
	return u.st.ApplyDeferred(ctx, b, out)
}

func (u unjoined) Sync(ctx context.Context) error { return u.st.Sync(ctx) }
func (u unjoined) Close() error                   { return u.st.Close() }

type rpcCase struct {
	name            string
	admission, fair bool
	identities      bool
	// unleased charges every fair RPC's quotas in the store
	// (Config.QuotaChunk 0).
	unleased bool
}

var rpcCases = []rpcCase{
	{"admission=off", false, false, false, false},
	{"admission=on", true, false, false, false},
	{"admission=off-identities", false, false, true, false},
	{"admission=on-fair", true, true, true, false},
	{"admission=on-fair-unleased", true, true, true, true},
}

func benchRPC(b *testing.B, eng *engine.Engine, tc rpcCase) {
	secret := strings.Repeat("s", wire.MinSecretLen)
	cfg := server.DefaultConfig()
	cfg.Secrets, cfg.OperatorToken = []string{secret}, strings.Repeat("o", wire.MinSecretLen)
	if tc.admission {
		acfg := benchConfig(tc.fair)
		if tc.unleased {
			acfg.QuotaChunk = 0
		}
		cfg.Admission = admission.New(eng, acfg)
	}
	srv := server.New(eng, cfg)
	var callers caller
	runParallel(b, func(pb *testing.PB) {
		id := callers.next()
		identities := ""
		if tc.identities {
			identities = `"source":"src-` + id + `","principal":"principal-` + id +
				`","sourceTiers":{"v6/56":"n56-` + id + `","v6/48":"n48-` + id + `"},`
		}
		prefix := []byte(`{"operationId":"` + id + `-`)
		suffix := []byte(`","family":"default",` + identities + `"steps":[{"partition":"caller-` + id +
			`","commands":[{"op":"win.hit","cost":1,"windows":[{"key":"w","kind":"sliding","limit":1099511627776,"windowMs":60000}]}]}]}`)
		w := &discard{h: http.Header{}}
		var seq int64
		body := make([]byte, 0, len(prefix)+len(suffix)+20)
		for pb.Next() {
			seq++
			body = append(strconv.AppendInt(append(body[:0], prefix...), seq, 10), suffix...)
			ts := time.Now().Unix()
			req := httptest.NewRequest(http.MethodPost, wire.PathRPC, bytes.NewReader(body))
			req.Header.Set(wire.HeaderTimestamp, strconv.FormatInt(ts, 10))
			req.Header.Set(wire.HeaderSignature, wire.Sign([]byte(secret), ts, http.MethodPost, wire.PathRPC, body))
			clear(w.h)
			w.status = http.StatusOK
			srv.ServeHTTP(w, req)
			if w.status != http.StatusOK {
				b.Errorf("answer %d", w.status)
				return
			}
		}
	})
}
