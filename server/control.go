package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/wire"
)

// maxControlBody bounds an operator request body.
const maxControlBody = 4 << 10

// StopRequest is the optional body of POST /control/stop and
// POST /control/resume. Without a family the request acts on the global
// stop fence; with one, on that family only. A body naming an empty family
// is refused (400 invalid).
type StopRequest struct {
	Family string `json:"family,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// ControlState is the body of GET /control/state: the global stop fence and,
// when admission is on, every family's usage and stop.
type ControlState struct {
	FenceState
	Families []admission.FamilyState `json:"families,omitempty"`
}

// FairnessResetRequest is the body of POST /control/fairness/reset.
type FairnessResetRequest struct {
	admission.ResetRequest
	// Actor names the person or system making the reset, for the audit
	// trail. The caller's address is recorded beside it.
	Actor string `json:"actor"`
}

// operator wraps an operator endpoint with the bearer-token check.
func (s *Server) operator(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.misconfigured != "" {
			writeProblem(w, wire.CodeUnavailable, s.misconfigured)
			return
		}
		token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || !constantTimeTokenEqual(token, s.opHash) {
			writeProblem(w, wire.CodeUnauthorized, "missing or wrong operator token")
			return
		}
		h(w, r)
	}
}

// decodeControl reads an optional, bounded, strict JSON operator body into
// v: nothing, or an object. It writes the error answer and returns false on
// failure.
func decodeControl(w http.ResponseWriter, r *http.Request, v any) bool {
	body, err := wire.ReadBody(r.Body, maxControlBody)
	if errors.Is(err, wire.ErrBodyTooLarge) {
		writeTooLarge(w, r, "operator body over 4 KiB")
		return false
	}
	if err != nil {
		writeProblem(w, wire.CodeInvalid, "reading the body failed")
		return false
	}
	keepConnection(w, r)
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 {
		return true
	}
	if trimmed[0] != '{' {
		// encoding/json reads a null into v as nothing at all: a stop
		// would then act on the global stop fence.
		writeProblem(w, wire.CodeInvalid, "malformed JSON: an operator body is an object")
		return false
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		writeProblem(w, wire.CodeInvalid, "malformed JSON: "+err.Error())
		return false
	}
	if _, err := dec.Token(); err != io.EOF {
		writeProblem(w, wire.CodeInvalid, "malformed JSON: data after the object")
		return false
	}
	if err := wire.CheckStrict(body, v); err != nil {
		writeProblem(w, wire.CodeInvalid, "malformed JSON: "+err.Error())
		return false
	}
	return true
}

// admissionFor returns the admitter for a family-scoped operator call, or
// writes an error when admission is off.
func (s *Server) admissionFor(w http.ResponseWriter, family string) *admission.Admitter {
	if s.cfg.Admission == nil {
		writeProblem(w, wire.CodeInvalid, fmt.Sprintf("family %q: admission is not enabled on this server", family))
		return nil
	}
	return s.cfg.Admission
}

// stopBody is StopRequest as read from the wire: Family is nil when the
// body does not name one.
type stopBody struct {
	Family *string `json:"family,omitempty"`
	Reason string  `json:"reason,omitempty"`
}

// decodeStop reads the body of a stop or resume. A body naming an empty
// family is refused: it means one family gone missing (an unset variable
// in a script), and read as no family it would stop or resume the whole
// server instead.
func decodeStop(w http.ResponseWriter, r *http.Request) (StopRequest, bool) {
	var b stopBody
	if !decodeControl(w, r, &b) {
		return StopRequest{}, false
	}
	if b.Family != nil && *b.Family == "" {
		writeProblem(w, wire.CodeInvalid, `an empty "family" names no family: leave the member out to act on the global stop fence`)
		return StopRequest{}, false
	}
	req := StopRequest{Reason: b.Reason}
	if b.Family != nil {
		req.Family = *b.Family
	}
	return req, true
}

func (s *Server) handleStop(w http.ResponseWriter, r *http.Request) {
	req, ok := decodeStop(w, r)
	if !ok {
		return
	}
	if req.Reason == "" {
		req.Reason = "operator stop"
	}
	if req.Family != "" {
		adm := s.admissionFor(w, req.Family)
		if adm == nil {
			return
		}
		if err := adm.StopFamily(r.Context(), req.Family, req.Reason); err != nil {
			s.writeError(w, err)
			return
		}
		s.log.Warn("operator family stop", "family", req.Family, "reason", req.Reason, "remote", r.RemoteAddr)
		s.handleState(w, r)
		return
	}
	st := FenceState{Stopped: true, Reason: req.Reason, Since: s.now().UTC()}
	if err := s.fence.set(r.Context(), st); err != nil {
		s.writeError(w, err)
		return
	}
	s.log.Warn("operator stop", "reason", st.Reason, "remote", r.RemoteAddr)
	s.handleState(w, r)
}

func (s *Server) handleResume(w http.ResponseWriter, r *http.Request) {
	req, ok := decodeStop(w, r)
	if !ok {
		return
	}
	if req.Family != "" {
		adm := s.admissionFor(w, req.Family)
		if adm == nil {
			return
		}
		if err := adm.ResumeFamily(r.Context(), req.Family); err != nil {
			s.writeError(w, err)
			return
		}
		s.log.Warn("operator family resume", "family", req.Family, "reason", req.Reason, "remote", r.RemoteAddr)
		s.handleState(w, r)
		return
	}
	if err := s.fence.set(r.Context(), FenceState{}); err != nil {
		s.writeError(w, err)
		return
	}
	s.log.Warn("operator resume", "reason", req.Reason, "remote", r.RemoteAddr)
	s.handleState(w, r)
}

func (s *Server) handleState(w http.ResponseWriter, r *http.Request) {
	fence, err := s.fence.get(r.Context())
	if err != nil {
		s.writeError(w, err)
		return
	}
	st := ControlState{FenceState: fence}
	if s.cfg.Admission != nil {
		if st.Families, err = s.cfg.Admission.State(r.Context()); err != nil {
			s.writeError(w, err)
			return
		}
	}
	writeJSON(w, http.StatusOK, st)
}

func (s *Server) handleFairnessReset(w http.ResponseWriter, r *http.Request) {
	var req FairnessResetRequest
	if !decodeControl(w, r, &req) {
		return
	}
	adm := s.admissionFor(w, req.Family)
	if adm == nil {
		return
	}
	if req.Actor == "" {
		writeProblem(w, wire.CodeInvalid, "a fairness reset names its actor (who is resetting)")
		return
	}
	rec, err := adm.ResetFairness(r.Context(), req.Actor+" from "+r.RemoteAddr, req.ResetRequest)
	if err != nil {
		s.writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, rec)
}

// handleAudit answers GET /control/audit: a page of the fairness-reset
// audit trail, newest first. The query may give limit (1…1,000, default
// 100: how many sequence numbers the page reads) and before (the next of
// the previous page).
func (s *Server) handleAudit(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Admission == nil {
		writeProblem(w, wire.CodeInvalid, "admission is not enabled on this server: there are no fairness resets to list")
		return
	}
	// r.URL.Query would drop a pair it cannot parse (a ';', a bad
	// escape) and read the page without it, from the newest.
	query, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		writeProblem(w, wire.CodeInvalid, "malformed query: "+err.Error())
		return
	}
	var limit int
	var before int64
	for name, values := range query {
		if len(values) != 1 {
			writeProblem(w, wire.CodeInvalid, fmt.Sprintf("query parameter %q given %d times", name, len(values)))
			return
		}
		n, err := strconv.ParseInt(values[0], 10, 64)
		switch {
		case name != "limit" && name != "before":
			writeProblem(w, wire.CodeInvalid, fmt.Sprintf("unknown query parameter %q (want limit, before)", name))
			return
		case err != nil || n < 1:
			writeProblem(w, wire.CodeInvalid, fmt.Sprintf("query parameter %s=%q is not a whole number of at least 1", name, values[0]))
			return
		case name == "limit" && n > admission.MaxAuditLimit:
			writeProblem(w, wire.CodeInvalid, fmt.Sprintf("limit %d above %d", n, admission.MaxAuditLimit))
			return
		case name == "limit":
			limit = int(n)
		default:
			before = n
		}
	}
	page, err := s.cfg.Admission.Audit(r.Context(), before, limit)
	if err != nil {
		s.writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, page)
}
