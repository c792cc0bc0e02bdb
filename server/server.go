// Package server is the Sluice server: the signed RPC over one engine, the
// durable stop fence and the operator endpoints, health checks.
//
// The handler order of POST /v1/rpc is part of the contract (see
// docs/protocol.md): configuration, body bound, signature, JSON, bounds,
// stop fence, admission, and only then the subject commands. Everything a
// caller can send before its signature is verified is bounded and parsed by
// nothing but the signature check.
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
	s.fence = &fence{eng: eng, refresh: cfg.FenceRefresh, now: s.now}
	s.routes()
	return s
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

func (s *Server) routes() {
	s.mux = http.NewServeMux()
	allow := map[string]string{} // path → its method, for 405 answers
	handle := func(method, path string, h http.HandlerFunc) {
		s.mux.HandleFunc(method+" "+path, h)
		allow[path] = method
	}
	handle(http.MethodPost, wire.PathRPC, s.handleRPC)
	handle(http.MethodGet, wire.PathPing, s.handlePing)
	handle(http.MethodPost, wire.PathStop, s.operator(s.handleStop))
	handle(http.MethodPost, wire.PathResume, s.operator(s.handleResume))
	handle(http.MethodGet, wire.PathState, s.operator(s.handleState))
	handle(http.MethodPost, wire.PathFairnessReset, s.operator(s.handleFairnessReset))
	handle(http.MethodGet, wire.PathAudit, s.operator(s.handleAudit))
	handle(http.MethodGet, wire.PathHealthz, s.handleHealthz)
	handle(http.MethodGet, wire.PathReadyz, s.handleReadyz)
	s.routeLimiters()
	s.routePolicies()
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if method, ok := allow[r.URL.Path]; ok {
			if method == http.MethodGet {
				method += ", " + http.MethodHead
			}
			w.Header().Set("Allow", method)
			writeProblem(w, wire.CodeMethod, r.Method+" is not allowed on "+r.URL.Path)
			return
		}
		writeProblem(w, wire.CodeNotFound, "no such endpoint")
	})
}

func (s *Server) handleRPC(w http.ResponseWriter, r *http.Request) {
	if s.misconfigured != "" {
		writeProblem(w, wire.CodeUnavailable, s.misconfigured)
		return
	}
	if r.ContentLength > wire.MaxBody {
		writeTooLarge(w, r, fmt.Sprintf("body of %d bytes over the %d-byte bound", r.ContentLength, wire.MaxBody))
		return
	}
	ts, sig := r.Header.Get(wire.HeaderTimestamp), r.Header.Get(wire.HeaderSignature)
	if ts == "" || sig == "" {
		writeProblem(w, wire.CodeUnauthorized, wire.ErrMissingSignature.Error())
		return
	}
	buf := getBuffer()
	defer putBuffer(buf)
	body, err := wire.AppendBody((*buf)[:0], r.Body, wire.MaxBody)
	if errors.Is(err, wire.ErrBodyTooLarge) {
		writeTooLarge(w, r, fmt.Sprintf("body over the %d-byte bound", wire.MaxBody))
		return
	}
	if err != nil {
		writeProblem(w, wire.CodeInvalid, "reading the body failed")
		return
	}
	if err := s.verifier.Verify(s.now(), ts, sig, r.Method, r.URL.Path, body); err != nil {
		writeProblem(w, wire.CodeUnauthorized, err.Error())
		return
	}
	// The request holds no reference to the body: every string is a copy.
	req, err := decodeRequest(body)
	if err != nil {
		writeProblem(w, wire.CodeInvalid, err.Error())
		return
	}
	ctx := r.Context()
	if st, err := s.fence.get(ctx); err != nil {
		s.log.Error("stop fence unreadable", "err", err)
		writeProblem(w, wire.CodeUnavailable, "stop fence unreadable")
		return
	} else if st.Stopped {
		writeProblem(w, wire.CodeStopped, "stopped by the operator")
		return
	}
	if s.cfg.Admission != nil {
		if err := s.cfg.Admission.Admit(ctx, req); err != nil {
			s.writeError(w, err)
			return
		}
	}
	resp, err := s.eng.Do(ctx, req.Engine())
	if err != nil {
		s.writeError(w, err)
		return
	}
	// The body is read and decoded: its buffer now takes the answer.
	*buf = append(wire.AppendResponse((*buf)[:0], resp), '\n')
	h := w.Header()
	h["Content-Type"] = jsonContentType
	h["Content-Length"] = []string{strconv.Itoa(len(*buf))}
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(*buf)
}

// jsonContentType is the Content-Type of every JSON answer. Handlers assign
// it to the header map as it is; net/http never modifies it.
var jsonContentType = []string{"application/json"}

// decodeRequest parses and validates an RPC body strictly: unknown fields,
// trailing data and out-of-bounds values are all errors.
func decodeRequest(body []byte) (*wire.Request, error) {
	var req wire.Request
	if err := wire.DecodeRequest(body, &req); err != nil {
		return nil, err
	}
	if err := req.Validate(); err != nil {
		return nil, err
	}
	return &req, nil
}

// buffers recycles the buffers the RPC handler reads a body into and writes
// its answer from. Each has room for the largest body and the byte that
// shows it too large; one that an answer grew past maxPooledBuffer is
// dropped rather than kept.
var buffers = sync.Pool{New: func() any {
	b := make([]byte, 0, wire.MaxBody+1)
	return &b
}}

const maxPooledBuffer = 64 << 10

func getBuffer() *[]byte { return buffers.Get().(*[]byte) }

func putBuffer(b *[]byte) {
	if cap(*b) <= maxPooledBuffer {
		*b = (*b)[:0]
		buffers.Put(b)
	}
}

// writeError maps an engine, admission or store error to its answer.
func (s *Server) writeError(w http.ResponseWriter, err error) {
	var werr *wire.Error
	switch {
	case errors.As(err, &werr):
		writeProblem(w, werr.Code, werr.Reason)
	case errors.Is(err, engine.ErrInvalid):
		writeProblem(w, wire.CodeInvalid, err.Error())
	case errors.Is(err, engine.ErrOperationConflict):
		writeProblem(w, wire.CodeConflict, err.Error())
	case errors.Is(err, engine.ErrWrongType):
		writeProblem(w, wire.CodeWrongType, err.Error())
	case errors.Is(err, engine.ErrOverflow):
		writeProblem(w, wire.CodeOverflow, err.Error())
	case errors.Is(err, engine.ErrCapacity):
		writeProblem(w, wire.CodeUnavailable, "store at capacity")
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		writeProblem(w, wire.CodeUnavailable, "request cancelled")
	default:
		s.log.Error("store failure", "err", err)
		writeProblem(w, wire.CodeUnavailable, "store unavailable")
	}
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
