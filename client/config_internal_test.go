package client

import (
	"strings"
	"testing"
	"time"
)

func TestConfigTimeoutClamped(t *testing.T) {
	cases := map[time.Duration]time.Duration{
		0:                       DefaultTimeout,
		time.Nanosecond:         MinTimeout,
		-time.Second:            MinTimeout,
		99 * time.Millisecond:   MinTimeout,
		100 * time.Millisecond:  100 * time.Millisecond,
		750 * time.Millisecond:  750 * time.Millisecond,
		2 * time.Second:         2 * time.Second,
		2001 * time.Millisecond: MaxTimeout,
		time.Hour:               MaxTimeout,
	}
	for in, want := range cases {
		cfg := DefaultConfig()
		cfg.Timeout = in
		if got := cfg.timeout(); got != want {
			t.Errorf("Timeout %v: effective %v, want %v", in, got, want)
		}
		if got := New(cfg).s.timeout; got != want {
			t.Errorf("Timeout %v: client uses %v, want %v", in, got, want)
		}
	}
}

// TestTransportProtocols checks the HTTP versions the client's transport
// offers for each setting and scheme.
func TestTransportProtocols(t *testing.T) {
	for _, tc := range []struct {
		version           HTTPVersion
		url               string
		http1, http2, h2c bool
	}{
		{"", "https://sluice.example", true, true, false},
		{"", "HTTPS://sluice.example", true, true, false},
		{"", "http://127.0.0.1:7420", true, false, false},
		{HTTP2, "https://sluice.example", true, true, false},
		{HTTP2, "http://127.0.0.1:7420", false, false, true},
		{HTTP1, "https://sluice.example", true, false, false},
		{HTTP1, "http://127.0.0.1:7420", true, false, false},
	} {
		cfg := DefaultConfig()
		cfg.URL, cfg.Secret, cfg.Pepper, cfg.HTTPVersion = tc.url, strings.Repeat("s", 32), strings.Repeat("p", 32), tc.version
		c := New(cfg)
		if err := c.Err(); err != nil {
			t.Fatal(err)
		}
		p := c.s.transport.Protocols
		if p.HTTP1() != tc.http1 || p.HTTP2() != tc.http2 || p.UnencryptedHTTP2() != tc.h2c {
			t.Errorf("%q to %s: %v, want HTTP/1 %v, HTTP/2 %v, h2c %v", tc.version, tc.url, p, tc.http1, tc.http2, tc.h2c)
		}
	}
}
