package redisstore

import (
	"testing"

	"github.com/sluicehq/sluice/internal/redistest"
)

// TestLoneFormRefusesMalformedSpecs calls the batch code's lone form
// directly, as no store does, with specs and clocks the Go side never
// sends, and the batch form with such hits and clocks: numbers tonumber accepts in other spellings ("nan", "inf", "1e3",
// "0x10", fractions, negatives, beyond 2^53) and numbers outside the
// bounds algo.Limit.Validate and ValidateCost enforce. Every call must
// answer the INVALID failure and write nothing: a NaN limit, say, compares
// false against every count and would admit every hit. A well-formed spec
// in the same calls is admitted, so the refusals are the spec's. Both
// forms, the function library and the script.
func TestLoneFormRefusesMalformedSpecs(t *testing.T) {
	srv := redistest.Start(t)
	raw := srv.Client(t)
	if err := raw.FunctionLoadReplace(t.Context(), batchLibrary).Err(); err != nil {
		t.Fatal(err)
	}
	const prefix = "bad:{p}:k:"
	key := prefix + "w"
	bad := []struct{ clock, spec string }{
		{"", "0 1 1 nan 1000"},
		{"", "0 1 1 inf 1000"},
		{"", "0 1 1 -inf 1000"},
		{"", "0 1 1 10 nan"},
		{"", "0 1 1 10 inf"},
		{"", "0 nan 1 10 1000"},
		{"", "nan 1 1 10 1000"},
		{"", "0 1 nan 10 1000"},
		{"", "0 1 1e0 10 1000"},
		{"", "0 1 1 1e1 1000"},
		{"", "0 1 1 0x10 1000"},
		{"", "0 1 1 10.5 1000"},
		{"", "0 0.5 1 10 1000"},
		{"", "0 -1 1 10 1000"},
		{"", "0 0 1 10 1000"},
		{"", "0 11 1 10 1000"},
		{"", "-1 1 1 10 1000"},
		{"", "0 1 0 10 1000"},
		{"", "0 1 5 10 1000"},
		{"", "0 1 1 0 1000"},
		{"", "0 1 1 1099511627777 1000"},
		{"", "0 1 3 4097 1000"},
		{"", "0 1 1 99999999999999999999 1000"},
		{"", "0 1 1 10 0"},
		{"", "0 1 1 10 10368000001"},
		{"", "0 1 1 10"},
		{"", "0 1 1 10 1000 7"},
		{"", " 0 1 1 10 1000"},
		{"", ""},
		{"nan", "3600000 1 1 10 1000"},
		{"1e12", "3600000 1 1 10 1000"},
		{"9007199254740993", "3600000 1 1 10 1000"},
	}
	for _, form := range []string{"function", "script"} {
		call := func(clock, spec string) (any, error) {
			if form == "function" {
				return raw.Do(t.Context(), "fcall", functionName, 1, key, loneFormat, clock, prefix, spec).Result()
			}
			return raw.Do(t.Context(), "eval", batchScript, 1, key, loneFormat, clock, prefix, spec).Result()
		}
		for _, c := range bad {
			v, err := call(c.clock, c.spec)
			arr, _ := v.([]any)
			if err != nil || len(arr) != 3 || arr[0] != int64(5) {
				t.Errorf("%s: clock %q, spec %q: %v (%v), want the INVALID failure", form, c.clock, c.spec, v, err)
			}
			if n, err := raw.Del(t.Context(), key).Result(); err != nil || n != 0 {
				t.Errorf("%s: clock %q, spec %q wrote the record (%d, %v)", form, c.clock, c.spec, n, err)
			}
		}
		// The batch form reads a hit's numbers one argument each: the same
		// refusals, and a well-formed clock and hit are admitted.
		batch := func(clock string, hit ...any) (any, error) {
			args := append([]any{scriptFormat, clock, prefix, "", "86400000", "0", "1", "hit"}, hit...)
			if form == "function" {
				return raw.Do(t.Context(), append([]any{"fcall", functionName, 1, key}, args...)...).Result()
			}
			return raw.Do(t.Context(), append([]any{"eval", batchScript, 1, key}, args...)...).Result()
		}
		for _, c := range []struct {
			clock string
			hit   []any
		}{
			{"", []any{"1", "1", "1", "1", "nan", "1000"}},
			{"", []any{"1", "1", "1", "1", "10", "inf"}},
			{"", []any{"nan", "1", "1", "1", "10", "1000"}},
			{"", []any{"1", "1", "1", "1", "10.5", "1000"}},
			{"", []any{"0", "1", "1", "1", "10", "1000"}},
			{"", []any{"11", "1", "1", "1", "10", "1000"}},
			{"", []any{"1", "1", "1", "3", "4097", "1000"}},
			{"", []any{"1", "1", "1", "5", "10", "1000"}},
			{"", []any{"1", "1", "2", "1", "10", "1000"}},
			{"", []any{"1", "5", "1", "1", "10", "1000"}},
			{"", []any{"1", "0", "1", "1", "10", "1000"}},
			{"nan", []any{"1", "1", "1", "1", "10", "1000"}},
		} {
			v, err := batch(c.clock, c.hit...)
			arr, _ := v.([]any)
			if err != nil || len(arr) != 3 || arr[0] != int64(5) {
				t.Errorf("%s: batch, clock %q, hit %v: %v (%v), want the INVALID failure", form, c.clock, c.hit, v, err)
			}
			if n, err := raw.Del(t.Context(), key).Result(); err != nil || n != 0 {
				t.Errorf("%s: batch, clock %q, hit %v wrote the record (%d, %v)", form, c.clock, c.hit, n, err)
			}
		}
		v, err := batch("1000000", "1", "1", "1", "1", "10", "1000")
		if arr, _ := v.([]any); err != nil || len(arr) != 5 || arr[0] != int64(0) || arr[1] != int64(1) || arr[2] != int64(9) {
			t.Fatalf("%s: a well-formed batch of a lone hit answered %v (%v)", form, v, err)
		}
		if err := raw.Del(t.Context(), key).Err(); err != nil {
			t.Fatal(err)
		}
		// A joint step's clock, likewise.
		jointArgs := []any{"joint 1", "nan", "0"}
		if form == "function" {
			v, err = raw.Do(t.Context(), append([]any{"fcall", functionName, 0}, jointArgs...)...).Result()
		} else {
			v, err = raw.Do(t.Context(), append([]any{"eval", batchScript, 0}, jointArgs...)...).Result()
		}
		if arr, _ := v.([]any); err != nil || len(arr) != 3 || arr[0] != int64(5) {
			t.Errorf("%s: a joint step with clock \"nan\" answered %v (%v), want the INVALID failure", form, v, err)
		}
		v, err = call("", "0 1 1 10 1000")
		if arr, _ := v.([]any); err != nil || len(arr) != 5 || arr[0] != int64(0) || arr[1] != int64(1) || arr[2] != int64(9) {
			t.Fatalf("%s: a well-formed lone hit answered %v (%v)", form, v, err)
		}
		if err := raw.Del(t.Context(), key).Err(); err != nil {
			t.Fatal(err)
		}
	}
}
