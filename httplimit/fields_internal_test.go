package httplimit

import (
	"testing"

	"github.com/dunglas/httpsfv"
	"pgregory.net/rapid"
)

// The RateLimit field appended by hand is exactly what httpsfv serializes
// for the same quota name and parameters.
func TestRateLimitFieldMatchesHTTPSFV(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		name := rapid.OneOf(
			rapid.StringMatching(`[ -~]{0,64}`),
			rapid.StringMatching(`["\\a]{0,64}`), // escapes double the length
		).Draw(t, "name")
		remaining := rapid.Int64Range(0, 1<<40).Draw(t, "remaining")
		reset := rapid.Int64Range(0, 120*24*3600).Draw(t, "reset")

		item, err := nameItem(name)
		if err != nil {
			t.Fatalf("name %q: %v", name, err)
		}
		got := string(rateLimitField(nil, item, remaining, reset))

		p := httpsfv.NewParams()
		p.Add("r", remaining)
		p.Add("t", reset)
		want, err := httpsfv.Marshal(httpsfv.List{httpsfv.Item{Value: name, Params: p}})
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Fatalf("got %s, httpsfv serializes %s", got, want)
		}
		if len(got) > maxRateLimitField {
			t.Fatalf("%d bytes overflow writeFields' buffer: %s", len(got), got)
		}
	})
}

// The longest field fits writeFields' stack buffer.
func TestRateLimitFieldBound(t *testing.T) {
	name := ""
	for range MaxQuotaNameLen {
		name += `"`
	}
	item, err := nameItem(name)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(rateLimitField(nil, item, 1<<40, int64(MaxWindow.Seconds()))); n != maxRateLimitField {
		t.Fatalf("longest field is %d bytes, maxRateLimitField %d", n, maxRateLimitField)
	}
}
