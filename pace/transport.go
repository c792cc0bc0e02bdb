package pace

import (
	"context"
	"errors"
	"net/http"
)

// RoundTripper returns an http.RoundTripper that sends every request
// through the limiter b, so that any http.Client is paced without touching
// its call sites:
//
//	client := &http.Client{Transport: pace.RoundTripper(nil, api.Bind(reg))}
//
// next sends the requests; nil means http.DefaultTransport. Each request is
// a Call (see Call for waiting, penalties and retries), whose fn is one
// round trip of next. opts apply to every request, over the limiter's
// defaults.
//
// The response of the last attempt is returned as it is, whatever its
// status, as a transport does: a 429 that outlasted its attempts, or a 404,
// is the client's to read. Errors before a request was sent (ErrNoSuchLimiter,
// ErrWaitTooLong, ErrDropped, ...) are returned as the round trip's error.
//
// Retries resend the request, with a fresh body from Request.GetBody
// (which http.NewRequest sets for in-memory bodies). A request with a body
// and no GetBody cannot be replayed: it is sent once and never retried,
// though its 429 still pauses every caller. An error from next is retried
// only for an idempotent request (GET, HEAD, OPTIONS, TRACE, PUT, DELETE,
// or one carrying an Idempotency-Key or X-Idempotency-Key header): for any
// other the upstream may have acted on it. A lease is released when next
// returns, that is when the response's header has arrived (for a 429, once
// its pause is recorded).
func RoundTripper(next http.RoundTripper, b *Bound, opts ...Option) http.RoundTripper {
	if next == nil {
		next = http.DefaultTransport
	}
	return &transport{next: next, b: b, opts: opts}
}

type transport struct {
	next http.RoundTripper
	b    *Bound
	opts []Option
}

func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	hasBody := req.Body != nil && req.Body != http.NoBody
	replayable := !hasBody || req.GetBody != nil
	sent := 0
	fn := func(ctx context.Context) (any, error) {
		r := req
		if sent > 0 {
			r = req.Clone(req.Context())
			if hasBody {
				body, err := req.GetBody()
				if err != nil {
					return nil, Permanent(err)
				}
				r.Body = body
			}
		}
		sent++
		return t.next.RoundTrip(r)
	}
	opts := t.opts
	if !replayable {
		opts = append(opts[:len(opts):len(opts)], WithRetry(Retry{Attempts: 1}))
	}
	idempotent := isIdempotent(req)
	v, err := t.b.call(req.Context(), fn, opts, mode{
		keepBody:  true,
		retryable: func(error) bool { return replayable && idempotent },
	})
	if sent == 0 && hasBody {
		_ = req.Body.Close() // a RoundTripper closes the body, even on errors
	}
	resp, _ := v.(*http.Response)
	var ce *CallError
	if err != nil && resp != nil && errors.As(err, &ce) {
		return resp, nil
	}
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// isIdempotent reports whether req may be sent again after an error, by
// the rules net/http applies to its own retries.
func isIdempotent(req *http.Request) bool {
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	h := req.Header
	_, k1 := h["Idempotency-Key"]
	_, k2 := h["X-Idempotency-Key"]
	return k1 || k2
}
