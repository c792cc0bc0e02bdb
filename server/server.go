// Package server is the Sluice server: the signed RPC over one engine, the
// durable stop fence and the operator endpoints, the paced-call limiters
// and route quota policies kept in the store (/v1/limiters, /v1/policies),
// health checks, and Prometheus metrics (Config.Registerer, served at
// /metrics behind the operator token when Config.Gatherer is set).
//
// The handler order of POST /v1/rpc is part of the contract (see
// docs/protocol.md): configuration, body bound, signature, JSON, bounds,
// stop fence, admission, and only then the subject commands. Everything a
// caller can send before its signature is verified is bounded and parsed by
// nothing but the signature check. POST /v1/rpcs, the envelope of several
// requests, checks its own configuration, bound and signature the same way
// and then runs each request it carries as /v1/rpc would: concurrently on
// a store reached over the network, one after another on any other.
package server

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/pace"
	"github.com/sluicehq/sluice/wire"
)

// Server serves the Sluice RPC and operator API over one engine.
type Server struct {
	eng      *engine.Engine
	cfg      Config
	log      *slog.Logger
	now      func() time.Time
	verifier *wire.Verifier
	opHash   [sha256.Size]byte
	fence    *fence
	// misconfigured holds the reason every RPC is refused, or "".
	misconfigured string
	mux           *http.ServeMux
	// limiters is the paced-call limiter registry of /v1/limiters, nil
	// without a pepper; limitsHash is the limits key's hash, if any.
	limiters     *pace.Registry
	policies     *httplimit.Policies // route quota policies of /v1/policies, nil without a pepper
	limitsHash   [sha256.Size]byte
	hasLimitsKey bool
	metrics      *metrics // nil without Config.Registerer
}

// New returns a Server running requests on eng. An invalid cfg does not fail
// New: the server then answers every RPC and operator call 503
// guard_unavailable with the reason, which is logged once here, so a bad
// deployment is loud rather than silently open.
func New(eng *engine.Engine, cfg Config) *Server {
	s := &Server{eng: eng, cfg: cfg, log: cfg.Logger, now: cfg.Now}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.now == nil {
		s.now = time.Now
	}
	if cfg.Registerer != nil {
		m, err := newMetrics(s, cfg.Registerer)
		if err != nil {
			cfg.AddProblem(fmt.Errorf("registering the server's metrics: %w", err))
		}
		s.metrics = m
	}
	if err := cfg.Validate(); err != nil {
		s.misconfigured = "invalid configuration: " + strings.ReplaceAll(err.Error(), "\n", "; ")
		s.log.Error("refusing every RPC", "reason", s.misconfigured)
	} else {
		secrets := make([][]byte, len(cfg.Secrets))
		for i, sec := range cfg.Secrets {
			secrets[i] = []byte(sec)
		}
		s.verifier = wire.NewVerifier(secrets)
		s.opHash = sha256.Sum256([]byte(cfg.OperatorToken))
		s.initLimiters()
	}
	s.fence = newFence(eng, cfg.FenceRefresh, s.now)
	s.routes()
	return s
}

// ServeHTTP implements http.Handler. A path that is not in its clean form
// ("//v1/rpc", "/v1/./ping") names no endpoint: it answers 404 not_found,
// where http.ServeMux would redirect it, with no problem document, to the
// path cleaned.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.ProtoMajor == 1 && (r.ContentLength < 0 || r.ContentLength > wire.MaxBody) {
		// Until a handler reads the body whole (keepConnection), its
		// answer closes the connection: net/http would otherwise drain
		// up to 256 KiB of a body the handler refused unread (no
		// signature, no token, no endpoint) or left unread (a GET),
		// hoping to keep the connection alive.
		w.Header()["Connection"] = closeConnection
	}
	if p := r.URL.Path; r.Method != http.MethodConnect && !isCleanPath(p) {
		writeProblem(w, wire.CodeNotFound, "no such endpoint")
		return
	}
	s.mux.ServeHTTP(w, r)
}

var closeConnection = []string{"close"}

// keepConnection lets the answer to a request whose body its handler has
// read whole keep an HTTP/1 connection alive (see ServeHTTP).
func keepConnection(w http.ResponseWriter, r *http.Request) {
	if r.ProtoMajor == 1 {
		delete(w.Header(), "Connection")
	}
}

// isCleanPath reports whether p is a path http.ServeMux serves as it is,
// rather than redirecting it: rooted, with no empty, "." or ".." element
// (a trailing slash aside).
func isCleanPath(p string) bool {
	if p == "" || p[0] != '/' {
		return false
	}
	if p == "/" {
		return true
	}
	return path.Clean(p) == strings.TrimSuffix(p, "/")
}

func (s *Server) routes() {
	s.mux = http.NewServeMux()
	allow := map[string]string{} // path → its method, for 405 answers
	handle := func(method, path string, h http.HandlerFunc) {
		s.mux.HandleFunc(method+" "+path, h)
		allow[path] = method
	}
	handle(http.MethodPost, wire.PathRPC, s.handleRPC)
	handle(http.MethodPost, wire.PathRPCs, s.handleRPCs)
	handle(http.MethodGet, wire.PathPing, s.handlePing)
	handle(http.MethodPost, wire.PathStop, s.operator(s.handleStop))
	handle(http.MethodPost, wire.PathResume, s.operator(s.handleResume))
	handle(http.MethodGet, wire.PathState, s.operator(s.handleState))
	handle(http.MethodPost, wire.PathFairnessReset, s.operator(s.handleFairnessReset))
	handle(http.MethodGet, wire.PathAudit, s.operator(s.handleAudit))
	handle(http.MethodGet, wire.PathHealthz, s.handleHealthz)
	handle(http.MethodGet, wire.PathReadyz, s.handleReadyz)
	if s.cfg.Gatherer != nil {
		handle(http.MethodGet, wire.PathMetrics, s.operator(s.metricsHandler().ServeHTTP))
	}
	s.routeLimiters()
	s.routePolicies()
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if method, ok := allow[r.URL.Path]; ok {
			if method == http.MethodGet {
				notAllowed(w, r, method, http.MethodHead)
			} else {
				notAllowed(w, r, method)
			}
			return
		}
		writeProblem(w, wire.CodeNotFound, "no such endpoint")
	})
}

// methodAllowed reports whether r's method is one of methods, and
// otherwise answers it 405 (see notAllowed).
func methodAllowed(w http.ResponseWriter, r *http.Request, methods ...string) bool {
	if slices.Contains(methods, r.Method) {
		return true
	}
	notAllowed(w, r, methods...)
	return false
}

// notAllowed answers r 405 method_not_allowed, with an Allow header
// naming the methods its path takes.
func notAllowed(w http.ResponseWriter, r *http.Request, methods ...string) {
	w.Header().Set("Allow", strings.Join(methods, ", "))
	writeProblem(w, wire.CodeMethod, r.Method+" is not allowed on "+r.URL.Path)
}

func (s *Server) handleRPC(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	code := s.serveRPC(w, r)
	s.metrics.called(endpointRPC, code, start)
}

// serveRPC answers one POST /v1/rpc and returns its answer's code, "" for
// a 200.
func (s *Server) serveRPC(w http.ResponseWriter, r *http.Request) wire.Code {
	buf := rpcBuffers.get()
	defer rpcBuffers.put(buf)
	body, code := s.readSigned(w, r, wire.MaxBody, buf)
	if code != "" {
		return code
	}
	req, err := decodeRequest(body)
	if err != nil {
		s.metrics.answered(nil, nil, wire.CodeInvalid)
		writeProblem(w, wire.CodeInvalid, err.Error())
		return wire.CodeInvalid
	}
	resp, code, reason := s.run(r.Context(), req)
	s.metrics.answered(req.Steps, resp, code)
	if code != "" {
		writeProblem(w, code, reason)
		return code
	}
	// The body is read and decoded: its buffer now takes the answer.
	if minimalAnswer(w, r) {
		*buf = wire.AppendMinimalResponse((*buf)[:0], resp)
	} else {
		*buf = wire.AppendResponse((*buf)[:0], resp)
	}
	*buf = append(*buf, '\n')
	writeOK(w, *buf)
	return ""
}

// readSigned reads the body of a signed request into buf, bounded by bound,
// and verifies its signature. When either fails, or the server is
// misconfigured, it answers w and returns the answer's code. Nothing
// before the signature check looks into the body.
func (s *Server) readSigned(w http.ResponseWriter, r *http.Request, bound int, buf *[]byte) ([]byte, wire.Code) {
	if s.misconfigured != "" {
		writeProblem(w, wire.CodeUnavailable, s.misconfigured)
		return nil, wire.CodeUnavailable
	}
	if r.ContentLength > int64(bound) {
		writeTooLarge(w, r, fmt.Sprintf("body of %d bytes over the %d-byte bound", r.ContentLength, bound))
		return nil, wire.CodeTooLarge
	}
	ts, sig := r.Header.Get(wire.HeaderTimestamp), r.Header.Get(wire.HeaderSignature)
	if ts == "" || sig == "" {
		writeProblem(w, wire.CodeUnauthorized, wire.ErrMissingSignature.Error())
		return nil, wire.CodeUnauthorized
	}
	body, err := wire.AppendBody((*buf)[:0], r.Body, bound)
	*buf = body[:0]
	if errors.Is(err, wire.ErrBodyTooLarge) {
		writeTooLarge(w, r, fmt.Sprintf("body over the %d-byte bound", bound))
		return nil, wire.CodeTooLarge
	}
	if err != nil {
		// Before authentication nothing answers 400: a body that could not
		// be read (broken chunked encoding, a read timeout) could not be
		// authenticated either.
		writeProblem(w, wire.CodeUnauthorized, "the body could not be read, so its signature could not be checked")
		return nil, wire.CodeUnauthorized
	}
	keepConnection(w, r)
	if err := s.verifier.Verify(s.now(), ts, sig, r.Method, r.URL.Path, body); err != nil {
		writeProblem(w, wire.CodeUnauthorized, err.Error())
		return nil, wire.CodeUnauthorized
	}
	return body, ""
}

// run runs one decoded and validated RPC request (see decodeRequest): stop
// fence, admission, and the engine, which replays a known operation id. It
// returns the response, or the code and reason of the error answer.
func (s *Server) run(ctx context.Context, req *wire.Request) (*engine.Response, wire.Code, string) {
	resp, code, reason, pending := s.runDeferred(ctx, req, false)
	if !pending {
		return resp, code, reason
	}
	// An admitted fair RPC: its charges, the subject request and its
	// replay record wait for one fsync, which every answer follows, a
	// failure's as well as a grant's. If it fails, nothing is granted.
	if err := s.eng.Sync(ctx); err != nil {
		code, reason := s.problem(err)
		return nil, code, reason
	}
	return resp, code, reason
}

// runDeferred is run, except that the answer it returns may rest on
// deferred writes that are not yet durable: then pending is true, and the
// caller calls Engine.Sync before it sends that answer, sending a 503
// instead if the Sync fails. With all, every request that reaches the
// engine runs deferred; otherwise only an admitted fair RPC does, whose
// admission charges are deferred already.
func (s *Server) runDeferred(ctx context.Context, req *wire.Request, all bool) (resp *engine.Response, code wire.Code, reason string, pending bool) {
	if st, err := s.fence.get(ctx); err != nil {
		if ctx.Err() == nil { // not a caller that went away meanwhile
			s.log.Error("stop fence unreadable", "err", err)
		}
		return nil, wire.CodeUnavailable, "stop fence unreadable", false
	} else if st.Stopped {
		return nil, wire.CodeStopped, "stopped by the operator", false
	}
	var err error
	if s.cfg.Admission != nil {
		// A refusal needs no Sync: admission writes nothing that a crash
		// could lose to the caller's benefit (decision 0065).
		if pending, err = s.cfg.Admission.AdmitDeferred(ctx, req); err != nil {
			code, reason := s.problem(err)
			return nil, code, reason, false
		}
	}
	if pending || all {
		resp, err = s.eng.DoDeferred(ctx, req.Engine())
		pending = true
	} else {
		resp, err = s.eng.Do(ctx, req.Engine())
	}
	if err != nil {
		code, reason := s.problem(err)
		return nil, code, reason, pending
	}
	return resp, "", "", pending
}

// minimalAnswer reports whether r asks for a minimal answer
// (wire.PreferMinimal) and, if so, says in w's header that it gets one.
// Call it just before writing a 200: only its body has a minimal form.
func minimalAnswer(w http.ResponseWriter, r *http.Request) bool {
	if !wire.PrefersMinimal(r.Header[wire.HeaderPrefer]) {
		return false
	}
	w.Header()[wire.HeaderPreferenceApplied] = preferMinimal
	return true
}

// preferMinimal is the value of a Preference-Applied header, assigned to the
// header map as it is, as jsonContentType is.
var preferMinimal = []string{wire.PreferMinimal}

// writeOK sends a 200 JSON answer.
func writeOK(w http.ResponseWriter, body []byte) {
	h := w.Header()
	h["Content-Type"] = jsonContentType
	h["Content-Length"] = []string{strconv.Itoa(len(body))}
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
}

// jsonContentType is the Content-Type of every JSON answer. Handlers assign
// it to the header map as it is; net/http never modifies it.
var jsonContentType = []string{"application/json"}

// decodeRequest parses and validates an RPC body strictly: unknown fields,
// trailing data and out-of-bounds values are all errors.
func decodeRequest(body []byte) (*wire.Request, error) {
	var req wire.Request
	return validRequest(&req, wire.DecodeRequest(body, &req))
}

// validRequest returns req, which decoding returned err for, if both its
// decoding and its bounds hold; otherwise the error (400 invalid). The
// request holds no reference to the body it was decoded from: every
// string is a copy.
func validRequest(req *wire.Request, err error) (*wire.Request, error) {
	if err == nil {
		err = req.Validate()
	}
	if err != nil {
		return nil, err
	}
	return req, nil
}

// bufferPool recycles the buffers a handler reads a body into and writes
// its answer from. Each has room for the largest body and the byte that
// shows it too large; one that an answer grew past four times that is
// dropped rather than kept.
type bufferPool struct {
	pool sync.Pool
	size int
}

func newBufferPool(maxBody int) *bufferPool {
	p := &bufferPool{size: maxBody + 1}
	p.pool.New = func() any {
		b := make([]byte, 0, p.size)
		return &b
	}
	return p
}

var (
	rpcBuffers      = newBufferPool(wire.MaxBody)
	envelopeBuffers = newBufferPool(wire.MaxEnvelopeBody)
)

func (p *bufferPool) get() *[]byte { return p.pool.Get().(*[]byte) }

func (p *bufferPool) put(b *[]byte) {
	if cap(*b) <= 4*p.size {
		*b = (*b)[:0]
		p.pool.Put(b)
	}
}

// writeError maps an engine, admission or store error to its answer.
func (s *Server) writeError(w http.ResponseWriter, err error) {
	code, reason := s.problem(err)
	writeProblem(w, code, reason)
}

// problem returns the code and reason answering an engine, admission or
// store error.
func (s *Server) problem(err error) (wire.Code, string) {
	var werr *wire.Error
	switch {
	case errors.As(err, &werr):
		return werr.Code, werr.Reason
	case errors.Is(err, engine.ErrInvalid):
		return wire.CodeInvalid, err.Error()
	case errors.Is(err, engine.ErrOperationConflict):
		return wire.CodeConflict, err.Error()
	case errors.Is(err, engine.ErrWrongType):
		return wire.CodeWrongType, err.Error()
	case errors.Is(err, engine.ErrOverflow):
		return wire.CodeOverflow, err.Error()
	case errors.Is(err, engine.ErrCapacity):
		return wire.CodeUnavailable, "store at capacity"
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return wire.CodeUnavailable, "request cancelled"
	}
	s.log.Error("store failure", "err", err)
	return wire.CodeUnavailable, "store unavailable"
}

func (s *Server) handlePing(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, wire.Ping{Protocol: wire.ProtocolVersion, Version: s.cfg.Version, Features: s.features()})
}

func (s *Server) handleHealthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// handleReadyz reports ready when the configuration is valid and the store
// answers.
func (s *Server) handleReadyz(w http.ResponseWriter, r *http.Request) {
	if s.misconfigured != "" {
		writeProblem(w, wire.CodeUnavailable, s.misconfigured)
		return
	}
	if _, err := s.fence.get(r.Context()); err != nil {
		writeProblem(w, wire.CodeUnavailable, "store unavailable")
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

func writeProblem(w http.ResponseWriter, code wire.Code, reason string) {
	p := wire.NewProblem(code, reason)
	w.Header().Set("Content-Type", "application/problem+json")
	if code == wire.CodeStopped || code == wire.CodeUnavailable {
		w.Header().Set("Retry-After", "30")
	}
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(p)
}

// writeTooLarge refuses an oversized body. Over HTTP/1 it closes the
// connection: otherwise net/http first drains up to 256 KiB more of the
// body, hoping to keep the connection alive, before it sends the refusal.
// HTTP/2 needs no such thing: the stream's flow-control window bounds what
// the client can send, and the server resets that stream once the handler
// returns, leaving the connection to the other requests that share it
// (a Connection header would make net/http send GOAWAY instead).
func writeTooLarge(w http.ResponseWriter, r *http.Request, reason string) {
	if r.ProtoMajor == 1 {
		w.Header().Set("Connection", "close")
	}
	writeProblem(w, wire.CodeTooLarge, reason)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// constantTimeTokenEqual compares a presented token with the operator token
// in time independent of where (or whether) they differ, including length.
func constantTimeTokenEqual(presented string, want [sha256.Size]byte) bool {
	got := sha256.Sum256([]byte(presented))
	return subtle.ConstantTimeCompare(got[:], want[:]) == 1
}
