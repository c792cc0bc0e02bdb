package server

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/wire"
)

// handleRPCs serves POST /v1/rpcs, the envelope of several whole requests.
// The envelope is bounded, signed and verified as one body; then each of
// its requests runs as if it had come alone to /v1/rpc — its own bounds,
// the stop fence, admission, the engine with replay by its operation id —
// and is answered on its own. Nothing orders them. On a store reached over
// the network (Redis) they run concurrently, so that their round trips
// overlap; on any other they run one after another, and on one that can
// defer its fsyncs (the embedded store) without waiting for theirs: the
// envelope then waits for one fsync before it answers.
func (s *Server) handleRPCs(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	code := s.serveRPCs(w, r)
	s.metrics.called(endpointRPCs, code, start)
}

// serveRPCs answers one POST /v1/rpcs and returns its answer's code, ""
// for a 200.
func (s *Server) serveRPCs(w http.ResponseWriter, r *http.Request) wire.Code {
	buf := envelopeBuffers.get()
	defer envelopeBuffers.put(buf)
	body, code := s.readSigned(w, r, wire.MaxEnvelopeBody, buf)
	if code != "" {
		return code
	}
	var decoded [wire.MaxEnvelope]wire.EnvelopeRequest
	reqs, err := wire.DecodeEnvelope(body, decoded[:0])
	if err != nil {
		writeProblem(w, wire.CodeInvalid, err.Error())
		return wire.CodeInvalid
	}
	answers := make([]wire.Answer, len(reqs))
	ctx := r.Context()
	switch {
	case len(reqs) == 1:
		answers[0] = s.answer(ctx, &reqs[0])
	case s.eng.Remote():
		var wg sync.WaitGroup
		for i := range reqs {
			wg.Go(func() { answers[i] = s.answer(ctx, &reqs[i]) })
		}
		wg.Wait()
	default:
		s.answerInTurn(ctx, reqs, answers)
	}
	for i := range reqs {
		if reqs[i].Err == nil {
			answers[i].OperationID = reqs[i].Request.OperationID
		}
		s.metrics.answered(reqs[i].Request.Steps, answers[i].Response, answerCode(&answers[i]))
	}
	// Every request is decoded: the body's buffer now takes the answer.
	appendAnswer := wire.AppendAnswer
	if minimalAnswer(w, r) {
		appendAnswer = wire.AppendMinimalAnswer
	}
	out := append((*buf)[:0], `{"answers":[`...)
	for i := range answers {
		if i > 0 {
			out = append(out, ',')
		}
		out = appendAnswer(out, &answers[i])
	}
	*buf = append(out, "]}\n"...)
	writeOK(w, *buf)
	return ""
}

// answer runs one request of an envelope and returns what /v1/rpc would
// have answered it.
func (s *Server) answer(ctx context.Context, er *wire.EnvelopeRequest) wire.Answer {
	req, bad, ok := admissible(er)
	if !ok {
		return bad
	}
	resp, code, reason := s.run(ctx, req)
	return answerOf(resp, code, reason)
}

// admissible returns the request of er, or, if /v1/rpc would have refused
// it alone before running it (over MaxBody, malformed, out of bounds), the
// answer it would have given.
func admissible(er *wire.EnvelopeRequest) (*wire.Request, wire.Answer, bool) {
	if len(er.Body) > wire.MaxBody {
		return nil, tooLargeAnswer(er.Body), false
	}
	req, err := validRequest(&er.Request, er.Err)
	if err != nil {
		return nil, problemAnswer(wire.CodeInvalid, err.Error()), false
	}
	return req, wire.Answer{}, true
}

// answerInTurn answers reqs one after another, each deferred on a store
// that can defer its fsyncs, then waits for one fsync for all of them (on
// any other store DoDeferred is Do and Sync does nothing). A request's own
// goroutine would cost more than it saves here: the requests of an
// envelope rarely share a partition, so a durable store commits them one
// by one either way, and a new goroutine grows its stack again for each.
// If the fsync fails, every answer that rested on it becomes a 503.
func (s *Server) answerInTurn(ctx context.Context, reqs []wire.EnvelopeRequest, answers []wire.Answer) {
	var pending [wire.MaxEnvelope]bool
	synced := true
	for i := range reqs {
		req, bad, ok := admissible(&reqs[i])
		if !ok {
			answers[i] = bad
			continue
		}
		resp, code, reason, p := s.runDeferred(ctx, req, true)
		answers[i], pending[i] = answerOf(resp, code, reason), p
		synced = synced && !p
	}
	if synced {
		return
	}
	if err := s.eng.Sync(ctx); err != nil {
		code, reason := s.problem(err)
		for i := range answers {
			if pending[i] {
				answers[i] = problemAnswer(code, reason)
			}
		}
	}
}

// answerOf is the answer of a request that run answered with resp, or
// with the error of code and reason.
func answerOf(resp *engine.Response, code wire.Code, reason string) wire.Answer {
	if code != "" {
		return problemAnswer(code, reason)
	}
	return wire.Answer{Status: http.StatusOK, Response: resp}
}

// tooLargeAnswer answers a request of an envelope over the bound of a lone
// request's body.
func tooLargeAnswer(body []byte) wire.Answer {
	return problemAnswer(wire.CodeTooLarge, fmt.Sprintf("request of %d bytes over the %d-byte bound", len(body), wire.MaxBody))
}

func problemAnswer(code wire.Code, reason string) wire.Answer {
	p := wire.NewProblem(code, reason)
	return wire.Answer{Status: p.Status, Problem: &p}
}

// answerCode returns the code of a's problem, or "" if a is a 200.
func answerCode(a *wire.Answer) wire.Code {
	if a.Problem == nil {
		return ""
	}
	return a.Problem.Code
}
