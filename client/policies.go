package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"

	"github.com/sluicehq/sluice/wire"
)

// Policies sets and reads the route quota policies of a server through its
// /v1/policies endpoints (see docs/protocol.md): the policies that an
// httplimit.Policies over a Client sharing the server's pepper enforces.
// It authenticates as a Limiters client does, with the limits key or the
// operator token; the `sluice limits` commands are built on both.
//
// Every method returns the server's refusals as a *wire.Error, which
// errors.Is matches against wire.ErrNoSuchPolicy, wire.ErrInvalid or
// wire.ErrUnauthorized; a failure to reach the server, or a failure of
// the server (a 5xx answer, its *wire.Error the cause), wraps
// ErrUnavailable: the outcome is unknown.
// A name no policy can have (see wire.ValidatePolicyName) is refused as the
// server refuses it, wire.ErrInvalid, without sending anything.
// A Policies is safe for concurrent use.
type Policies struct {
	l *Limiters
}

// NewPolicies returns a Policies client configured by cfg, or the problems
// of cfg.
func NewPolicies(cfg LimitersConfig) (*Policies, error) {
	l, err := NewLimiters(cfg)
	if err != nil {
		return nil, err
	}
	return &Policies{l: l}, nil
}

// List returns every policy with its quota, sorted by name.
func (p *Policies) List(ctx context.Context) ([]wire.Policy, error) {
	var list wire.PolicyList
	if err := p.l.do(ctx, http.MethodGet, wire.PathPolicies, "", nil, &list); err != nil {
		return nil, err
	}
	return list.Policies, nil
}

// Get returns the policy name. It fails with wire.ErrNoSuchPolicy when
// there is none.
func (p *Policies) Get(ctx context.Context, name string) (wire.Policy, error) {
	var out wire.Policy
	if err := badPolicyName(http.MethodGet, name); err != nil {
		return out, err
	}
	err := p.l.do(ctx, http.MethodGet, policyPath(name), "", nil, &out)
	return out, err
}

// Set stores cfg as the policy name, creating or replacing it. The stages
// enforcing it take the new quota within their refresh interval.
func (p *Policies) Set(ctx context.Context, name string, cfg wire.PolicyConfig) (wire.Policy, error) {
	if err := badPolicyName(http.MethodPut, name); err != nil {
		return wire.Policy{}, err
	}
	body, err := json.Marshal(cfg)
	if err != nil {
		return wire.Policy{}, err
	}
	var out wire.Policy
	err = p.l.do(ctx, http.MethodPut, policyPath(name), "application/json", body, &out)
	return out, err
}

// Delete removes the policy name; removing one that does not exist is not
// an error. The stages enforcing it refuse their requests (or fall back)
// from their next read of it on.
func (p *Policies) Delete(ctx context.Context, name string) error {
	if err := badPolicyName(http.MethodDelete, name); err != nil {
		return err
	}
	return p.l.do(ctx, http.MethodDelete, policyPath(name), "", nil, nil)
}

func policyPath(name string) string { return wire.PathPolicies + "/" + url.PathEscape(name) }

// badPolicyName is badLimiterName for a policy's name.
func badPolicyName(method, name string) error {
	return badName(method, wire.PathPolicies, wire.ValidatePolicyName(name))
}
