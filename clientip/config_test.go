package clientip_test

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/sluicehq/sluice/clientip"
)

func TestDefaultConfig(t *testing.T) {
	cfg := clientip.DefaultConfig()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("DefaultConfig().Validate() = %v", err)
	}
	if cfg.TrustProxy != nil || cfg.IPv6Prefix != 64 || cfg.Header != "X-Forwarded-For" || cfg.Logger != nil {
		t.Errorf("DefaultConfig() = %+v, want nobody trusted, /64, X-Forwarded-For, no logger", cfg)
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name   string
		modify func(*clientip.Config)
		valid  bool
	}{
		{"default", func(*clientip.Config) {}, true},
		{"prefix 0", func(c *clientip.Config) { c.IPv6Prefix = 0 }, true},
		{"prefix 128", func(c *clientip.Config) { c.IPv6Prefix = 128 }, true},
		{"prefix -1", func(c *clientip.Config) { c.IPv6Prefix = -1 }, false},
		{"prefix 129", func(c *clientip.Config) { c.IPv6Prefix = 129 }, false},
		{"zero Config", func(c *clientip.Config) { *c = clientip.Config{} }, false},
		{"empty header", func(c *clientip.Config) { c.Header = "" }, false},
		{"header with a space", func(c *clientip.Config) { c.Header = "X Forwarded For" }, false},
		{"header with a colon", func(c *clientip.Config) { c.Header = "X-Forwarded-For:" }, false},
		{"header with a non-ASCII letter", func(c *clientip.Config) { c.Header = "X-Forwardé" }, false},
		{"Forwarded", func(c *clientip.Config) { c.Header = "Forwarded" }, false},
		{"forwarded", func(c *clientip.Config) { c.Header = "forwarded" }, false},
		{"X-Real-IP", func(c *clientip.Config) { c.Header = "X-Real-IP" }, true},
		{"lowercase header", func(c *clientip.Config) { c.Header = "x-forwarded-for" }, true},
		{"token punctuation", func(c *clientip.Config) { c.Header = "X-Client_IP.v1" }, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := clientip.DefaultConfig()
			tt.modify(&cfg)
			err := cfg.Validate()
			if tt.valid {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				if _, err := clientip.New(cfg); err != nil {
					t.Fatalf("New() = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, clientip.ErrInvalidConfig) {
				t.Fatalf("Validate() = %v, want an error wrapping ErrInvalidConfig", err)
			}
			if r, err := clientip.New(cfg); r != nil || !errors.Is(err, clientip.ErrInvalidConfig) {
				t.Fatalf("New() = %v, %v; want nil and an error wrapping ErrInvalidConfig", r, err)
			}
		})
	}
}

// Validate reports every problem at once.
func TestConfigValidateAll(t *testing.T) {
	err := clientip.Config{IPv6Prefix: 200}.Validate()
	var joined interface{ Unwrap() []error }
	if !errors.As(err, &joined) || len(joined.Unwrap()) != 2 {
		t.Errorf("Validate() = %v, want two problems", err)
	}
}

func TestTrustCIDRs(t *testing.T) {
	tests := []struct {
		name  string
		cidrs []string
		addr  netip.Addr
		want  bool
	}{
		{"inside IPv4 prefix", []string{"10.0.0.0/8"}, netip.MustParseAddr("10.1.2.3"), true},
		{"outside IPv4 prefix", []string{"10.0.0.0/8"}, netip.MustParseAddr("11.0.0.1"), false},
		{"inside IPv6 prefix", []string{"2001:db8:ffff::/48"}, netip.MustParseAddr("2001:db8:ffff:1::1"), true},
		{"outside IPv6 prefix", []string{"2001:db8:ffff::/48"}, netip.MustParseAddr("2001:db8:fffe::1"), false},
		{"second entry", []string{"10.0.0.0/8", "192.0.2.10"}, netip.MustParseAddr("192.0.2.10"), true},
		{"bare address", []string{"192.0.2.10"}, netip.MustParseAddr("192.0.2.10"), true},
		{"bare address, neighbour", []string{"192.0.2.10"}, netip.MustParseAddr("192.0.2.11"), false},
		{"bare IPv6 address", []string{"2001:db8::10"}, netip.MustParseAddr("2001:db8::10"), true},
		{"host bits ignored", []string{"10.1.2.3/8"}, netip.MustParseAddr("10.200.0.1"), true},
		{"spaces ignored", []string{" 10.0.0.0/8\t"}, netip.MustParseAddr("10.0.0.1"), true},
		{"mapped hop, IPv4 entry", []string{"10.0.0.0/8"}, netip.MustParseAddr("::ffff:10.0.0.1"), true},
		{"IPv4 hop, mapped entry", []string{"::ffff:10.0.0.0/104"}, netip.MustParseAddr("10.0.0.1"), true},
		{"IPv4 hop, mapped entry, outside", []string{"::ffff:10.0.0.0/104"}, netip.MustParseAddr("11.0.0.1"), false},
		{"IPv4 hop, bare mapped entry", []string{"::ffff:10.0.0.1"}, netip.MustParseAddr("10.0.0.1"), true},
		{"IPv4 hop, all mapped", []string{"::ffff:0:0/96"}, netip.MustParseAddr("203.0.113.7"), true},
		{"IPv4 hop, IPv6 catch-all", []string{"::/0"}, netip.MustParseAddr("203.0.113.7"), false},
		{"IPv6 hop, IPv4 catch-all", []string{"0.0.0.0/0"}, netip.MustParseAddr("2001:db8::1"), false},
		{"zoned hop", []string{"fe80::/10"}, netip.MustParseAddr("fe80::1%eth0"), true},
		{"zero Addr", []string{"0.0.0.0/0", "::/0"}, netip.Addr{}, false},
		{"no entries", nil, netip.MustParseAddr("10.0.0.1"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			trust, err := clientip.TrustCIDRs(tt.cidrs...)
			if err != nil {
				t.Fatal(err)
			}
			if got := trust(tt.addr); got != tt.want {
				t.Errorf("TrustCIDRs(%q)(%v) = %v, want %v", tt.cidrs, tt.addr, got, tt.want)
			}
		})
	}
}

func TestTrustCIDRsErrors(t *testing.T) {
	for _, entry := range []string{
		"", " ", "10.0.0.0/33", "2001:db8::/129", "10.0.0.0/-1", "10.0.0.0/", "fe80::1%eth0", "fe80::%eth0/64",
		"proxy.example", "10.0.0.0/8/8", "10.0.0.0-10.0.0.255", "010.0.0.0/8",
	} {
		t.Run(entry, func(t *testing.T) {
			trust, err := clientip.TrustCIDRs("192.0.2.10", entry)
			if trust != nil || !errors.Is(err, clientip.ErrInvalidConfig) {
				t.Errorf("TrustCIDRs(%q) = %v, %v; want nil and an error wrapping ErrInvalidConfig", entry, trust != nil, err)
			}
		})
	}
}
