package server

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/store/memstore"
	"github.com/sluicehq/sluice/wire"
)

// TestPolicyValidationAgreesWithHTTPLimit checks that the wire's bounds of a
// policy are httplimit's, at every edge: a quota the wire accepts is one
// Policies.Set takes, and the wire refuses the others with its own reasons.
func TestPolicyValidationAgreesWithHTTPLimit(t *testing.T) {
	var cases []wire.PolicyConfig
	for _, kind := range []string{"fixed", "sliding", "log", "gcra"} {
		for _, limit := range []int64{-1, 0, 1, algo.MaxLogLimit, algo.MaxLogLimit + 1, algo.MaxLimit, algo.MaxLimit + 1} {
			for _, ms := range []int64{-1000, 0, 999, 1000, 1500, 60_000, algo.MaxWindow, algo.MaxWindow + 1000} {
				cases = append(cases, wire.PolicyConfig{Limit: limit, WindowMs: ms, Kind: kind})
			}
		}
	}
	for _, c := range cases {
		wireErr := c.Validate()
		if wireErr != nil {
			continue
		}
		if err := toQuota(c).Validate(); err != nil {
			t.Errorf("%+v: the wire accepts, httplimit refuses: %v", c, err)
		}
		if got := fromQuota(toQuota(c)); got != c {
			t.Errorf("%+v does not round-trip: %+v", c, got)
		}
	}
	for _, c := range cases {
		q := httplimit.Quota{Limit: c.Limit, Window: millis(c.WindowMs)}
		q.Kind, _ = algo.ParseKind(c.Kind)
		if q.Validate() == nil && c.Validate() != nil {
			t.Errorf("%+v: httplimit accepts, the wire refuses: %v", c, c.Validate())
		}
	}
}

// TestPolicyNamesAgreeWithHTTPLimit checks that the wire takes the names
// httplimit takes: "." and "..", which cannot be a path segment, neither
// does.
func TestPolicyNamesAgreeWithHTTPLimit(t *testing.T) {
	mem, err := memstore.New(memstore.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	cfg := httplimit.DefaultPoliciesConfig()
	cfg.Store = mem
	pols, err := httplimit.NewPolicies(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a", "login", "api.v2_beta-1", strings.Repeat("n", wire.MaxPolicyName), "", strings.Repeat("n", wire.MaxPolicyName+1), "a b", "a/b", "é", ".", "..", "..."} {
		_, hErr := pols.Policy(name)
		wErr := wire.ValidatePolicyName(name)
		if (hErr == nil) != (wErr == nil) {
			t.Errorf("name %q: httplimit %v, wire %v", name, hErr, wErr)
		}
	}
}
