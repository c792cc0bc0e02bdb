package httplimit_test

import (
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"
	"pgregory.net/rapid"

	"github.com/sluicehq/sluice/httplimit"
)

// item parses a field holding a List of exactly one String Item.
func item(t tb, h http.Header, field string) (string, *httpsfv.Params) {
	t.Helper()
	values := h.Values(field)
	if len(values) == 0 {
		t.Fatalf("no %s field", field)
	}
	list, err := httpsfv.UnmarshalList(values)
	if err != nil {
		t.Fatalf("%s: %q does not parse as a Structured List: %v", field, values, err)
	}
	if len(list) != 1 {
		t.Fatalf("%s: %d members, want 1", field, len(list))
	}
	it, ok := list[0].(httpsfv.Item)
	if !ok {
		t.Fatalf("%s: member is %T, want an Item", field, list[0])
	}
	name, ok := it.Value.(string)
	if !ok {
		t.Fatalf("%s: item is %T, want a String", field, it.Value)
	}
	return name, it.Params
}

// param returns the Integer parameter k.
func param(t tb, p *httpsfv.Params, k string) int64 {
	t.Helper()
	v, ok := p.Get(k)
	if !ok {
		t.Fatalf("no %q parameter", k)
	}
	n, ok := v.(int64)
	if !ok {
		t.Fatalf("parameter %q is %T, want an Integer", k, v)
	}
	return n
}

// The draft-11 fields parse back as Structured Fields and carry the quota,
// the requests left and the seconds to the window's end, on allowed and
// rejected responses alike.
func TestIETFFields(t *testing.T) {
	mem, clock := newMem(t, 100)
	cfg := config(mem, 3, "/login")
	cfg.Quota.Name = `login "burst" \ 1`
	h, _ := stage(t, cfg)
	clock.Set(epoch.Add(20*time.Second + 500*time.Millisecond))

	for i, want := range []struct {
		code int
		r    int64
	}{{200, 2}, {200, 1}, {200, 0}, {429, 0}} {
		rec := serve(h, http.MethodPost, "/login", "192.0.2.1:1")
		if rec.Code != want.code {
			t.Fatalf("request %d answered %d, want %d", i, rec.Code, want.code)
		}
		name, p := item(t, rec.Header(), httplimit.FieldPolicy)
		if name != cfg.Quota.Name || param(t, p, "q") != 3 || param(t, p, "w") != 60 {
			t.Fatalf("request %d: RateLimit-Policy %q", i, rec.Header().Get(httplimit.FieldPolicy))
		}
		name, p = item(t, rec.Header(), httplimit.FieldRateLimit)
		// 39.5 s to the end of the minute, rounded up.
		if name != cfg.Quota.Name || param(t, p, "r") != want.r || param(t, p, "t") != 40 {
			t.Fatalf("request %d: RateLimit %q, want r=%d t=40", i, rec.Header().Get(httplimit.FieldRateLimit), want.r)
		}
		if rec.Header().Get(httplimit.FieldXLimit) != "" {
			t.Fatalf("request %d: X-RateLimit fields without HeadersX", i)
		}
	}
}

// The X-RateLimit dialect, alone or beside the draft fields, reports the
// limit, the requests left and the Unix second of the window's end.
func TestXFields(t *testing.T) {
	for _, headers := range []httplimit.Headers{httplimit.HeadersX, httplimit.HeadersX | httplimit.HeadersIETF} {
		mem, clock := newMem(t, 100)
		cfg := config(mem, 2, "/login")
		cfg.Headers = headers
		h, _ := stage(t, cfg)
		clock.Set(epoch.Add(5 * time.Second))
		reset := strconv.FormatInt(epoch.Add(time.Minute).Unix(), 10)
		for i, remaining := range []string{"1", "0", "0"} {
			rec := serve(h, http.MethodPost, "/login", "192.0.2.1:1")
			got := [3]string{rec.Header().Get(httplimit.FieldXLimit), rec.Header().Get(httplimit.FieldXRemaining), rec.Header().Get(httplimit.FieldXReset)}
			if got != [3]string{"2", remaining, reset} {
				t.Fatalf("headers %b request %d: X-RateLimit-Limit/Remaining/Reset %q, want [2 %s %s]", headers, i, got, remaining, reset)
			}
			_, hasIETF := rec.Header()[http.CanonicalHeaderKey(httplimit.FieldRateLimit)]
			if hasIETF != (headers&httplimit.HeadersIETF != 0) {
				t.Fatalf("headers %b: RateLimit present = %v", headers, hasIETF)
			}
		}
	}
}

// With no fields selected, a rejection still carries Retry-After.
func TestNoFields(t *testing.T) {
	mem, _ := newMem(t, 100)
	cfg := config(mem, 1, "/login")
	cfg.Headers = 0
	h, _ := stage(t, cfg)
	serve(h, http.MethodPost, "/login", "192.0.2.1:1")
	rec := serve(h, http.MethodPost, "/login", "192.0.2.1:1")
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "60" {
		t.Fatalf("answered %d, Retry-After %q", rec.Code, rec.Header().Get("Retry-After"))
	}
	for _, f := range []string{httplimit.FieldPolicy, httplimit.FieldRateLimit, httplimit.FieldXLimit} {
		if rec.Header().Get(f) != "" {
			t.Fatalf("%s written with Headers 0", f)
		}
	}
}

// For any window, limit and arrival times, a rejection's Retry-After is the
// seconds to the window's end rounded up, at least 1; a request sent that
// many seconds later succeeds, and one sent a second earlier is denied.
func TestRetryAfterProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		windowSec := rapid.Int64Range(1, 86_400).Draw(t, "windowSeconds")
		limit := rapid.Int64Range(1, 5).Draw(t, "limit")
		windowMs := windowSec * 1000
		// The start of some window, by the Unix epoch.
		start := (epoch.UnixMilli()/windowMs + rapid.Int64Range(0, 1000).Draw(t, "window")) * windowMs
		// The limit's requests arrive at sorted random instants; the
		// rejected one at or after the last of them, still in the window.
		var arrivals []int64
		for range limit {
			arrivals = append(arrivals, rapid.Int64Range(0, windowMs-1).Draw(t, "arrival"))
		}
		rejectedAt := rapid.Int64Range(0, windowMs-1).Draw(t, "rejected")
		for i := range arrivals {
			arrivals[i] = min(arrivals[i], rejectedAt)
		}
		slices.Sort(arrivals)

		mem, clock := newMem(t, 100)
		cfg := config(mem, limit, "/q")
		cfg.Quota.Window = time.Duration(windowSec) * time.Second
		h, _ := stage(t, cfg)
		at := func(ms int64) int {
			clock.SetMilli(start + ms)
			return serve(h, http.MethodGet, "/q", "192.0.2.1:1").Code
		}
		for _, a := range arrivals {
			if code := at(a); code != http.StatusOK {
				t.Fatalf("request at +%d ms answered %d", a, code)
			}
		}
		clock.SetMilli(start + rejectedAt)
		rec := serve(h, http.MethodGet, "/q", "192.0.2.1:1")
		if rec.Code != http.StatusTooManyRequests {
			t.Fatalf("request over the limit answered %d", rec.Code)
		}
		retryAfter, err := strconv.ParseInt(rec.Header().Get("Retry-After"), 10, 64)
		if err != nil {
			t.Fatalf("Retry-After %q: %v", rec.Header().Get("Retry-After"), err)
		}
		toEnd := windowMs - rejectedAt
		if want := (toEnd + 999) / 1000; retryAfter != want || retryAfter < 1 {
			t.Fatalf("Retry-After %d with %d ms to the window's end, want %d", retryAfter, toEnd, want)
		}
		if _, p := item(t, rec.Header(), httplimit.FieldRateLimit); param(t, p, "t") != retryAfter || param(t, p, "r") != 0 {
			t.Fatalf("RateLimit %q disagrees with Retry-After %d", rec.Header().Get(httplimit.FieldRateLimit), retryAfter)
		}
		if code := at(rejectedAt + (retryAfter-1)*1000); code != http.StatusTooManyRequests {
			t.Fatalf("a second before Retry-After: answered %d, want 429", code)
		}
		if code := at(rejectedAt + retryAfter*1000); code != http.StatusOK {
			t.Fatalf("at Retry-After: answered %d, want 200", code)
		}
	})
}
