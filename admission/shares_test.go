package admission

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/wire"
)

func TestParseShares(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    Shares
		wantErr string
	}{
		{in: "", want: Shares{}},
		{in: "  ", want: Shares{}},
		{in: "source=20,principal=20,v4/24=5,v6/56=10,v6/48=5", want: Shares{Source: 20, Principal: 20, V4Slash24: 5, V6Slash56: 10, V6Slash48: 5}},
		{in: " source = 10 , v6/48=2 ", want: Shares{Source: 10, V6Slash48: 2}},
		{in: "principal=1", want: Shares{Principal: 1}},
		{in: "source=0", wantErr: "at least 1"},
		{in: "source=-5", wantErr: "at least 1"},
		{in: "source=x", wantErr: "not a whole number"},
		{in: "source=+5", wantErr: "not a whole number"},
		{in: "source=1.5", wantErr: "not a whole number"},
		{in: "source=", wantErr: "not a whole number"},
		{in: "source=99999999999999999999", wantErr: "not a whole number"},
		{in: "source", wantErr: "want axis=divisor"},
		{in: "src=20", wantErr: `unknown share axis "src"`},
		{in: "v4/32=20", wantErr: "unknown share axis"},
		{in: "Source=20", wantErr: "unknown share axis"},
		{in: "source=20,source=10", wantErr: "given twice"},
		{in: "source=20,", wantErr: "empty share entry"},
		{in: ",source=20", wantErr: "empty share entry"},
	} {
		got, err := ParseShares(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParseShares(%q) = %+v, %v; want an error about %q", tc.in, got, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseShares(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
}

func TestParseFamilyShares(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    map[string]Shares
		wantErr string
	}{
		{in: "", want: map[string]Shares{}},
		{in: "replay.source=10,replay.principal=40", want: map[string]Shares{"replay": {Source: 10, Principal: 40}}},
		{in: "replay.v6/48=4, password.source=50", want: map[string]Shares{"replay": {V6Slash48: 4}, "password": {Source: 50}}},
		// The axis follows the last dot: family names may hold dots.
		{in: "web.v2.source=5", want: map[string]Shares{"web.v2": {Source: 5}}},
		{in: "replay=10", wantErr: "want family.axis=divisor"},
		{in: ".source=10", wantErr: "family name"},
		{in: "re play.source=10", wantErr: "family name"},
		{in: "replay.src=10", wantErr: "unknown share axis"},
		{in: "replay.source=0", wantErr: "at least 1"},
		{in: "replay.source=ten", wantErr: "not a whole number"},
		{in: "replay.source=10,replay.source=20", wantErr: "given twice"},
		{in: "replay.source=10,,", wantErr: "empty share entry"},
	} {
		got, err := ParseFamilyShares(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParseFamilyShares(%q) = %+v, %v; want an error about %q", tc.in, got, err, tc.wantErr)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseFamilyShares(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
}

// TestFamilySharesOverrideAxisByAxis: a family's own shares replace only
// the axes they name; the rest come from the shares of every family, then
// the defaults.
func TestFamilySharesOverrideAxisByAxis(t *testing.T) {
	fx := newFixture(t)
	cfg := DefaultConfig()
	cfg.Families = []string{"replay", "web"}
	var err error
	if cfg.Shares, err = ParseShares("source=10,v6/48=4"); err != nil {
		t.Fatal(err)
	}
	if cfg.FamilyShares, err = ParseFamilyShares("replay.principal=40,replay.v6/48=2"); err != nil {
		t.Fatal(err)
	}
	a := fx.admitter(cfg)
	want := map[string]Shares{
		"replay": {Source: 10, Principal: 40, V4Slash24: DefaultV4Slash24Divisor, V6Slash56: DefaultV6Slash56Divisor, V6Slash48: 2},
		"web":    {Source: 10, Principal: DefaultIdentityDivisor, V4Slash24: DefaultV4Slash24Divisor, V6Slash56: DefaultV6Slash56Divisor, V6Slash48: 4},
	}
	for name, w := range want {
		if got := a.fams[name].shares; got != w {
			t.Errorf("%s shares %+v, want %+v", name, got, w)
		}
	}
}

// TestFamilySharesTakeEffect: a family share set by its string changes
// what one source may spend.
func TestFamilySharesTakeEffect(t *testing.T) {
	fx := newFixture(t)
	cfg := fairConfig(switches{})
	var err error
	if cfg.FamilyShares, err = ParseFamilyShares(DefaultFamily + ".source=40"); err != nil {
		t.Fatal(err)
	}
	// 2,000 / 40 = 50 for one source bucket.
	if got := spend(t, fx.admitter(cfg), []*wire.Request{fairRPC("s1", "", nil)}); got != 50 {
		t.Fatalf("one source spent %d, want 50", got)
	}
}

func TestAddedProblemRefusesEverything(t *testing.T) {
	fx := newFixture(t)
	cfg := DefaultConfig()
	cfg.AddProblem(errors.New(`daily budget "lots" is not a whole number`))
	cfg.AddProblem(nil)
	a := fx.admitter(cfg)
	err := a.Admit(context.Background(), rpc(DefaultFamily, 1))
	if code(err) != wire.CodeUnavailable || !strings.Contains(err.Error(), `daily budget "lots"`) {
		t.Fatalf("Admit = %v, want guard_unavailable naming the problem", err)
	}
	if a.Err() == nil || cfg.Validate() == nil {
		t.Fatal("the problem is not reported by Err and Validate")
	}
	if fx.store.Len() != 0 {
		t.Fatalf("a refused RPC wrote %d records", fx.store.Len())
	}
}
