package client

import (
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
