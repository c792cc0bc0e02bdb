package wire_test

import (
	"testing"

	"github.com/sluicehq/sluice/wire"
)

func TestPrefersMinimal(t *testing.T) {
	for _, tc := range []struct {
		values []string
		want   bool
	}{
		{nil, false},
		{[]string{""}, false},
		{[]string{"return=minimal"}, true},
		{[]string{"RETURN=Minimal"}, true},
		{[]string{`return="minimal"`}, true},
		{[]string{" return = minimal ; foo=bar"}, true},
		{[]string{"respond-async, wait=10, return=minimal"}, true},
		{[]string{"wait=10", "return=minimal"}, true},
		{[]string{"return=representation"}, false},
		{[]string{"return"}, false},
		{[]string{"minimal"}, false},
		{[]string{"x-return=minimal"}, false},
		{[]string{"return=minimal-ish"}, false},
		{[]string{`return="minimal`}, false},
		{[]string{"foo; return=minimal"}, false}, // a parameter, not a preference
	} {
		if got := wire.PrefersMinimal(tc.values); got != tc.want {
			t.Errorf("PrefersMinimal(%q) = %v, want %v", tc.values, got, tc.want)
		}
	}
}
