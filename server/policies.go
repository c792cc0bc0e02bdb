package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/wire"
)

// The policies endpoints expose the route quota policies (package
// httplimit) kept in the server's store. Like the limiters, they run over
// the store seen through the clients' hashing, so that a policy set here is
// the one a stage reading httplimit.Policies over a client.Client with the
// fleet's pepper enforces.

// requiredPolicyFields are the members a PUT names: a quota is complete.
var requiredPolicyFields = []string{"limit", "windowMs", "kind"}

// initPolicies sets up the policies over store, the server's store as the
// clients' hashing sees it.
func (s *Server) initPolicies(store engine.Store) {
	cfg := httplimit.DefaultPoliciesConfig()
	cfg.Store = store
	cfg.Logger = s.log.With("component", "policies")
	// The server reads and writes the records; it enforces no policy, so
	// the refresh interval of the stages' cache does not apply here.
	p, err := httplimit.NewPolicies(cfg)
	if err != nil {
		// Only a missing store fails validation, and store is set; should
		// that change, the server refuses loudly rather than serving half.
		s.misconfigured = "policies: " + err.Error()
		s.log.Error("refusing every RPC", "reason", s.misconfigured)
		return
	}
	s.policies = p
}

// routePolicies registers the policies endpoints. Each path takes several
// methods, so the handlers answer 405 themselves.
func (s *Server) routePolicies() {
	s.mux.HandleFunc(wire.PathPolicies, s.handlePolicyList)
	s.mux.HandleFunc(wire.PathPolicies+"/{name}", s.handlePolicy)
}

func (s *Server) handlePolicyList(w http.ResponseWriter, r *http.Request) {
	if !methodAllowed(w, r, http.MethodGet, http.MethodHead) {
		return
	}
	if !s.limitsAuthorized(w, r) {
		return
	}
	names, err := s.policies.List(r.Context())
	if err != nil {
		s.writePolicyError(w, "", err)
		return
	}
	list := wire.PolicyList{Policies: make([]wire.Policy, 0, len(names))}
	for _, name := range names {
		if wire.ValidatePolicyName(name) != nil {
			continue // indexed by an older release, which took "." and ".."; no path reaches it
		}
		q, err := s.policies.Get(r.Context(), name)
		if errors.Is(err, httplimit.ErrNoPolicy) {
			continue // indexed, but its record expired
		}
		if err != nil {
			s.writePolicyError(w, name, err)
			return
		}
		list.Policies = append(list.Policies, wire.Policy{Name: name, Config: fromQuota(q)})
	}
	writeJSON(w, http.StatusOK, list)
}

func (s *Server) handlePolicy(w http.ResponseWriter, r *http.Request) {
	if !methodAllowed(w, r, http.MethodGet, http.MethodHead, http.MethodPut, http.MethodDelete) {
		return
	}
	if !s.limitsAuthorized(w, r) {
		return
	}
	name := r.PathValue("name")
	if err := wire.ValidatePolicyName(name); err != nil {
		writeProblem(w, wire.CodeInvalid, err.Error())
		return
	}
	switch r.Method {
	case http.MethodPut:
		s.putPolicy(w, r, name)
	case http.MethodDelete:
		s.deletePolicy(w, r, name)
	default:
		q, err := s.policies.Get(r.Context(), name)
		if err != nil {
			s.writePolicyError(w, name, err)
			return
		}
		writeJSON(w, http.StatusOK, wire.Policy{Name: name, Config: fromQuota(q)})
	}
}

// putPolicy stores the complete quota of the body as the policy name,
// creating or replacing it (httplimit.Policies.Set).
func (s *Server) putPolicy(w http.ResponseWriter, r *http.Request, name string) {
	body, err := wire.ReadBody(r.Body, maxControlBody)
	if errors.Is(err, wire.ErrBodyTooLarge) {
		writeTooLarge(w, r, "policy body over 4 KiB")
		return
	}
	if err != nil {
		writeProblem(w, wire.CodeInvalid, "reading the body failed")
		return
	}
	keepConnection(w, r)
	cfg, err := decodePolicyConfig(body)
	if err != nil {
		writeProblem(w, wire.CodeInvalid, fmt.Sprintf("policy %q: %v", name, err))
		return
	}
	if err := s.policies.Set(r.Context(), name, toQuota(cfg)); err != nil {
		s.writePolicyError(w, name, err)
		return
	}
	s.log.Warn("policy set", "policy", name, "config", cfg, "by", s.limitsCredential(r), "remote", r.RemoteAddr)
	writeJSON(w, http.StatusOK, wire.Policy{Name: name, Config: cfg})
}

// deletePolicy removes the policy name; removing one that does not exist
// is not an error. The stages enforcing it refuse their requests (or fall
// back) from their next read on.
func (s *Server) deletePolicy(w http.ResponseWriter, r *http.Request, name string) {
	if err := s.policies.Delete(r.Context(), name); err != nil {
		s.writePolicyError(w, name, err)
		return
	}
	s.log.Warn("policy deleted", "policy", name, "by", s.limitsCredential(r), "remote", r.RemoteAddr)
	w.WriteHeader(http.StatusNoContent)
}

// writePolicyError maps an error of httplimit.Policies to its answer.
func (s *Server) writePolicyError(w http.ResponseWriter, name string, err error) {
	switch {
	case errors.Is(err, httplimit.ErrNoPolicy):
		writeProblem(w, wire.CodeNoSuchPolicy, fmt.Sprintf("no policy %q: set it first (PUT)", name))
	case errors.Is(err, httplimit.ErrInvalidConfig):
		writeProblem(w, wire.CodeInvalid, err.Error())
	case errors.Is(err, engine.ErrCapacity):
		writeProblem(w, wire.CodeUnavailable, err.Error())
	case errors.Is(err, engine.ErrCorrupt):
		s.log.Error("policy unreadable", "policy", name, "err", err)
		writeProblem(w, wire.CodeUnavailable, fmt.Sprintf("policy %q: stored value unreadable", name))
	default:
		s.writeError(w, err)
	}
}

// decodePolicyConfig decodes a complete policy strictly: unknown fields,
// data after the object, a missing or null member and values out of
// bounds are errors.
func decodePolicyConfig(body []byte) (wire.PolicyConfig, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	var cfg wire.PolicyConfig
	if err := dec.Decode(&cfg); err != nil {
		return wire.PolicyConfig{}, fmt.Errorf("malformed JSON: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return wire.PolicyConfig{}, errors.New("malformed JSON: data after the object")
	}
	if err := wire.CheckStrict(body, &cfg); err != nil {
		return wire.PolicyConfig{}, fmt.Errorf("malformed JSON: %w", err)
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal(body, &members); err != nil || members == nil {
		return wire.PolicyConfig{}, errors.New("malformed JSON: want a quota object")
	}
	var missing []string
	for _, f := range requiredPolicyFields {
		if v, ok := members[f]; !ok || string(v) == "null" {
			missing = append(missing, f)
		}
	}
	if len(missing) > 0 {
		return wire.PolicyConfig{}, fmt.Errorf("the quota lacks %s", strings.Join(missing, ", "))
	}
	if err := cfg.Validate(); err != nil {
		return wire.PolicyConfig{}, errors.New(strings.ReplaceAll(err.Error(), "\n", "; "))
	}
	return cfg, nil
}

// toQuota returns c as httplimit takes it. c must be valid. The quota is
// named after its policy.
func toQuota(c wire.PolicyConfig) httplimit.Quota {
	kind, _ := algo.ParseKind(c.Kind)
	return httplimit.Quota{Limit: c.Limit, Window: millis(c.WindowMs), Kind: kind}
}

// fromQuota returns q as the wire carries it.
func fromQuota(q httplimit.Quota) wire.PolicyConfig {
	kind := q.Kind
	if kind == 0 {
		kind = algo.KindFixed
	}
	return wire.PolicyConfig{Limit: q.Limit, WindowMs: q.Window.Milliseconds(), Kind: kind.String()}
}
