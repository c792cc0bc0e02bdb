package client_test

import (
	"bytes"
	"encoding/json"
	"maps"
	"net/netip"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/wire"
)

// identityCases are addresses in the forms a caller may meet them, with
// their bucket and tiers in canonical form ("" tiers: the unknown bucket).
var identityCases = []struct {
	in     string
	bucket string
	v24    string // IPv4 /24
	v56    string // IPv6 /56
	v48    string // IPv6 /48
}{
	// IPv4, and IPv4-mapped IPv6 in every spelling, counts as IPv4.
	{in: "203.0.113.9", bucket: "203.0.113.9", v24: "203.0.113.0/24"},
	{in: "::ffff:203.0.113.9", bucket: "203.0.113.9", v24: "203.0.113.0/24"},
	{in: "::FFFF:203.0.113.9", bucket: "203.0.113.9", v24: "203.0.113.0/24"},
	{in: "::ffff:cb00:7109", bucket: "203.0.113.9", v24: "203.0.113.0/24"},
	{in: "0:0:0:0:0:ffff:cb00:7109", bucket: "203.0.113.9", v24: "203.0.113.0/24"},
	{in: "::ffff:203.0.113.9%eth0", bucket: "203.0.113.9", v24: "203.0.113.0/24"},
	// IPv6: the /64, whatever the case, padding, compression or zone.
	{in: "2001:db8:1:2:3:4:5:6", bucket: "2001:db8:1:2::/64", v56: "2001:db8:1::/56", v48: "2001:db8:1::/48"},
	{in: "2001:DB8:1:2:FFFF::1", bucket: "2001:db8:1:2::/64", v56: "2001:db8:1::/56", v48: "2001:db8:1::/48"},
	{in: "2001:0db8:0001:0002:0000:0000:0000:0001", bucket: "2001:db8:1:2::/64", v56: "2001:db8:1::/56", v48: "2001:db8:1::/48"},
	{in: "2001:db8:1:2::1%eth0", bucket: "2001:db8:1:2::/64", v56: "2001:db8:1::/56", v48: "2001:db8:1::/48"},
	{in: "2001:db8:1:2::1%25", bucket: "2001:db8:1:2::/64", v56: "2001:db8:1::/56", v48: "2001:db8:1::/48"},
	{in: "2001:db8:1:1ff::1", bucket: "2001:db8:1:1ff::/64", v56: "2001:db8:1:100::/56", v48: "2001:db8:1::/48"},
	{in: "fe80::1%eth0", bucket: "fe80::/64", v56: "fe80::/56", v48: "fe80::/48"},
	{in: "0000:0000::0000:0000:0001", bucket: "::/64", v56: "::/56", v48: "::/48"},
	// The unknown bucket: missing, unspecified, unparsable or ambiguous.
	{in: "", bucket: client.UnknownSource},
	{in: "unknown", bucket: client.UnknownSource},
	{in: "0.0.0.0", bucket: client.UnknownSource},
	{in: "::", bucket: client.UnknownSource},
	{in: "0:0:0:0:0:0:0:0", bucket: client.UnknownSource},
	{in: "::ffff:0.0.0.0", bucket: client.UnknownSource},
	{in: "::%eth0", bucket: client.UnknownSource},
	{in: "not an address", bucket: client.UnknownSource},
	{in: "203.0.113.9:443", bucket: client.UnknownSource},
	{in: "[2001:db8::1]", bucket: client.UnknownSource},
	{in: "[2001:db8::1]:443", bucket: client.UnknownSource},
	{in: "203.000.113.009", bucket: client.UnknownSource}, // leading zeros: octal or decimal?
	{in: "203.0.113.9 ", bucket: client.UnknownSource},
	{in: "2001:db8::/64", bucket: client.UnknownSource},
}

func TestSourceBucketAndTiers(t *testing.T) {
	for _, tc := range identityCases {
		if got := client.SourceBucket(tc.in); got != tc.bucket {
			t.Errorf("SourceBucket(%q) = %q, want %q", tc.in, got, tc.bucket)
		}
		var want map[string]string
		switch {
		case tc.v24 != "":
			want = map[string]string{wire.TierV4Slash24: tc.v24}
		case tc.v56 != "":
			want = map[string]string{wire.TierV6Slash56: tc.v56, wire.TierV6Slash48: tc.v48}
		}
		if got := client.SourceTiers(tc.in); !maps.Equal(got, want) {
			t.Errorf("SourceTiers(%q) = %v, want %v", tc.in, got, want)
		}
	}
}

// TestSourceBucketAgreesWithNetip checks the buckets of a spread of
// addresses against net/netip's own prefix arithmetic.
func TestSourceBucketAgreesWithNetip(t *testing.T) {
	for _, s := range []string{"1.2.3.4", "255.255.255.255", "10.0.0.1", "::1", "2001:db8:ffff:ffff:ffff:ffff:ffff:ffff", "ff02::1"} {
		a := netip.MustParseAddr(s)
		want := a.String()
		if a.Is6() {
			want = netip.PrefixFrom(a, 64).Masked().String()
		}
		if got := client.SourceBucket(s); got != want {
			t.Errorf("SourceBucket(%q) = %q, want %q", s, got, want)
		}
	}
}

func TestWithFairnessIdentities(t *testing.T) {
	h := newHarness(t)
	c := h.client()
	for _, tc := range identityCases {
		id := c.WithFairness(tc.in, "user-42").Identities()
		if id.Principal != c.Hash(client.PurposePrincipal, "user-42") {
			t.Errorf("%q: principal %q", tc.in, id.Principal)
		}
		if tc.bucket == client.UnknownSource {
			if id.Source != wire.UnknownSource || id.SourceTiers != nil {
				t.Errorf("%q: source %q, tiers %v; want %q unhashed and no tiers", tc.in, id.Source, id.SourceTiers, wire.UnknownSource)
			}
			continue
		}
		if want := c.Hash(client.PurposeSource, tc.bucket); id.Source != want {
			t.Errorf("%q: source %q, want the hash of %q", tc.in, id.Source, tc.bucket)
		}
		want := map[string]string{}
		for tier, prefix := range client.SourceTiers(tc.in) {
			want[tier] = c.Hash(client.PurposeSourceTier, client.TierIdentity(tier, prefix))
		}
		if !maps.Equal(id.SourceTiers, want) || len(want) == 0 {
			t.Errorf("%q: tiers %v, want %v", tc.in, id.SourceTiers, want)
		}
		// Each tier is hashed on its own: no two identities are equal.
		seen := map[string]bool{id.Source: true}
		for _, h := range id.SourceTiers {
			if seen[h] {
				t.Errorf("%q: two identities share the hash %s", tc.in, h)
			}
			seen[h] = true
		}
	}
	// Equal tier prefixes of different tiers hash apart.
	if c.Hash(client.PurposeSourceTier, client.TierIdentity(wire.TierV6Slash56, "2001:db8::/56")) ==
		c.Hash(client.PurposeSourceTier, client.TierIdentity(wire.TierV6Slash48, "2001:db8::/56")) {
		t.Error("the tier name does not enter the hash")
	}
	if got := c.Identities(); got.Source != "" || got.SourceTiers != nil || got.Principal != "" {
		t.Errorf("a view without fairness carries identities %+v", got)
	}
	if got := c.WithFairness("203.0.113.9", "").Identities().Principal; got != "" {
		t.Errorf("an empty principal is sent as %q", got)
	}
}

// TestUnknownBucketIsTheSameForEveryPepper: clients with different peppers
// name the same unknown bucket, and different known buckets.
func TestUnknownBucketIsTheSameForEveryPepper(t *testing.T) {
	h := newHarness(t)
	a := h.client()
	cfg := h.config()
	cfg.Pepper = strings.Repeat("q", 40)
	b := client.New(cfg)
	defer b.Close()
	if x, y := a.WithFairness("::", "").Identities().Source, b.WithFairness("garbage", "").Identities().Source; x != y || x != wire.UnknownSource {
		t.Errorf("unknown sources %q and %q, want both %q", x, y, wire.UnknownSource)
	}
	if x, y := a.WithFairness("203.0.113.9", "").Identities().Source, b.WithFairness("203.0.113.9", "").Identities().Source; x == y {
		t.Error("two peppers hash a known source alike")
	}
}

// TestFairnessIdentitiesOnTheWire sends requests through fairness views and
// reads what left the process: the hashed bucket and tiers, never the raw
// address or prefixes, and the unknown bucket as it is.
func TestFairnessIdentitiesOnTheWire(t *testing.T) {
	h := newHarness(t)
	c := h.client()
	req := func() *engine.Request {
		return &engine.Request{Steps: []engine.Step{{Partition: "p", Commands: []engine.Command{engine.Get("k")}}}}
	}
	for _, addr := range []string{"203.0.113.9", "2001:db8:1:2::7", "0.0.0.0", "garbage"} {
		if _, err := engine.New(c.WithFairness(addr, "user-42")).Do(ctxT(t), req()); err != nil {
			t.Fatalf("%s: %v", addr, err)
		}
	}
	bodies := h.sent()
	if len(bodies) != 4 {
		t.Fatalf("%d bodies sent, want 4", len(bodies))
	}
	for i, addr := range []string{"203.0.113.9", "2001:db8:1:2::7", "0.0.0.0", "garbage"} {
		var r wire.Request
		if err := json.Unmarshal(bodies[i], &r); err != nil {
			t.Fatal(err)
		}
		want := c.WithFairness(addr, "user-42").Identities()
		if r.Source != want.Source || !maps.Equal(r.SourceTiers, want.SourceTiers) || r.Principal != want.Principal {
			t.Errorf("%s: sent source %q tiers %v principal %q, want %+v", addr, r.Source, r.SourceTiers, r.Principal, want)
		}
		for _, raw := range []string{"203.0.113", "2001:db8", "user-42", "garbage"} {
			if bytes.Contains(bodies[i], []byte(raw)) {
				t.Errorf("%s: raw %q left the process: %s", addr, raw, bodies[i])
			}
		}
	}
}
