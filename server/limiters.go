package server

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/keyhash"
	"github.com/sluicehq/sluice/pace"
	"github.com/sluicehq/sluice/wire"
)

// The limiters endpoints expose the paced-call limiter registry of the
// server's store (see package pace): the registry clients reach through the
// RPC. Clients hash every partition name and key with their pepper before
// sending, so the server's registry runs over its store seen through the
// same hashing (keyhash.Store): a limiter configured here is the one the
// workers' pace.Registry over a client.Client finds, and a name the workers
// mistype is one no one configured.

// requiredLimiterFields are the members a complete limiter configuration
// names: a PUT, or the result of a PATCH, lacking one is refused rather
// than taking zero, which for most of them means something drastic (no
// wait, no refill).
var requiredLimiterFields = []string{"limitPerWindow", "windowMs", "concurrency", "leaseTtlMs", "refillFraction", "maxWaitMs"}

// validateLimiters reports the problems of the limiters settings of c.
func (c Config) validateLimiters() []error {
	var errs []error
	if c.Pepper != "" {
		if len(c.Pepper) < wire.MinSecretLen {
			errs = append(errs, fmt.Errorf("key pepper is %d characters (minimum %d)", len(c.Pepper), wire.MinSecretLen))
		}
		if slices.Contains(c.Secrets, c.Pepper) {
			errs = append(errs, errors.New("key pepper equals a signing secret"))
		}
		if c.Pepper == c.OperatorToken {
			errs = append(errs, errors.New("key pepper equals the operator token (every client holds the pepper)"))
		}
	}
	if c.LimitsKey != "" {
		if len(c.LimitsKey) < wire.MinSecretLen {
			errs = append(errs, fmt.Errorf("limits key is %d characters (minimum %d)", len(c.LimitsKey), wire.MinSecretLen))
		}
		if slices.Contains(c.Secrets, c.LimitsKey) {
			errs = append(errs, errors.New("limits key equals a signing secret"))
		}
		if c.LimitsKey == c.OperatorToken {
			errs = append(errs, errors.New("limits key equals the operator token"))
		}
		if c.LimitsKey == c.Pepper {
			errs = append(errs, errors.New("limits key equals the key pepper"))
		}
	}
	return errs
}

// initLimiters sets up the limiter registry when a pepper is configured.
func (s *Server) initLimiters() {
	if s.cfg.LimitsKey != "" {
		s.limitsHash, s.hasLimitsKey = sha256.Sum256([]byte(s.cfg.LimitsKey)), true
	}
	if s.cfg.Pepper != "" {
		store := keyhash.NewStore(s.eng.Store(), keyhash.New([]byte(s.cfg.Pepper)))
		s.limiters = pace.NewRegistry(store, pace.WithLogger(s.log.With("component", "limiters")))
		s.initPolicies(store)
	}
}

// features lists the optional endpoints this server serves, for /v1/ping.
func (s *Server) features() []string {
	if s.limiters == nil {
		return []string{wire.FeatureRPCs}
	}
	return []string{wire.FeatureRPCs, wire.FeatureLimiters, wire.FeaturePolicies}
}

// routeLimiters registers the limiters endpoints. Each path takes several
// methods, so the handlers answer 405 themselves.
func (s *Server) routeLimiters() {
	s.mux.HandleFunc(wire.PathLimiters, s.handleLimiterList)
	s.mux.HandleFunc(wire.PathLimiters+"/{name}", s.handleLimiter)
}

func (s *Server) handleLimiterList(w http.ResponseWriter, r *http.Request) {
	if !methodAllowed(w, r, http.MethodGet, http.MethodHead) {
		return
	}
	if !s.limitsAuthorized(w, r) {
		return
	}
	names, err := s.limiters.List(r.Context())
	if err != nil {
		s.writeLimiterError(w, "", err)
		return
	}
	list := wire.LimiterList{Limiters: make([]wire.Limiter, 0, len(names))}
	for _, name := range names {
		if wire.ValidateLimiterName(name) != nil {
			continue // indexed by an older release, which took "." and ".."; no path reaches it
		}
		cfg, err := s.limiters.Config(r.Context(), name)
		if errors.Is(err, pace.ErrNoSuchLimiter) {
			continue // registered, but its configuration expired or was never written
		}
		if err != nil {
			s.writeLimiterError(w, name, err)
			return
		}
		list.Limiters = append(list.Limiters, wire.Limiter{Name: name, Config: fromPace(cfg)})
	}
	writeJSON(w, http.StatusOK, list)
}

func (s *Server) handleLimiter(w http.ResponseWriter, r *http.Request) {
	if !methodAllowed(w, r, http.MethodGet, http.MethodHead, http.MethodPut, http.MethodPatch) {
		return
	}
	if !s.limitsAuthorized(w, r) {
		return
	}
	name := r.PathValue("name")
	if err := wire.ValidateLimiterName(name); err != nil {
		writeProblem(w, wire.CodeInvalid, err.Error())
		return
	}
	switch r.Method {
	case http.MethodPut:
		s.putLimiter(w, r, name)
	case http.MethodPatch:
		s.patchLimiter(w, r, name)
	default:
		s.getLimiter(w, r, name)
	}
}

func (s *Server) getLimiter(w http.ResponseWriter, r *http.Request, name string) {
	st, err := s.limiters.Stats(r.Context(), name)
	if err != nil {
		s.writeLimiterError(w, name, err)
		return
	}
	unixMs := func(t time.Time) int64 {
		if t.IsZero() {
			return 0
		}
		return t.UnixMilli()
	}
	writeJSON(w, http.StatusOK, wire.LimiterStatus{
		Limiter: wire.Limiter{Name: name, Config: fromPace(st.Config)},
		Stats: wire.LimiterStats{
			At:           unixMs(st.At),
			Remaining:    int64(st.Remaining),
			ResetAt:      unixMs(st.ResetAt),
			PenaltyUntil: unixMs(st.PenaltyUntil),
			InFlight:     int64(st.InFlight),
			Waiting:      int64(st.Waiting),
		},
	})
}

// putLimiter configures name with the complete configuration of the body:
// it creates the limiter, or replaces its configuration and rejects the
// calls waiting under the old one (pace.Registry.Configure).
func (s *Server) putLimiter(w http.ResponseWriter, r *http.Request, name string) {
	body, ok := readLimiterBody(w, r)
	if !ok {
		return
	}
	cfg, err := decodeLimiterConfig(body)
	if err != nil {
		writeProblem(w, wire.CodeInvalid, fmt.Sprintf("limiter %q: %v", name, err))
		return
	}
	if err := s.limiters.Configure(r.Context(), name, toPace(cfg)); err != nil {
		s.writeLimiterError(w, name, err)
		return
	}
	s.log.Warn("limiter configured", "limiter", name, "config", cfg, "by", s.limitsCredential(r), "remote", r.RemoteAddr)
	writeJSON(w, http.StatusOK, wire.Limiter{Name: name, Config: cfg})
}

// patchLimiter applies the JSON merge patch (RFC 7396) of the body to the
// configuration of the existing limiter name (pace.Registry.Reconfigure).
// The result must be complete and valid; otherwise nothing changes.
func (s *Server) patchLimiter(w http.ResponseWriter, r *http.Request, name string) {
	body, ok := readLimiterBody(w, r)
	if !ok {
		return
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var patch map[string]any
	if err := dec.Decode(&patch); err != nil || patch == nil {
		writeProblem(w, wire.CodeInvalid, fmt.Sprintf("limiter %q: a merge patch is a JSON object", name))
		return
	}
	if _, err := dec.Token(); err != io.EOF {
		writeProblem(w, wire.CodeInvalid, "malformed JSON: data after the object")
		return
	}
	if err := wire.CheckStrict(body, &patch); err != nil {
		writeProblem(w, wire.CodeInvalid, fmt.Sprintf("limiter %q: malformed JSON: %v", name, err))
		return
	}
	// The patch function of Reconfigure cannot fail: a patch that does
	// not apply leaves a zero configuration, which fails validation, so
	// that nothing is written; its own error is then the answer.
	var patchErr error
	var merged wire.LimiterConfig
	_, err := s.limiters.Reconfigure(r.Context(), name, func(c *pace.Config) {
		merged, patchErr = mergeLimiterConfig(fromPace(*c), patch)
		if patchErr != nil {
			*c = pace.Config{}
			return
		}
		*c = toPace(merged)
	})
	if patchErr != nil {
		writeProblem(w, wire.CodeInvalid, fmt.Sprintf("limiter %q: %v", name, patchErr))
		return
	}
	if err != nil {
		s.writeLimiterError(w, name, err)
		return
	}
	s.log.Warn("limiter reconfigured", "limiter", name, "config", merged, "by", s.limitsCredential(r), "remote", r.RemoteAddr)
	writeJSON(w, http.StatusOK, wire.Limiter{Name: name, Config: merged})
}

// limitsAuthorized checks the configuration and the bearer token of a
// limiters request — the operator token or the limits key, both compared
// in constant time — and that the server has a registry. It writes the
// error answer and returns false on failure.
func (s *Server) limitsAuthorized(w http.ResponseWriter, r *http.Request) bool {
	if s.misconfigured != "" {
		writeProblem(w, wire.CodeUnavailable, s.misconfigured)
		return false
	}
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	op := constantTimeTokenEqual(token, s.opHash)
	key := constantTimeTokenEqual(token, s.limitsHash) && s.hasLimitsKey
	if !ok || !(op || key) {
		writeProblem(w, wire.CodeUnauthorized, "missing or wrong operator token or limits key")
		return false
	}
	if s.limiters == nil {
		writeProblem(w, wire.CodeUnavailable, "no key pepper configured: the limiters and policies endpoints need the clients' pepper to name their records")
		return false
	}
	return true
}

// limitsCredential names the credential an authorized request used, for
// the logs.
func (s *Server) limitsCredential(r *http.Request) string {
	token, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if constantTimeTokenEqual(token, s.opHash) {
		return "operator token"
	}
	return "limits key"
}

// writeLimiterError maps an error of the registry to its answer.
func (s *Server) writeLimiterError(w http.ResponseWriter, name string, err error) {
	switch {
	case errors.Is(err, pace.ErrNoSuchLimiter):
		writeProblem(w, wire.CodeNoSuchLimiter, fmt.Sprintf("no limiter %q: configure it first (PUT)", name))
	case errors.Is(err, pace.ErrInvalidConfig):
		writeProblem(w, wire.CodeInvalid, err.Error())
	case errors.Is(err, engine.ErrCapacity):
		writeProblem(w, wire.CodeUnavailable, err.Error())
	case errors.Is(err, engine.ErrCorrupt):
		s.log.Error("limiter state unreadable", "limiter", name, "err", err)
		writeProblem(w, wire.CodeUnavailable, fmt.Sprintf("limiter %q: stored state unreadable", name))
	default:
		s.writeError(w, err)
	}
}

// readLimiterBody reads a bounded limiters request body.
func readLimiterBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	body, err := wire.ReadBody(r.Body, maxControlBody)
	if errors.Is(err, wire.ErrBodyTooLarge) {
		writeTooLarge(w, r, "limiter body over 4 KiB")
		return nil, false
	}
	if err != nil {
		writeProblem(w, wire.CodeInvalid, "reading the body failed")
		return nil, false
	}
	keepConnection(w, r)
	return body, true
}

// decodeLimiterConfig decodes a complete limiter configuration strictly:
// unknown fields, data after the object, a missing or null required member
// and values out of bounds are errors.
func decodeLimiterConfig(body []byte) (wire.LimiterConfig, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	var cfg wire.LimiterConfig
	if err := dec.Decode(&cfg); err != nil {
		return wire.LimiterConfig{}, fmt.Errorf("malformed JSON: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return wire.LimiterConfig{}, errors.New("malformed JSON: data after the object")
	}
	if err := wire.CheckStrict(body, &cfg); err != nil {
		return wire.LimiterConfig{}, fmt.Errorf("malformed JSON: %w", err)
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal(body, &members); err != nil || members == nil {
		return wire.LimiterConfig{}, errors.New("malformed JSON: want a configuration object")
	}
	var missing []string
	for _, f := range requiredLimiterFields {
		if v, ok := members[f]; !ok || string(v) == "null" {
			missing = append(missing, f)
		}
	}
	if len(missing) > 0 {
		return wire.LimiterConfig{}, fmt.Errorf("the configuration lacks %s (a configuration is complete; PATCH changes some fields)", strings.Join(missing, ", "))
	}
	if err := cfg.Validate(); err != nil {
		return wire.LimiterConfig{}, errors.New(strings.ReplaceAll(err.Error(), "\n", "; "))
	}
	return cfg, nil
}

// mergeLimiterConfig applies the merge patch patch to cur (RFC 7396: a
// member set to null is removed, an object merges into an object, anything
// else replaces) and decodes the result as a complete configuration.
func mergeLimiterConfig(cur wire.LimiterConfig, patch map[string]any) (wire.LimiterConfig, error) {
	enc, err := json.Marshal(cur)
	if err != nil {
		return wire.LimiterConfig{}, err
	}
	dec := json.NewDecoder(bytes.NewReader(enc))
	dec.UseNumber()
	var target any
	if err := dec.Decode(&target); err != nil {
		return wire.LimiterConfig{}, err
	}
	if enc, err = json.Marshal(mergePatch(target, patch)); err != nil {
		return wire.LimiterConfig{}, err
	}
	return decodeLimiterConfig(enc)
}

func mergePatch(target, patch any) any {
	p, ok := patch.(map[string]any)
	if !ok {
		return patch
	}
	t, ok := target.(map[string]any)
	if !ok {
		t = map[string]any{}
	}
	for k, v := range p {
		if v == nil {
			delete(t, k)
		} else {
			t[k] = mergePatch(t[k], v)
		}
	}
	return t
}

func millis(n int64) time.Duration { return time.Duration(n) * time.Millisecond }

// toPace returns c as pace takes it. c must be valid, so that no duration
// overflows.
func toPace(c wire.LimiterConfig) pace.Config {
	return pace.Config{
		Limit:          int(c.LimitPerWindow),
		Window:         millis(c.WindowMs),
		Concurrency:    int(c.Concurrency),
		LeaseTTL:       millis(c.LeaseTTLMs),
		RefillFraction: c.RefillFraction,
		MaxWait:        millis(c.MaxWaitMs),
		StartTolerance: millis(c.StartToleranceMs),
		Retry: pace.Retry{
			Attempts: int(c.Retry.Attempts),
			Floor:    millis(c.Retry.FloorMs),
			Ceiling:  millis(c.Retry.CeilingMs),
			Factor:   c.Retry.Factor,
		},
	}
}

// fromPace returns c as the wire carries it.
func fromPace(c pace.Config) wire.LimiterConfig {
	return wire.LimiterConfig{
		LimitPerWindow:   int64(c.Limit),
		WindowMs:         c.Window.Milliseconds(),
		Concurrency:      int64(c.Concurrency),
		LeaseTTLMs:       c.LeaseTTL.Milliseconds(),
		RefillFraction:   c.RefillFraction,
		MaxWaitMs:        c.MaxWait.Milliseconds(),
		StartToleranceMs: c.StartTolerance.Milliseconds(),
		Retry: wire.LimiterRetry{
			Attempts:  int64(c.Retry.Attempts),
			FloorMs:   c.Retry.Floor.Milliseconds(),
			CeilingMs: c.Retry.Ceiling.Milliseconds(),
			Factor:    c.Retry.Factor,
		},
	}
}
