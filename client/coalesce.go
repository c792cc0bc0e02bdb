package client

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/coalesce"
	"github.com/sluicehq/sluice/wire"
)

// coalescer gathers concurrent calls into envelopes (POST /v1/rpcs) by
// natural batching, with no timer (see internal/coalesce): while fewer than
// its limit of RPCs are in flight, a call is sent at once, alone; a call
// made while every place is taken waits in the queue, and the next sender
// to finish takes up to an envelope's worth of the queue. So an idle client
// adds no delay, and a busy one sends fewer, larger requests, each costing
// the server one HTTP exchange and, on a durable store, one group commit.
// Calls waiting that fill half an envelope's body go at once, in one more
// RPC, up to extraPlaces times the limit in flight (see readyEnvelope).
type coalescer struct {
	*coalesce.Queue[*pending]
	// single is set once the server is known to serve no envelopes: every
	// call is then sent alone, as without a coalescer.
	single atomic.Bool
	// timers recycles the timers queued calls wait with (see do).
	timers sync.Pool
}

func newCoalescer(limit int) *coalescer {
	return &coalescer{Queue: coalesce.New(coalesce.Config[*pending]{
		Limit:     limit,
		Max:       wire.MaxEnvelope,
		Fits:      fitsEnvelope,
		Ready:     readyEnvelope,
		MaxPlaces: extraPlaces * limit,
		// Each envelope costs the server an HTTP exchange and a request:
		// the callers an envelope answered go in the next one together
		// rather than one of them alone (docs/decisions/0051).
		YieldAfterBatch: true,
	})}
}

// fitsEnvelope reports whether next may join batch in one envelope: within
// wire.MaxEnvelopeBody.
func fitsEnvelope(batch []*pending, next *pending) bool {
	return wire.EnvelopeSize(len(batch)+1, bodies(batch)+len(next.body)) <= wire.MaxEnvelopeBody
}

// bodies returns the bytes of the calls' encoded requests.
func bodies(calls []*pending) int {
	size := 0
	for _, p := range calls {
		size += len(p.body)
	}
	return size
}

// readyBody is the size of the calls waiting at which they go at once,
// in a place beyond the limit: half the largest envelope body. Calls of
// many commands reach it in a handful (a request of 32 hits with hashed
// keys takes several KiB); calls of one command do not (32 of them take
// about 11 KiB), and wait for a place to fill their envelope.
const readyBody = wire.MaxEnvelopeBody / 2

// extraPlaces times the limit bounds the RPCs in flight with the ones
// readyEnvelope opens, and so the connections a client holds.
const extraPlaces = 4

// readyEnvelope reports whether the calls waiting already fill half an
// envelope: each shares its exchange and fsync with enough decisions that
// waiting for a place would only add latency, while the server stands
// idle between the fsyncs of the envelopes in flight.
func readyEnvelope(queued []*pending) bool { return bodies(queued) >= readyBody }

// pending is a queued call. Its sender writes resp and err, then closes
// done; a caller that gave up (its ctx ended, or the client's timeout
// passed) never reads them.
type pending struct {
	ctx    context.Context // the caller's
	id     string          // the request's operation id
	body   []byte          // the encoded request, owned
	resp   engine.Response
	err    error
	done   chan struct{}
	gaveUp atomic.Bool // the caller's wait timed out
	// cancel ends the call's RPC when it is sent alone (see sendAlone).
	cancel atomic.Pointer[context.CancelFunc]
}

// giveUp marks the call given up at its timeout: no batch takes it from
// then on, and its RPC, if it was sent alone, ends.
func (p *pending) giveUp() {
	p.gaveUp.Store(true)
	if cancel := p.cancel.Load(); cancel != nil {
		(*cancel)()
	}
}

// Abandoned reports that the caller gave up waiting.
func (p *pending) Abandoned() bool { return p.gaveUp.Load() || p.ctx.Err() != nil }

// do sends body, the encoded request of one call, and decodes its answer
// into out: at once while a sender is free, and otherwise with the calls
// that queue alongside it. The client's timeout bounds the call, its wait
// in the queue and its envelope together. A caller whose ctx ends first,
// or whose timeout passes, returns an error wrapping ErrUnavailable and
// its cause (context.DeadlineExceeded for the timeout); its request may
// still be sent, so its outcome is unknown.
//
// A queued call waits with a timer from a pool rather than a context of
// its own: deriving a context with a deadline for every call, and
// cancelling it, took 3.6 % of the CPU of a process serving and sending
// 64 callers' one-decision calls (docs/benchmarks.md).
func (s *shared) do(ctx context.Context, id string, body []byte, out *engine.Response) error {
	co := s.co
	if co == nil || co.single.Load() {
		return s.rpcWithin(ctx, body, out)
	}
	p, now := co.Enter(func() *pending { return &pending{ctx: ctx, id: id, body: body, done: make(chan struct{})} }, s.send)
	if now {
		err := s.rpcWithin(ctx, body, out)
		co.Leave(s.send)
		return err
	}
	t := s.getTimer()
	defer s.putTimer(t)
	select {
	case <-p.done:
		*out = p.resp
		return p.err
	case <-ctx.Done():
		return unavailable(ctx.Err())
	case <-t.C:
		p.giveUp()
		return unavailable(context.DeadlineExceeded)
	}
}

// rpcWithin sends body alone as an RPC, bounded by ctx and the client's
// timeout.
func (s *shared) rpcWithin(ctx context.Context, body []byte, out *engine.Response) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	return s.rpc(ctx, body, out)
}

// getTimer returns a running timer that fires after the client's timeout,
// from the coalescer's pool.
func (s *shared) getTimer() *time.Timer {
	if t, ok := s.co.timers.Get().(*time.Timer); ok {
		t.Reset(s.timeout)
		return t
	}
	return time.NewTimer(s.timeout)
}

// putTimer stops t and returns it to the pool. Since Go 1.23 a stopped
// timer's channel holds no stale value; a program that asks for the older
// timers (GODEBUG asynctimerchan=1) may find one there, which would end
// the next wait at once, so it is drained.
func (s *shared) putTimer(t *time.Timer) {
	if !t.Stop() {
		select {
		case <-t.C:
		default:
		}
	}
	s.co.timers.Put(t)
}

// send sends a batch of queued calls and answers each: several as an
// envelope, one alone as an RPC. Against a server without the envelope
// endpoint it sends each alone, and so every call from then on.
func (s *shared) send(batch []*pending) {
	if len(batch) > 1 && !s.co.single.Load() {
		answers, err := s.envelope(batch)
		if err != errNoEnvelope {
			for i, p := range batch {
				p.err = err
				if err == nil {
					p.err = answerOf(p.id, &answers[i], &p.resp)
				}
				close(p.done)
			}
			return
		}
		// The server ran none of them: a 404 is answered before the
		// body is read. Sending each alone is no retry.
		s.co.single.Store(true)
		s.log.Info("sluice server serves no envelopes: sending every call alone")
	}
	var wg sync.WaitGroup
	for _, p := range batch {
		wg.Go(func() { s.sendAlone(p) })
	}
	wg.Wait()
}

// sendAlone sends a queued call as an RPC of its own and answers it. The
// RPC ends when the caller gives up: at the caller's context, or at the
// client's timeout from when the call was made, which its caller's timer
// measures, not from when it was sent.
func (s *shared) sendAlone(p *pending) {
	ctx, cancel := context.WithCancel(p.ctx)
	defer cancel()
	// The caller gives up by setting gaveUp and then loading cancel; the
	// atomics are sequentially consistent, so either it sees cancel or
	// this sees gaveUp.
	p.cancel.Store(&cancel)
	if p.gaveUp.Load() {
		cancel()
	}
	p.err = s.rpc(ctx, p.body, &p.resp)
	close(p.done)
}

// answerOf maps one answer of an envelope to what the call it answers,
// of operation id id, returns, as if it had been answered alone. An answer
// naming another operation is none of the call's.
func answerOf(id string, a *wire.Answer, out *engine.Response) error {
	switch {
	case a.OperationID != "" && a.OperationID != id:
		return unavailable(fmt.Errorf("envelope answer of operation %q for operation %q", a.OperationID, id))
	case a.Status == http.StatusOK && a.Response != nil:
		*out = *a.Response
		return nil
	case a.Status != http.StatusOK && a.Problem != nil:
		return problemError(a.Status, *a.Problem)
	}
	return unavailable(fmt.Errorf("envelope answer of status %d without its response or problem", a.Status))
}

// errNoEnvelope reports a 404 to an envelope: the server predates them.
var errNoEnvelope = fmt.Errorf("%w: the server serves no %s", ErrUnavailable, wire.PathRPCs)

// envelope sends the requests of batch as one envelope and returns their
// answers, one per request. The envelope serves several callers, so it is
// bounded by the client's timeout rather than by any caller's context.
func (s *shared) envelope(batch []*pending) ([]wire.Answer, error) {
	bodies := make([][]byte, len(batch))
	size := 0
	for i, p := range batch {
		bodies[i] = p.body
		size += len(p.body)
	}
	// The body is the transport's until it is done with it: not pooled.
	body := wire.AppendEnvelope(make([]byte, 0, wire.EnvelopeSize(len(bodies), size)), bodies...)
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.rpcsURL, bytes.NewReader(body))
	if err != nil {
		return nil, unavailable(err)
	}
	s.sign(req, wire.PathRPCs, body)
	buf := getBuffer()
	defer putBuffer(buf)
	status, answer, err := s.roundTrip(req, (*buf)[:0], maxAnswer*len(batch))
	*buf = answer[:0]
	switch {
	case err != nil:
		return nil, err
	case status == http.StatusNotFound:
		return nil, errNoEnvelope
	case status != http.StatusOK:
		return nil, envelopeError(status, answer)
	}
	var resp wire.EnvelopeResponse
	if err := wire.DecodeEnvelopeResponse(answer, &resp); err != nil {
		return nil, unavailable(fmt.Errorf("undecodable envelope answer: %w", err))
	}
	if len(resp.Answers) != len(batch) {
		return nil, unavailable(fmt.Errorf("envelope answer holds %d answers for %d requests", len(resp.Answers), len(batch)))
	}
	return resp.Answers, nil
}

// rpc sends body, one encoded request, as a signed RPC and decodes a
// successful answer into out.
func (s *shared) rpc(ctx context.Context, body []byte, out *engine.Response) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.rpcURL, bytes.NewReader(body))
	if err != nil {
		return unavailable(err)
	}
	s.sign(req, wire.PathRPC, body)
	buf := getBuffer()
	defer putBuffer(buf)
	status, answer, err := s.roundTrip(req, (*buf)[:0], maxAnswer)
	*buf = answer[:0]
	if err != nil {
		return err
	}
	if status != http.StatusOK {
		return answerError(status, answer)
	}
	if err := wire.DecodeResponse(answer, out); err != nil {
		return unavailable(fmt.Errorf("undecodable answer: %w", err))
	}
	return nil
}

// sign sets the Content-Type and the signature headers of a POST of body
// to path.
func (s *shared) sign(req *http.Request, path string, body []byte) {
	ts := s.now().Unix()
	req.Header[headerContentType] = jsonContentType
	req.Header[wire.HeaderTimestamp] = []string{strconv.FormatInt(ts, 10)}
	req.Header[wire.HeaderSignature] = []string{s.signer.Sign(ts, http.MethodPost, path, body)}
	req.Header[wire.HeaderPrefer] = preferMinimal
}
