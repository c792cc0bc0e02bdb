package pace_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/pace"
)

// upstream is a fake next RoundTripper: it records the requests it sees
// (with their bodies) and answers from a script.
type upstream struct {
	mu      sync.Mutex
	seen    []string // method, URL and body of each request
	at      []time.Duration
	start   time.Time
	answers []func() (*http.Response, error)
}

func (u *upstream) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		body, _ = io.ReadAll(req.Body)
		req.Body.Close()
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	u.seen = append(u.seen, req.Method+" "+req.URL.String()+" "+string(body))
	u.at = append(u.at, since(u.start))
	answer := u.answers[min(len(u.seen), len(u.answers))-1]
	return answer()
}

func answer(status int, fields ...string) func() (*http.Response, error) {
	return func() (*http.Response, error) {
		r := response(status, fields...)
		return r, nil
	}
}

func transportError() (*http.Response, error) { return nil, errors.New("connection reset by peer") }

// An http.Client paced through the RoundTripper: a 429 is retried after
// its Retry-After with a fresh body, and the final response comes back as
// the upstream sent it.
func TestRoundTripperRetriesTooManyRequestsWithAFreshBody(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api, _ := bound(t)
		up := &upstream{start: time.Now(), answers: []func() (*http.Response, error){answer(429, "Retry-After", "3"), answer(201)}}
		client := &http.Client{Transport: pace.RoundTripper(up, api)}
		resp, err := client.Post("http://upstream.test/items", "application/json", strings.NewReader(`{"n":1}`))
		if err != nil || resp.StatusCode != 201 {
			t.Fatalf("status %v, err %v", resp, err)
		}
		want := []string{"POST http://upstream.test/items {\"n\":1}", "POST http://upstream.test/items {\"n\":1}"}
		if len(up.seen) != 2 || up.seen[0] != want[0] || up.seen[1] != want[1] || up.at[1] != 3*time.Second {
			t.Errorf("upstream saw %q at %v, want the same request twice, 3 s apart", up.seen, up.at)
		}
	})
}

// A final status is the client's to read, not an error: a 404 once, and a
// 429 that outlasted its attempts with its body intact.
func TestRoundTripperReturnsFinalResponses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api, _ := bound(t)
		up := &upstream{start: time.Now(), answers: []func() (*http.Response, error){answer(404)}}
		client := &http.Client{Transport: pace.RoundTripper(up, api)}
		resp, err := client.Get("http://upstream.test/missing")
		if err != nil || resp.StatusCode != 404 || len(up.seen) != 1 {
			t.Fatalf("status %v, err %v after %d requests; want 404 once", resp, err, len(up.seen))
		}
		up = &upstream{start: time.Now(), answers: []func() (*http.Response, error){answer(429)}}
		client = &http.Client{Transport: pace.RoundTripper(up, api, pace.WithRetry(pace.Retry{Attempts: 2}))}
		resp, err = client.Get("http://upstream.test/busy")
		if err != nil || resp.StatusCode != 429 || len(up.seen) != 2 {
			t.Fatalf("status %v, err %v after %d requests; want 429 after 2", resp, err, len(up.seen))
		}
		if b, err := io.ReadAll(resp.Body); err != nil || string(b) != "body" {
			t.Errorf("body %q, %v; want it readable", b, err)
		}
	})
}

// A request whose body cannot be replayed is sent once: its 429 pauses
// every caller but is not retried.
func TestRoundTripperSendsANonReplayableBodyOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api, reg := bound(t)
		up := &upstream{start: time.Now(), answers: []func() (*http.Response, error){answer(429, "Retry-After", "30"), answer(200)}}
		client := &http.Client{Transport: pace.RoundTripper(up, api)}
		req, _ := http.NewRequest(http.MethodPost, "http://upstream.test/upload", io.NopCloser(bytes.NewReader([]byte("stream"))))
		resp, err := client.Do(req)
		if err != nil || resp.StatusCode != 429 || len(up.seen) != 1 {
			t.Fatalf("status %v, err %v after %d requests; want the 429 of one request", resp, err, len(up.seen))
		}
		if s, _ := reg.Stats(t.Context(), "api"); !s.PenaltyUntil.Equal(up.start.Add(30 * time.Second)) {
			t.Errorf("penalty until %v, want 30 s", s.PenaltyUntil.Sub(up.start))
		}
	})
}

// A transport error is retried for an idempotent request only: the
// upstream may have acted on any other.
func TestRoundTripperRetriesTransportErrorsOfIdempotentRequests(t *testing.T) {
	for _, tc := range []struct {
		method string
		header string
		sends  int
	}{
		{http.MethodGet, "", 2},
		{http.MethodPut, "", 2},
		{http.MethodPost, "", 1},
		{http.MethodPost, "Idempotency-Key", 2},
		{http.MethodPatch, "", 1},
	} {
		synctest.Test(t, func(t *testing.T) {
			api, _ := bound(t)
			up := &upstream{start: time.Now(), answers: []func() (*http.Response, error){transportError, answer(200)}}
			client := &http.Client{Transport: pace.RoundTripper(up, api)}
			req, _ := http.NewRequest(tc.method, "http://upstream.test/x", strings.NewReader("b"))
			if tc.header != "" {
				req.Header.Set(tc.header, "k-1")
			}
			resp, err := client.Do(req)
			if len(up.seen) != tc.sends {
				t.Errorf("%s %s: %d requests sent, want %d", tc.method, tc.header, len(up.seen), tc.sends)
			}
			if tc.sends == 2 && (err != nil || resp.StatusCode != 200) {
				t.Errorf("%s %s: %v, %v; want the retry's 200", tc.method, tc.header, resp, err)
			}
			if tc.sends == 1 && err == nil {
				t.Errorf("%s %s: no error, want the transport's", tc.method, tc.header)
			}
		})
	}
}

// The limiter's refusals are the round trip's errors, and the request's
// body is closed though it was never sent.
func TestRoundTripperRefusalsAreErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := pace.NewRegistry(newStore(t))
		up := &upstream{start: time.Now(), answers: []func() (*http.Response, error){answer(200)}}
		client := &http.Client{Transport: pace.RoundTripper(up, pace.Define("nope").Bind(reg))}
		body := &trackedBody{Reader: strings.NewReader("x")}
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, "http://upstream.test/", body)
		_, err := client.Do(req)
		if !errors.Is(err, pace.ErrNoSuchLimiter) || len(up.seen) != 0 || !body.isClosed() {
			t.Errorf("err %v, %d sent, body closed %v; want ErrNoSuchLimiter, none, true", err, len(up.seen), body.isClosed())
		}
	})
}
