package client_test

import (
	"context"
	"runtime"
	"strconv"
	"testing"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/cputime"
	"github.com/sluicehq/sluice/server"
	"github.com/sluicehq/sluice/store/memstore"
)

// BenchmarkRPC measures whole calls through the client, the HTTP stack and
// the server over loopback, on the in-memory store so that the transport
// and the codec dominate: 64 concurrent callers, one win.hit per call or 4
// steps × 8, over each HTTP version, with the client's default coalescing
// and, for one win.hit, without it (-single). It reports the CPU time of
// the whole process per call (client and server share it), which holds
// steadier than the time per call on a shared machine.
func BenchmarkRPC(b *testing.B) {
	for _, version := range []client.HTTPVersion{client.HTTP1, client.HTTP2} {
		for _, shape := range []struct {
			steps, cmds int
			coalesce    int
			suffix      string
		}{{1, 1, 0, ""}, {1, 1, client.CoalesceOff, "-single"}, {4, 8, 0, ""}} {
			name := "HTTP" + string(version) + "/" + strconv.Itoa(shape.steps*shape.cmds) + shape.suffix
			b.Run(name, func(b *testing.B) { benchRPC(b, version, shape.steps, shape.cmds, shape.coalesce) })
		}
	}
}

func benchRPC(b *testing.B, version client.HTTPVersion, steps, cmds, coalesce int) {
	st, err := memstore.New(memstore.DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	scfg := server.DefaultConfig()
	scfg.Secrets = []string{testSecret}
	scfg.OperatorToken = testToken
	srv := startHTTPServer(b, server.New(engine.New(st), scfg))
	cfg := client.DefaultConfig()
	cfg.URL, cfg.Secret, cfg.Pepper, cfg.HTTPVersion, cfg.Coalesce = srv.URL, testSecret, testPepper, version, coalesce
	cfg.Timeout = client.MaxTimeout // a failure bound on a loaded machine
	c := client.New(cfg)
	b.Cleanup(func() { c.Close() })
	eng := engine.New(c)

	const goroutines = 64
	b.SetParallelism(max(1, goroutines/runtime.GOMAXPROCS(0)))
	b.ReportAllocs()
	before, ok := cputime.Process()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		r := &engine.Request{Mode: engine.All, Steps: make([]engine.Step, steps)}
		for i := range r.Steps {
			r.Steps[i].Partition = "tenant-" + strconv.Itoa(i)
			for j := range cmds {
				w := engine.Window{Key: "limit-" + strconv.Itoa(j), Kind: algo.KindGCRA, Limit: algo.MaxLimit, WindowMs: 60_000}
				r.Steps[i].Commands = append(r.Steps[i].Commands, engine.Hit(1, w))
			}
		}
		for pb.Next() {
			r.OperationID = ""
			if _, err := eng.Do(context.Background(), r); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	if after, ok2 := cputime.Process(); ok && ok2 && b.N > 0 {
		b.ReportMetric(float64(after-before)/float64(b.N), "cpu-ns/op")
	}
}
