package httplimit

import (
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/dunglas/httpsfv"
)

// The response fields the stage writes.
const (
	FieldPolicy     = "RateLimit-Policy"
	FieldRateLimit  = "RateLimit"
	FieldXLimit     = "X-RateLimit-Limit"
	FieldXRemaining = "X-RateLimit-Remaining"
	FieldXReset     = "X-RateLimit-Reset"
)

// RejectionBody is the body of a 429 answer, served as application/json.
const RejectionBody = `{"error":"RATE_LIMITED"}`

// policyField serializes the RateLimit-Policy field of q: a List of one
// String Item with the q (limit) and w (window in seconds) parameters.
func policyField(q Quota) (string, error) {
	p := httpsfv.NewParams()
	p.Add("q", q.Limit)
	p.Add("w", int64(q.Window/time.Second))
	return httpsfv.Marshal(httpsfv.List{httpsfv.Item{Value: q.Name, Params: p}})
}

// rateLimitField appends the RateLimit field to dst: a List of one String
// Item naming the quota, with the r (remaining) and t (seconds)
// parameters. item is the quota's name as httpsfv serializes it, computed
// once per quota; the two parameters are Integers, whose serialization is
// their decimal digits (RFC 9651, section 4.1.4), appended here rather
// than through httpsfv.Marshal, which would cost a dozen allocations per
// response. TestRateLimitFieldMatchesHTTPSFV holds the two equal.
func rateLimitField(dst []byte, item string, remaining, resetSeconds int64) []byte {
	dst = append(dst, item...)
	dst = append(dst, ";r="...)
	dst = strconv.AppendInt(dst, remaining, 10)
	dst = append(dst, ";t="...)
	return strconv.AppendInt(dst, resetSeconds, 10)
}

// maxRateLimitField is the longest RateLimit field: a name of
// MaxQuotaNameLen bytes, each escaped, in quotes, then r (at most 2^40, 13
// digits) and t (at most 120 days in seconds, 8 digits).
const maxRateLimitField = 2 + 2*MaxQuotaNameLen + len(";r=") + 13 + len(";t=") + 8

// nameItem serializes a quota's name as a bare String Item.
func nameItem(name string) (string, error) {
	return httpsfv.Marshal(httpsfv.Item{Value: name, Params: httpsfv.NewParams()})
}

// The fields' keys in canonical form ("Ratelimit-Policy"), so that setting
// them skips http.Header.Set's canonicalisation, which allocates for every
// name that is not canonical already.
var (
	keyPolicy     = http.CanonicalHeaderKey(FieldPolicy)
	keyRateLimit  = http.CanonicalHeaderKey(FieldRateLimit)
	keyXLimit     = http.CanonicalHeaderKey(FieldXLimit)
	keyXRemaining = http.CanonicalHeaderKey(FieldXRemaining)
	keyXReset     = http.CanonicalHeaderKey(FieldXReset)

	keyRetryAfter   = http.CanonicalHeaderKey("Retry-After")
	keyContentType  = http.CanonicalHeaderKey("Content-Type")
	keyCacheControl = http.CanonicalHeaderKey("Cache-Control")
)

// writeFields sets the fields selected by l.headers from d. The values of
// every field share one slice, so that a response pays one allocation for
// them rather than one per field, as net/http does when it reads a header.
func (l *Limiter) writeFields(h http.Header, d *decision) {
	n := 0
	if l.headers&HeadersIETF != 0 {
		n += 2
	}
	if l.headers&HeadersX != 0 {
		n += 3
	}
	if n == 0 {
		return
	}
	vv := make([]string, 0, n)
	if l.headers&HeadersIETF != 0 {
		var buf [maxRateLimitField]byte
		vv = append(vv, d.q.policy, string(rateLimitField(buf[:0], d.q.item, d.remaining, seconds(d.resetIn))))
		h[keyPolicy], h[keyRateLimit] = vv[0:1:1], vv[1:2:2]
		vv = vv[2:]
	}
	if l.headers&HeadersX != 0 {
		vv = append(vv, d.q.limit, strconv.FormatInt(d.remaining, 10), strconv.FormatInt(seconds(d.resetAt), 10))
		h[keyXLimit], h[keyXRemaining], h[keyXReset] = vv[0:1:1], vv[1:2:2], vv[2:3:3]
	}
}

// writeRejection answers 429 with Retry-After: retryAfterMs in whole
// seconds, rounded up and at least 1, so that a client retrying exactly
// then is admitted and never retries in a busy loop.
func writeRejection(w http.ResponseWriter, retryAfterMs int64) {
	vv := []string{strconv.FormatInt(max(1, seconds(retryAfterMs)), 10), "application/json", "no-store"}
	h := w.Header()
	h[keyRetryAfter], h[keyContentType], h[keyCacheControl] = vv[0:1:1], vv[1:2:2], vv[2:3:3]
	w.WriteHeader(http.StatusTooManyRequests)
	io.WriteString(w, RejectionBody)
}

// unavailableBody is the problem document (RFC 9457) of WriteUnavailable.
const unavailableBody = `{"type":"about:blank","title":"Service Unavailable","status":503,"detail":"the rate limit could not be checked, so the request was refused"}`

// WriteUnavailable is the default Config.OnError: 503 Service Unavailable
// with an RFC 9457 problem document saying that the rate limit could not be
// checked. It reveals nothing of err. Call it from your own OnError after
// logging or counting the failure to keep the default answer.
func WriteUnavailable(w http.ResponseWriter, r *http.Request, err error) {
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusServiceUnavailable)
	io.WriteString(w, unavailableBody)
}
