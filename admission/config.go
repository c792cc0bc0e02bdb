package admission

import (
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/algo"
)

// DefaultFamily is the family of a server configured with no family list.
const DefaultFamily = "default"

// Defaults.
const (
	DefaultTotal = 1_000_000
	DefaultChunk = 1_000
	// DefaultQuotaChunk is how many commands of an identity's daily quota
	// a server reserves ahead by default (see Config.QuotaChunk).
	DefaultQuotaChunk   = 100
	DefaultWarnPermille = 800
	// DefaultDenialCache is how many exhausted identities a server
	// remembers by default.
	DefaultDenialCache = 10_000
	// DefaultIdentityDivisor makes each source bucket and each principal's
	// daily share floor(family budget / 20).
	DefaultIdentityDivisor = 20
	// Default divisors of the aggregate prefix tiers: a /24 or /48 may
	// spend a fifth of the family budget, a /56 a tenth.
	DefaultV4Slash24Divisor = 5
	DefaultV6Slash56Divisor = 10
	DefaultV6Slash48Divisor = 5
)

// Shares sets, for one family, the daily share of each fairness axis as a
// divisor of the family's budget: an identity may spend floor(budget /
// divisor) commands per UTC day. Zero means the default.
type Shares struct {
	Source    int64 // one source bucket: an IPv4 /32, an IPv6 /64, or unknown
	Principal int64 // one principal
	V4Slash24 int64 // every source inside one IPv4 /24
	V6Slash56 int64 // every source inside one IPv6 /56
	V6Slash48 int64 // every source inside one IPv6 /48
}

func (s Shares) withDefaults() Shares {
	def := func(v, d int64) int64 {
		if v == 0 {
			return d
		}
		return v
	}
	return Shares{
		Source:    def(s.Source, DefaultIdentityDivisor),
		Principal: def(s.Principal, DefaultIdentityDivisor),
		V4Slash24: def(s.V4Slash24, DefaultV4Slash24Divisor),
		V6Slash56: def(s.V6Slash56, DefaultV6Slash56Divisor),
		V6Slash48: def(s.V6Slash48, DefaultV6Slash48Divisor),
	}
}

func (s Shares) validate() error {
	for _, d := range []int64{s.Source, s.Principal, s.V4Slash24, s.V6Slash56, s.V6Slash48} {
		if d < 0 {
			return fmt.Errorf("share divisor %d is negative", d)
		}
	}
	return nil
}

// Config configures admission. Start from DefaultConfig.
type Config struct {
	// Total is the number of commands admitted per UTC day across all
	// families.
	Total int64
	// Families are the families RPCs may name. Empty means one family,
	// DefaultFamily.
	Families []string
	// Split gives families explicit daily allowances, e.g.
	// "offline=600000,replay=100000". Families it does not name share what
	// is left of Total equally. Empty means every family gets an equal
	// share of Total.
	Split string
	// Fair lists the families whose RPCs always pass source fairness: an
	// RPC without a source is charged to the shared unknown bucket. Other
	// families charge the identities an RPC carries, if any.
	Fair []string
	// Shares are the fairness shares of every family; FamilyShares
	// overrides them per family, axis by axis: an axis a family's Shares
	// leave zero takes its value from Shares (and then the default).
	Shares       Shares
	FamilyShares map[string]Shares
	// Chunk is how many commands a server leases from a family's durable
	// allowance at a time, capped at 1 % of the family's allowance (see
	// EffectiveChunk). Larger chunks mean fewer durable writes and a
	// slower budget stop on other servers sharing the store.
	Chunk int64
	// QuotaChunk is how many commands of an identity's daily fairness
	// quota a server reserves ahead, beyond the RPC that needs them,
	// capped at 1 % of that quota (rounded down: nothing is reserved
	// ahead of a quota under 100 commands): the RPCs of a busy source or
	// principal then mostly pass fairness without a store call. What a
	// server holds unspent when it stops, or when its identity's lease is
	// evicted (at most 10,000 are kept), is lost for the day: the
	// identity is admitted less, never more. Zero charges every RPC's
	// quotas in the store.
	QuotaChunk int64
	// WarnPermille is the usage, in thousandths of a family's allowance, at
	// which a warning is logged once per family and day.
	WarnPermille int64
	// StateRefresh bounds how stale this server's view of another server's
	// family stop or fairness reset may be: the family's stored state is
	// read again at most this long after the last read. Zero reads it on
	// every RPC.
	StateRefresh time.Duration
	// DenialCache is how many exhausted identities this server remembers,
	// to refuse their RPCs without a store call until the end of the UTC
	// day (the oldest are forgotten first).
	DenialCache int
	// Now is the admission clock (UTC days). Nil means time.Now.
	Now func() time.Time
	// Logger receives warnings and audit lines. Nil discards them.
	Logger *slog.Logger

	// switches lets tests of the tests turn single checks off; it is set
	// only from this package's tests.
	switches switches
	// problems were met while building the configuration (AddProblem).
	problems []error
}

// AddProblem records a problem met while building c, such as a malformed
// flag. Validate reports it with the others, so an Admitter built from c
// refuses every RPC with the reason instead of running on a default the
// operator did not choose.
func (c *Config) AddProblem(err error) {
	if err != nil {
		c.problems = append(c.problems, err)
	}
}

type switches struct {
	noSource, noPrincipal, noTiers, noDenialCache bool
	// leasesTaken, when set, runs in takeLeases between the takes and the
	// check of the lease epoch.
	leasesTaken func()
}

// DefaultConfig returns the defaults: 1,000,000 commands a day for one
// family, identity shares of 1/20, chunks of 1,000 of a family's budget
// and of 100 of an identity's quota, a warning at 80 %, the stored state
// read at most once a second, 10,000 exhausted identities remembered.
func DefaultConfig() Config {
	return Config{Total: DefaultTotal, Chunk: DefaultChunk, QuotaChunk: DefaultQuotaChunk, WarnPermille: DefaultWarnPermille,
		StateRefresh: time.Second, DenialCache: DefaultDenialCache}
}

// families returns the configured family names, defaulting to DefaultFamily.
func (c Config) families() []string {
	if len(c.Families) == 0 {
		return []string{DefaultFamily}
	}
	return c.Families
}

// Validate reports every problem of c; Allowances reports the allowances a
// valid configuration gives each family.
func (c Config) Validate() error {
	_, err := c.Allowances()
	return err
}

// Allowances returns each family's daily allowance: the explicit split,
// with the rest of Total shared equally by the families it leaves out (or
// by all families when there is no split).
func (c Config) Allowances() (map[string]int64, error) {
	errs := append([]error(nil), c.problems...)
	if c.Total < 1 {
		errs = append(errs, fmt.Errorf("daily budget %d must be positive", c.Total))
	}
	if c.Chunk < 1 {
		errs = append(errs, fmt.Errorf("chunk %d must be positive", c.Chunk))
	}
	if c.QuotaChunk < 0 {
		errs = append(errs, fmt.Errorf("quota chunk %d is negative", c.QuotaChunk))
	}
	if c.WarnPermille < 1 || c.WarnPermille > 1000 {
		errs = append(errs, fmt.Errorf("warning threshold %d‰ outside 1…1000", c.WarnPermille))
	}
	if c.StateRefresh < 0 {
		errs = append(errs, fmt.Errorf("state refresh %s is negative", c.StateRefresh))
	}
	if c.DenialCache < 1 {
		errs = append(errs, fmt.Errorf("denial cache of %d entries must hold at least 1", c.DenialCache))
	}
	families := c.families()
	for i, f := range families {
		if err := validName(f); err != nil {
			errs = append(errs, err)
		}
		if slices.Contains(families[:i], f) {
			errs = append(errs, fmt.Errorf("family %q listed twice", f))
		}
	}
	for i, f := range c.Fair {
		if !slices.Contains(families, f) {
			errs = append(errs, fmt.Errorf("fair family %q is not a configured family", f))
		}
		if slices.Contains(c.Fair[:i], f) {
			errs = append(errs, fmt.Errorf("fair family %q listed twice", f))
		}
	}
	if err := c.Shares.validate(); err != nil {
		errs = append(errs, err)
	}
	for f, s := range c.FamilyShares {
		if !slices.Contains(families, f) {
			errs = append(errs, fmt.Errorf("shares for unknown family %q", f))
		}
		if err := s.validate(); err != nil {
			errs = append(errs, fmt.Errorf("family %q: %w", f, err))
		}
	}
	split, err := parseSplit(c.Split, families)
	if err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	out := make(map[string]int64, len(families))
	// Summed without overflow: budgets whose sum does not fit an int64
	// are above any total, not a negative sum below it.
	sum := new(big.Int)
	for _, n := range split {
		sum.Add(sum, big.NewInt(n))
	}
	if sum.Cmp(big.NewInt(c.Total)) > 0 {
		return nil, fmt.Errorf("family budgets add up to %s, above the daily total %d", sum, c.Total)
	}
	named := sum.Int64()
	for f, n := range split {
		out[f] = n
	}
	rest := len(families) - len(split)
	for _, f := range families {
		if _, ok := split[f]; !ok {
			out[f] = (c.Total - named) / int64(rest)
		}
		// The allowance is the limit of the durable counter every lease
		// reserves from: one the store cannot hold would fail every RPC.
		if out[f] > algo.MaxLimit {
			errs = append(errs, fmt.Errorf("family %q: daily budget %d above the largest a family may have, %d", f, out[f], algo.MaxLimit))
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// parseSplit parses "name=count,name=count".
func parseSplit(s string, families []string) (map[string]int64, error) {
	out := map[string]int64{}
	if strings.TrimSpace(s) == "" {
		return out, nil
	}
	for part := range strings.SplitSeq(s, ",") {
		name, num, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return nil, fmt.Errorf("family budget %q: want name=count", part)
		}
		name = strings.TrimSpace(name)
		if !slices.Contains(families, name) {
			return nil, fmt.Errorf("family budget names unknown family %q (families: %s)", name, strings.Join(families, ", "))
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("family %q has two budgets", name)
		}
		n, ok := parseCount(strings.TrimSpace(num))
		if !ok {
			return nil, fmt.Errorf("family budget %q: %q is not a non-negative integer", name, num)
		}
		out[name] = n
	}
	return out, nil
}

// parseCount parses a count written as plain decimal digits: no sign, no
// spaces, no other base; false for anything else, or for a count beyond
// int64.
func parseCount(s string) (int64, bool) {
	if s == "" || strings.TrimLeft(s, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}

func validName(f string) error {
	if f == "" || len(f) > 64 {
		return fmt.Errorf("family name %q must be 1…64 characters", f)
	}
	for _, r := range f {
		if !(r == '-' || r == '_' || r == '.' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return fmt.Errorf("family name %q: only letters, digits, '-', '_' and '.'", f)
		}
	}
	return nil
}
