package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/sluicehq/sluice/wire"
)

// DefaultLimitersTimeout bounds one call of a Limiters client whose
// configuration names no timeout. Listing reads every limiter, so it is
// longer than an RPC's.
const DefaultLimitersTimeout = 10 * time.Second

// EnvLimitsKey names the variable that holds the limits key, the bearer
// token granting /v1/limiters alone.
const EnvLimitsKey = "SLUICE_LIMITS_KEY"

// LimitersConfig configures a Limiters client.
type LimitersConfig struct {
	// URL is the server's origin, as in Config.URL: https, or plain http
	// on a loopback host only.
	URL string
	// Key is the bearer token: the server's limits key, or its operator
	// token. At least 32 characters.
	Key string
	// Timeout bounds one call. Zero means DefaultLimitersTimeout.
	Timeout time.Duration
	// HTTPClient sends the requests; nil means a client of the package's
	// own, which does not follow redirects. A client given here must not
	// follow redirects either: the bearer token would go with them.
	HTTPClient *http.Client
}

// Validate reports every problem of c at once.
func (c LimitersConfig) Validate() error {
	var errs []error
	if err := validateURL(c.URL); err != nil {
		errs = append(errs, err)
	}
	if len(c.Key) < wire.MinSecretLen {
		errs = append(errs, fmt.Errorf("limits key or operator token is %d characters (minimum %d)", len(c.Key), wire.MinSecretLen))
	}
	if c.Timeout < 0 {
		errs = append(errs, fmt.Errorf("timeout %s is negative", c.Timeout))
	}
	return errors.Join(errs...)
}

// Limiters configures and reads the paced-call limiters of a server through
// its /v1/limiters endpoints (see docs/protocol.md): the same limiters that
// a pace.Registry over a Client sharing the server's pepper calls. It is
// what deploy tooling uses to apply limits kept in version control; the
// `sluice limits` commands are built on it.
//
// Every method returns the server's refusals as a *wire.Error, which
// errors.Is matches against wire.ErrNoSuchLimiter, wire.ErrInvalid or
// wire.ErrUnauthorized; a failure to reach the server, or a failure of
// the server (a 5xx answer, its *wire.Error the cause), wraps
// ErrUnavailable: the outcome is unknown.
// A name no limiter can have (see wire.ValidateLimiterName) is refused as
// the server refuses it, wire.ErrInvalid, without sending anything.
// A Limiters is safe for concurrent use.
type Limiters struct {
	origin  string
	key     string
	timeout time.Duration
	http    *http.Client
}

// NewLimiters returns a Limiters client configured by cfg, or the problems
// of cfg.
func NewLimiters(cfg LimitersConfig) (*Limiters, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	l := &Limiters{origin: strings.TrimSuffix(cfg.URL, "/"), key: cfg.Key, timeout: cfg.Timeout, http: cfg.HTTPClient}
	if l.timeout == 0 {
		l.timeout = DefaultLimitersTimeout
	}
	if l.http == nil {
		l.http = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	return l, nil
}

// List returns every limiter with its configuration, sorted by name.
func (l *Limiters) List(ctx context.Context) ([]wire.Limiter, error) {
	var list wire.LimiterList
	if err := l.do(ctx, http.MethodGet, wire.PathLimiters, "", nil, &list); err != nil {
		return nil, err
	}
	return list.Limiters, nil
}

// Get returns the limiter name with its configuration and current state.
func (l *Limiters) Get(ctx context.Context, name string) (wire.LimiterStatus, error) {
	var st wire.LimiterStatus
	if err := badLimiterName(http.MethodGet, name); err != nil {
		return st, err
	}
	err := l.do(ctx, http.MethodGet, limiterPath(name), "", nil, &st)
	return st, err
}

// Configure creates the limiter name with the complete configuration cfg,
// or replaces its configuration. Replacing rejects the calls waiting on the
// limiter, even when cfg equals the configuration in force: compare first
// to leave them be.
func (l *Limiters) Configure(ctx context.Context, name string, cfg wire.LimiterConfig) (wire.Limiter, error) {
	if err := badLimiterName(http.MethodPut, name); err != nil {
		return wire.Limiter{}, err
	}
	body, err := json.Marshal(cfg)
	if err != nil {
		return wire.Limiter{}, err
	}
	var out wire.Limiter
	err = l.do(ctx, http.MethodPut, limiterPath(name), "application/json", body, &out)
	return out, err
}

// Reconfigure applies patch, a JSON merge patch (RFC 7396) of the
// configuration's fields, to the existing limiter name, and returns the
// result. It fails with wire.ErrNoSuchLimiter when the limiter does not
// exist.
//
//	l.Reconfigure(ctx, "billing-api", map[string]any{"concurrency": 10})
func (l *Limiters) Reconfigure(ctx context.Context, name string, patch map[string]any) (wire.Limiter, error) {
	if err := badLimiterName(http.MethodPatch, name); err != nil {
		return wire.Limiter{}, err
	}
	body, err := json.Marshal(patch)
	if err != nil {
		return wire.Limiter{}, err
	}
	var out wire.Limiter
	err = l.do(ctx, http.MethodPatch, limiterPath(name), wire.MergePatchType, body, &out)
	return out, err
}

func limiterPath(name string) string { return wire.PathLimiters + "/" + url.PathEscape(name) }

// badLimiterName returns the error of method on a name no limiter can
// have, as the server answers it (400 invalid), or nil. Such a name is
// refused before anything is sent: "." and ".." would reach the server as
// a path it cleans into another, and "" as the list's path.
func badLimiterName(method, name string) error {
	return badName(method, wire.PathLimiters, wire.ValidateLimiterName(name))
}

// badName wraps err, the problem of a name under the endpoint path, as a
// refusal of method, or returns nil for a nil err.
func badName(method, path string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s %s: %w", method, path, &wire.Error{Problem: wire.NewProblem(wire.CodeInvalid, err.Error())})
}

// do sends one request and decodes a 200 answer into out, or takes a 204
// answer when out is nil.
func (l *Limiters) do(ctx context.Context, method, path, contentType string, body []byte, out any) error {
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, l.origin+path, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	req.Header.Set("Authorization", "Bearer "+l.key)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := l.http.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, unavailable(err))
	}
	defer resp.Body.Close()
	answer, err := wire.ReadBody(resp.Body, maxAnswer)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, unavailable(err))
	}
	if resp.StatusCode == http.StatusNoContent && out == nil {
		return nil
	}
	if resp.StatusCode != http.StatusOK {
		var p wire.Problem
		if json.Unmarshal(answer, &p) == nil && p.Code != "" {
			p.Status = resp.StatusCode
			var err error = &wire.Error{Problem: p}
			if resp.StatusCode >= 500 {
				// The server failed (its store, its configuration): the
				// outcome is unknown, as after a timeout.
				err = unavailable(err)
			}
			return fmt.Errorf("%s %s: %w", method, path, err)
		}
		return fmt.Errorf("%s %s: %w", method, path, unavailable(fmt.Errorf("unexpected answer %s", resp.Status)))
	}
	if err := json.Unmarshal(answer, out); err != nil {
		return fmt.Errorf("%s %s: %w", method, path, unavailable(fmt.Errorf("undecodable answer: %w", err)))
	}
	return nil
}
