package wire

import (
	"errors"
	"fmt"

	"github.com/sluicehq/sluice/algo"
)

// PathPolicies is the collection of route quota policies (package
// httplimit): GET lists them; PathPolicies + "/" + name is one policy,
// which GET reads, PUT sets and DELETE removes. Every request carries
// "Authorization: Bearer" and the operator token or the limits key.
const PathPolicies = "/v1/policies"

// FeaturePolicies is reported in Ping.Features by a server serving
// PathPolicies.
const FeaturePolicies = "policies"

// Bounds of a policy: those of httplimit.Quota.
const (
	// MaxPolicyName is the longest policy name, in bytes
	// (httplimit.MaxPolicyNameLen).
	MaxPolicyName = 64
	// MaxPolicyWindowMs is the longest windowMs: 120 days.
	MaxPolicyWindowMs = algo.MaxWindow
)

// PolicyConfig is the quota of one route policy, as httplimit stores it.
// It is complete: a PUT names every field.
type PolicyConfig struct {
	// Limit is the number of requests a client may make per window:
	// 1 … 2^40 (1 … 4,096 for the log kind).
	Limit int64 `json:"limit"`
	// WindowMs is the window's length in milliseconds: whole seconds, as
	// the RateLimit fields speak seconds, 1,000 … MaxPolicyWindowMs.
	WindowMs int64 `json:"windowMs"`
	// Kind is the window algorithm: "fixed", "sliding", "log" or "gcra".
	Kind string `json:"kind"`
}

// Policy is one policy and its quota: an element of PolicyList, and the
// answer of GET and PUT.
type Policy struct {
	Name   string       `json:"name"`
	Config PolicyConfig `json:"config"`
}

// PolicyList is the body of GET /v1/policies: every policy, sorted by
// name.
type PolicyList struct {
	Policies []Policy `json:"policies"`
}

// ValidatePolicyName reports whether name can name a policy: 1 …
// MaxPolicyName bytes of ASCII letters, digits, '.', '_' and '-', other
// than "." and "..", which cannot be a segment of a URL path.
func ValidatePolicyName(name string) error {
	if name == "" || len(name) > MaxPolicyName {
		return fmt.Errorf("policy name of %d bytes (want 1…%d)", len(name), MaxPolicyName)
	}
	if name == "." || name == ".." {
		return fmt.Errorf("policy name %q is a path segment of its own", name)
	}
	for i := 0; i < len(name); i++ {
		switch c := name[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '.', c == '_', c == '-':
		default:
			return fmt.Errorf("policy name %q: only letters, digits, '.', '_' and '-' are allowed", name)
		}
	}
	return nil
}

// Validate reports every problem of c at once, each naming its field as
// written on the wire and in a limits file.
func (c PolicyConfig) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	kind, err := algo.ParseKind(c.Kind)
	if err != nil {
		bad("kind %q is not fixed, sliding, log or gcra", c.Kind)
	}
	maxLimit := int64(algo.MaxLimit)
	if err == nil && kind == algo.KindLog {
		maxLimit = algo.MaxLogLimit
	}
	if c.Limit < 1 || c.Limit > maxLimit {
		bad("limit %d outside 1…%d", c.Limit, maxLimit)
	}
	switch {
	case c.WindowMs < 1000 || c.WindowMs > MaxPolicyWindowMs:
		bad("windowMs %d outside 1000…%d (1 s…120 days)", c.WindowMs, MaxPolicyWindowMs)
	case c.WindowMs%1000 != 0:
		bad("windowMs %d is not whole seconds", c.WindowMs)
	}
	return errors.Join(errs...)
}
