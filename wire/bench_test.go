package wire

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/engine"
)

// benchRequest returns a request of steps × cmds win.hit as the client
// sends it: partitions and keys hashed to 64 hex digits.
func benchRequest(steps, cmds int) *Request {
	r := &Request{OperationID: strings.Repeat("7c", 16), Family: "default", Mode: engine.All}
	for i := range steps {
		st := engine.Step{Partition: strings.Repeat(strconv.Itoa(i%10), 64)}
		for j := range cmds {
			st.Commands = append(st.Commands, engine.Hit(1, engine.Window{
				Key: strings.Repeat(strconv.Itoa(j%10), 64), Kind: algo.KindGCRA, Limit: 1_000_000, WindowMs: 60_000,
			}))
		}
		r.Steps = append(r.Steps, st)
	}
	return r
}

// benchResponse returns the answer to benchRequest(steps, cmds).
func benchResponse(steps, cmds int) *Response {
	r := &Response{}
	for range steps {
		st := engine.StepResult{}
		for range cmds {
			st.Results = append(st.Results, engine.Result{
				Allowed: true, Remaining: 999_999, ResetAt: 1_767_225_600_060,
				Windows: []engine.WindowResult{{Allowed: true, Remaining: 999_999, ResetAt: 1_767_225_600_060}},
			})
		}
		r.Steps = append(r.Steps, st)
	}
	return r
}

var benchShapes = []struct {
	name        string
	steps, cmds int
}{{"1", 1, 1}, {"32", 4, 8}}

// BenchmarkDecodeRequest compares the server's request decoding with the
// strict encoding/json decoder it replaces.
func BenchmarkDecodeRequest(b *testing.B) {
	for _, sh := range benchShapes {
		body, _ := json.Marshal(benchRequest(sh.steps, sh.cmds))
		b.Run(sh.name+"/encoding-json", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := referenceDecodeRequest(body); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(sh.name+"/wire", func(b *testing.B) {
			b.ReportAllocs()
			var r Request
			for b.Loop() {
				if err := DecodeRequest(body, &r); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkEncodeResponse compares the server's answer encoding with
// json.Encoder's.
func BenchmarkEncodeResponse(b *testing.B) {
	for _, sh := range benchShapes {
		resp := benchResponse(sh.steps, sh.cmds)
		b.Run(sh.name+"/encoding-json", func(b *testing.B) {
			b.ReportAllocs()
			var buf bytes.Buffer
			for b.Loop() {
				buf.Reset()
				if err := json.NewEncoder(&buf).Encode(resp); err != nil {
					b.Fatal(err)
				}
			}
		})
		for _, enc := range []struct {
			name   string
			append func([]byte, *Response) []byte
		}{{"wire", AppendResponse}, {"wire-minimal", AppendMinimalResponse}} {
			b.Run(sh.name+"/"+enc.name, func(b *testing.B) {
				b.ReportAllocs()
				var buf []byte
				for b.Loop() {
					buf = append(enc.append(buf[:0], resp), '\n')
				}
				b.ReportMetric(float64(len(buf)), "bytes/answer")
			})
		}
	}
}

// BenchmarkEncodeRequest compares the client's request encoding with
// json.Marshal.
func BenchmarkEncodeRequest(b *testing.B) {
	for _, sh := range benchShapes {
		req := benchRequest(sh.steps, sh.cmds)
		b.Run(sh.name+"/encoding-json", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := json.Marshal(req); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(sh.name+"/wire", func(b *testing.B) {
			b.ReportAllocs()
			var buf []byte
			for b.Loop() {
				var err error
				if buf, err = AppendRequest(buf[:0], req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDecodeResponse compares the client's answer decoding with
// json.Unmarshal.
func BenchmarkDecodeResponse(b *testing.B) {
	for _, sh := range benchShapes {
		answer, _ := json.Marshal(benchResponse(sh.steps, sh.cmds))
		b.Run(sh.name+"/encoding-json", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var r Response
				if err := json.Unmarshal(answer, &r); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(sh.name+"/wire", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var r Response
				if err := DecodeResponse(answer, &r); err != nil {
					b.Fatal(err)
				}
			}
		})
		// The minimal answer, decoded and its window lists restored, as
		// the client reads it.
		minimal := AppendMinimalResponse(nil, benchResponse(sh.steps, sh.cmds))
		steps := benchRequest(sh.steps, sh.cmds).Steps
		b.Run(sh.name+"/wire-minimal", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var r Response
				if err := DecodeResponse(minimal, &r); err != nil {
					b.Fatal(err)
				}
				r.RestoreWindows(steps)
			}
		})
	}
}

// BenchmarkDecodeEnvelope decodes an envelope of 9 requests as the client
// writes it, and every request in it, as the server does.
func BenchmarkDecodeEnvelope(b *testing.B) {
	for _, sh := range benchShapes {
		var bodies [][]byte
		for range 9 {
			body, err := AppendRequest(nil, benchRequest(sh.steps, sh.cmds))
			if err != nil {
				b.Fatal(err)
			}
			bodies = append(bodies, body)
		}
		env := AppendEnvelope(nil, bodies...)
		b.Run(sh.name, func(b *testing.B) {
			b.ReportAllocs()
			var reqs [MaxEnvelope]EnvelopeRequest
			for b.Loop() {
				got, err := DecodeEnvelope(env, reqs[:0])
				if err != nil {
					b.Fatal(err)
				}
				for i := range got {
					if got[i].Err != nil {
						b.Fatal(got[i].Err)
					}
				}
			}
		})
	}
}
