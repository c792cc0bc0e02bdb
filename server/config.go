package server

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/wire"
)

// Config configures a Server. Start from DefaultConfig.
type Config struct {
	// Secrets are the accepted request-signing secrets: the current one
	// first, then the previous one during a rotation. Each is at least
	// wire.MinSecretLen bytes.
	Secrets []string
	// OperatorToken is the bearer token of the /control endpoints: at least
	// wire.MinSecretLen bytes and different from every secret.
	OperatorToken string
	// FenceRefresh bounds how stale this server's view of the durable stop
	// fence may be when another server shares its store (Redis). A stop
	// made through this server applies at once.
	FenceRefresh time.Duration
	// Version is reported by /v1/ping.
	Version string
	// Logger receives the server's logs. Nil discards them.
	Logger *slog.Logger
	// Now is the server's clock for signature skew and audit records. Nil
	// means time.Now.
	Now func() time.Time
	// Pepper is the key-hashing pepper of the server's clients. With one,
	// the server serves /v1/limiters: its limiter registry hashes limiter
	// names as the clients do, so it configures the limiters they call.
	// Empty answers /v1/limiters 503. At least wire.MinSecretLen bytes and
	// different from every secret and from the operator token.
	Pepper string
	// LimitsKey, if set, is a bearer token granting /v1/limiters and
	// /v1/policies and nothing else: at least wire.MinSecretLen bytes and
	// different from every secret, the operator token and the pepper. The
	// operator token grants them too.
	LimitsKey string
	// Admission, if set, admits every authenticated, valid RPC after the
	// stop fence and before any subject command (family budgets, fairness
	// quotas), and serves the family and fairness operator endpoints.
	Admission *admission.Admitter
	// Registerer, if set, receives the server's metrics: its RPC calls,
	// requests and commands, the stop fence and, with Admission, each
	// family's daily budget (docs/operations.md lists them). A server
	// whose metrics cannot be registered (two servers on one registry)
	// refuses every RPC, as with any invalid configuration.
	Registerer prometheus.Registerer
	// Gatherer, if set, is served at GET /metrics behind the operator
	// token, in the Prometheus exposition formats: typically the registry
	// Registerer is, holding the store's and the process's metrics beside
	// the server's. Nil answers /metrics 404.
	Gatherer prometheus.Gatherer

	// problems were met while building the configuration (AddProblem).
	problems []error
}

// AddProblem records a problem met while building c, such as a malformed
// credential file. Validate reports it with the others, so a server built
// from c refuses every RPC with the reason instead of running on a value
// the operator did not choose.
func (c *Config) AddProblem(err error) {
	if err != nil {
		c.problems = append(c.problems, err)
	}
}

// DefaultConfig returns a configuration with no secrets (so it does not
// validate until they are set) and a one-second fence refresh.
func DefaultConfig() Config {
	return Config{FenceRefresh: time.Second, Version: "dev"}
}

// Validate reports every problem of c at once. A server with an invalid
// configuration answers every RPC 503 guard_unavailable with this reason.
func (c Config) Validate() error {
	errs := append([]error(nil), c.problems...)
	if len(c.Secrets) == 0 {
		errs = append(errs, errors.New("no signing secret configured"))
	}
	for i, s := range c.Secrets {
		if len(s) < wire.MinSecretLen {
			errs = append(errs, fmt.Errorf("signing secret %d is %d characters (minimum %d)", i, len(s), wire.MinSecretLen))
		}
		for j := range i {
			if c.Secrets[j] == s {
				errs = append(errs, fmt.Errorf("signing secrets %d and %d are equal", j, i))
			}
		}
	}
	switch {
	case c.OperatorToken == "":
		errs = append(errs, errors.New("no operator token configured"))
	case len(c.OperatorToken) < wire.MinSecretLen:
		errs = append(errs, fmt.Errorf("operator token is %d characters (minimum %d)", len(c.OperatorToken), wire.MinSecretLen))
	}
	for i, s := range c.Secrets {
		if s == c.OperatorToken && s != "" {
			errs = append(errs, fmt.Errorf("operator token equals signing secret %d", i))
		}
	}
	errs = append(errs, c.validateLimiters()...)
	if c.FenceRefresh < 0 {
		errs = append(errs, fmt.Errorf("fence refresh %s is negative", c.FenceRefresh))
	}
	if c.Admission != nil {
		if err := c.Admission.Err(); err != nil {
			// The answer carries the reason alone, not the admitter's
			// own rendering of its answer.
			var werr *wire.Error
			if errors.As(err, &werr) {
				err = errors.New(werr.Reason)
			}
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
