package pace_test

import (
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/pace"
)

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"0", 0, true},
		{"5", 5 * time.Second, true},
		{" 120 ", 2 * time.Minute, true},
		{"99999999999999999999999", pace.MaxDuration, true},
		{"Sun, 01 Mar 2026 12:01:30 GMT", 90 * time.Second, true},  // IMF-fixdate
		{"Sunday, 01-Mar-26 12:00:10 GMT", 10 * time.Second, true}, // RFC 850
		{"Sun Mar  1 12:00:05 2026", 5 * time.Second, true},        // asctime
		{"Sun, 01 Mar 2026 11:00:00 GMT", 0, true},                 // in the past
		{"", 0, false},
		{"soon", 0, false},
		{"-5", 0, false},
		{"1.5", 0, false},
		{"5s", 0, false},
		{"0x10", 0, false},
		{"2026-03-01T12:01:00Z", 0, false},
	} {
		got, ok := pace.ParseRetryAfter(tc.in, now)
		if got != tc.want || ok != tc.ok {
			t.Errorf("ParseRetryAfter(%q) = %v, %v; want %v, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

// Both header shapes are read, their names matched without regard to case;
// garbage is ignored.
func TestRetryAfterFromHeaders(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		h    http.Header
		want time.Duration
		ok   bool
	}{
		{http.Header{"Retry-After": {"7"}}, 7 * time.Second, true},
		{http.Header{"retry-after": {"8"}}, 8 * time.Second, true}, // built by hand
		{http.Header{"Retry-After": {"Sun, 01 Mar 2026 12:00:30 GMT"}}, 30 * time.Second, true},
		{http.Header{"Retry-After": {"later"}}, 0, false},
		{http.Header{"Retry-After": {}}, 0, false},
		{http.Header{}, 0, false},
		{nil, 0, false},
	} {
		if got, ok := pace.RetryAfter(tc.h, now); got != tc.want || ok != tc.ok {
			t.Errorf("RetryAfter(%v) = %v, %v; want %v, %v", tc.h, got, ok, tc.want, tc.ok)
		}
	}
	for _, tc := range []struct {
		m    map[string]string
		want time.Duration
		ok   bool
	}{
		{map[string]string{"Retry-After": "3"}, 3 * time.Second, true},
		{map[string]string{"retry-after": "4", "content-type": "application/json"}, 4 * time.Second, true},
		{map[string]string{"RETRY-AFTER": "Sun, 01 Mar 2026 12:00:02 GMT"}, 2 * time.Second, true},
		{map[string]string{"retry-after": "nope"}, 0, false},
		{map[string]string{"x-retry-after": "5"}, 0, false},
		{nil, 0, false},
	} {
		if got, ok := pace.RetryAfterMap(tc.m, now); got != tc.want || ok != tc.ok {
			t.Errorf("RetryAfterMap(%v) = %v, %v; want %v, %v", tc.m, got, ok, tc.want, tc.ok)
		}
	}
}

// A 429 whose Retry-After is garbage falls back to the backoff.
func TestGarbageRetryAfterFallsBackToBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api, _ := bound(t)
		var a attempts
		if _, err := pace.Call(t.Context(), api, a.fn(response(429, "Retry-After", "whenever"), response(200))); err != nil {
			t.Fatal(err)
		}
		if len(a.at) != 2 || a.at[1] != 500*time.Millisecond {
			t.Errorf("attempts at %v, want the retry after the 500 ms backoff", a.at)
		}
	})
}

// A 429 whose Retry-After asks for no wait still pauses, for the backoff:
// the upstream has just refused a call.
func TestZeroRetryAfterPausesForTheBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api, _ := bound(t)
		var a attempts
		if _, err := pace.Call(t.Context(), api, a.fn(response(429, "Retry-After", "0"), response(200))); err != nil {
			t.Fatal(err)
		}
		if len(a.at) != 2 || a.at[1] != 500*time.Millisecond {
			t.Errorf("attempts at %v, want the retry after the 500 ms backoff", a.at)
		}
	})
}
