package server

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/sluicehq/sluice/wire"
)

// maxControlBody bounds an operator request body.
const maxControlBody = 4 << 10

// StopRequest is the optional body of POST /control/stop.
type StopRequest struct {
	Reason string `json:"reason,omitempty"`
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

func (s *Server) handleStop(w http.ResponseWriter, r *http.Request) {
	body, err := wire.ReadBody(r.Body, maxControlBody)
	if err != nil {
		writeProblem(w, wire.CodeTooLarge, "operator body over 4 KiB")
		return
	}
	var req StopRequest
	if len(strings.TrimSpace(string(body))) > 0 {
		if err := json.Unmarshal(body, &req); err != nil {
			writeProblem(w, wire.CodeInvalid, "malformed JSON: "+err.Error())
			return
		}
	}
	if req.Reason == "" {
		req.Reason = "operator stop"
	}
	st := FenceState{Stopped: true, Reason: req.Reason, Since: s.now().UTC()}
	if err := s.fence.set(r.Context(), st); err != nil {
		s.writeError(w, err)
		return
	}
	s.log.Warn("operator stop", "reason", st.Reason, "remote", r.RemoteAddr)
	writeJSON(w, http.StatusOK, st)
}

func (s *Server) handleResume(w http.ResponseWriter, r *http.Request) {
	if err := s.fence.set(r.Context(), FenceState{}); err != nil {
		s.writeError(w, err)
		return
	}
	s.log.Warn("operator resume", "remote", r.RemoteAddr)
	writeJSON(w, http.StatusOK, FenceState{})
}

func (s *Server) handleState(w http.ResponseWriter, r *http.Request) {
	st, err := s.fence.get(r.Context())
	if err != nil {
		s.writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}
