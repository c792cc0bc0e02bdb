package pace

import (
	"net/http"
	"strings"
	"time"
)

// ParseRetryAfter parses the value of a Retry-After field (RFC 9110 §10.2.3):
// delay-seconds, a non-negative integer, or an HTTP-date, taken relative to
// now (a date in the past is a delay of 0). Delays beyond MaxDuration are
// capped at it. ok is false for anything else, which callers should
// ignore: a malformed field is no instruction.
func ParseRetryAfter(value string, now time.Time) (d time.Duration, ok bool) {
	v := strings.TrimSpace(value)
	if v == "" {
		return 0, false
	}
	if isDigits(v) {
		var secs int64
		for i := 0; i < len(v); i++ {
			secs = secs*10 + int64(v[i]-'0')
			if secs > int64(MaxDuration/time.Second) {
				return MaxDuration, true
			}
		}
		return time.Duration(secs) * time.Second, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return min(max(t.Sub(now), 0), MaxDuration), true
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// RetryAfter reads the Retry-After field of h (see ParseRetryAfter). Field
// names are matched without regard to case, so a header built by hand
// without canonical names is read too.
func RetryAfter(h http.Header, now time.Time) (time.Duration, bool) {
	if vs, ok := h["Retry-After"]; ok && len(vs) > 0 {
		return ParseRetryAfter(vs[0], now)
	}
	for k, vs := range h {
		if strings.EqualFold(k, "Retry-After") && len(vs) > 0 {
			return ParseRetryAfter(vs[0], now)
		}
	}
	return 0, false
}

// RetryAfterMap reads the Retry-After field of headers kept in a plain map,
// as many SDKs expose them, matching the name without regard to case (see
// ParseRetryAfter).
func RetryAfterMap(m map[string]string, now time.Time) (time.Duration, bool) {
	if v, ok := m["Retry-After"]; ok {
		return ParseRetryAfter(v, now)
	}
	for k, v := range m {
		if strings.EqualFold(k, "Retry-After") {
			return ParseRetryAfter(v, now)
		}
	}
	return 0, false
}

// httpRateLimit is the built-in rate-limit rule: an *http.Response with
// status 429 Too Many Requests, paused for its Retry-After when it has a
// usable one.
func httpRateLimit(v any, now time.Time) *RateLimit {
	resp, ok := v.(*http.Response)
	if !ok || resp == nil || resp.StatusCode != http.StatusTooManyRequests {
		return nil
	}
	d, _ := RetryAfter(resp.Header, now)
	return &RateLimit{RetryAfter: d}
}
