package server

import (
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/wire"
)

// BenchmarkMetrics measures what counting adds to one RPC: a call counted
// with its time, and a request's commands counted by op and outcome, for
// one command and for 32 (the bound), with metrics on and off (nil).
func BenchmarkMetrics(b *testing.B) {
	s := &Server{cfg: DefaultConfig()}
	on, err := newMetrics(s, prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	request := func(n int) ([]engine.Step, *engine.Response) {
		var steps []engine.Step
		resp := &engine.Response{}
		for len(steps)*engine.MaxCommandsPerStep < n {
			k := min(engine.MaxCommandsPerStep, n-len(steps)*engine.MaxCommandsPerStep)
			st := engine.Step{Partition: "p"}
			res := engine.StepResult{}
			for i := range k {
				st.Commands = append(st.Commands, engine.Hit(1))
				res.Results = append(res.Results, engine.Result{Allowed: i%4 != 0})
			}
			steps = append(steps, st)
			resp.Steps = append(resp.Steps, res)
		}
		return steps, resp
	}
	for _, m := range []struct {
		name string
		m    *metrics
	}{{"on", on}, {"off", nil}} {
		b.Run(m.name+"/call", func(b *testing.B) {
			b.ReportAllocs()
			start := time.Now()
			for b.Loop() {
				m.m.called(endpointRPC, "", start)
			}
		})
		for _, n := range []int{1, engine.MaxCommands} {
			steps, resp := request(n)
			b.Run(m.name+"/request-"+strconv.Itoa(n), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					m.m.answered(steps, resp, "")
				}
			})
		}
		b.Run(m.name+"/refused", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				m.m.answered(nil, nil, wire.CodeStopped)
			}
		})
	}
}
