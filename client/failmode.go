package client

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// FailMode is what a caller does while the server is unavailable (any error
// wrapping ErrUnavailable: a timeout, a refusal, a stop, an off client).
// Choose one per family, by what an outage of the limit may cost:
//
//   - FailClosed refuses the request. Use it where a lapse of the limit is
//     a security failure (password attempts, replay fences, bulk reads).
//   - FailOpen admits the request unlimited. Use it only where the limit is
//     a courtesy and something else bounds the cost.
//   - Degraded enforces the same windows in this process alone, as fixed
//     windows, until the server answers again. Use it for route quotas on
//     every request, where refusing all traffic would be an outage and
//     admitting all of it an open door. With N instances an outage admits
//     up to N times the limit.
//
// The zero value is FailClosed.
type FailMode uint8

// The fail modes.
const (
	FailClosed FailMode = iota
	FailOpen
	Degraded
)

var failModeNames = [...]string{FailClosed: "closed", FailOpen: "open", Degraded: "degraded"}

// String returns "closed", "open" or "degraded".
func (m FailMode) String() string {
	if int(m) < len(failModeNames) {
		return failModeNames[m]
	}
	return fmt.Sprintf("FailMode(%d)", uint8(m))
}

// ParseFailMode maps "closed", "open" or "degraded" to its FailMode.
func ParseFailMode(s string) (FailMode, error) {
	for m, name := range failModeNames {
		if s == name {
			return FailMode(m), nil
		}
	}
	return 0, fmt.Errorf("fail mode %q (want closed, open or degraded)", s)
}

// MarshalText implements encoding.TextMarshaler.
func (m FailMode) MarshalText() ([]byte, error) {
	if int(m) >= len(failModeNames) {
		return nil, fmt.Errorf("invalid %s", m)
	}
	return []byte(m.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler, for configuration
// files.
func (m *FailMode) UnmarshalText(b []byte) error {
	v, err := ParseFailMode(string(b))
	if err != nil {
		return err
	}
	*m = v
	return nil
}

// FailClosedRetryAfter is the Retry-After of a request refused because its
// family failed closed.
const FailClosedRetryAfter = 30 * time.Second

// WriteUnavailable writes the answer of a family that fails closed: 503
// Service Unavailable with Retry-After: 30 and an RFC 9457 problem
// document. Call it when a Client call fails with ErrUnavailable:
//
//	resp, err := c.Do(ctx, req)
//	if errors.Is(err, client.ErrUnavailable) {
//		client.WriteUnavailable(w)
//		return
//	}
func WriteUnavailable(w http.ResponseWriter) {
	writeRefusal(w, http.StatusServiceUnavailable, FailClosedRetryAfter)
}

// writeRefusal writes status with Retry-After in whole seconds, rounded up
// and at least 1.
func writeRefusal(w http.ResponseWriter, status int, retryAfter time.Duration) {
	secs := max(1, int64((retryAfter+time.Second-1)/time.Second))
	h := w.Header()
	h.Set("Retry-After", strconv.FormatInt(secs, 10))
	h.Set("Content-Type", "application/problem+json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(problem{Type: "about:blank", Title: http.StatusText(status), Status: status})
}

// problem is the RFC 9457 body of a refusal.
type problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
}
