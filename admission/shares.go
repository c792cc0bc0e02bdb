package admission

import (
	"errors"
	"fmt"
	"strings"

	"github.com/sluicehq/sluice/wire"
)

// The axes of a shares string (see ParseShares), besides the prefix tiers
// named as on the wire (wire.TierV4Slash24, wire.TierV6Slash56,
// wire.TierV6Slash48).
const (
	AxisSource    = "source"
	AxisPrincipal = "principal"
)

// axes lists every axis a shares string may name, in the order of Shares.
var axes = []string{AxisSource, AxisPrincipal, wire.TierV4Slash24, wire.TierV6Slash56, wire.TierV6Slash48}

// field returns the divisor of axis in s, or nil for an unknown axis.
func (s *Shares) field(axis string) *int64 {
	switch axis {
	case AxisSource:
		return &s.Source
	case AxisPrincipal:
		return &s.Principal
	case wire.TierV4Slash24:
		return &s.V4Slash24
	case wire.TierV6Slash56:
		return &s.V6Slash56
	case wire.TierV6Slash48:
		return &s.V6Slash48
	}
	return nil
}

// over returns s with every divisor it leaves unset (zero) taken from base.
func (s Shares) over(base Shares) Shares {
	for _, axis := range axes {
		if f := s.field(axis); *f == 0 {
			*f = *base.field(axis)
		}
	}
	return s
}

// ParseShares parses the divisors of the fairness axes, as the --shares
// flag gives them: comma-separated axis=divisor entries such as
// "source=20,principal=20,v4/24=5,v6/56=10,v6/48=5". The axes are source,
// principal and the prefix tiers v4/24, v6/56 and v6/48; each may be named
// once, and a divisor is a whole number of at least 1. An axis left out
// keeps its default (zero in the result). An empty string sets nothing.
func ParseShares(s string) (Shares, error) {
	var out Shares
	if strings.TrimSpace(s) == "" {
		return out, nil
	}
	for entry := range strings.SplitSeq(s, ",") {
		axis, n, err := parseShareEntry(entry)
		if err != nil {
			return Shares{}, err
		}
		if err := out.set(axis, n); err != nil {
			return Shares{}, err
		}
	}
	return out, nil
}

// ParseFamilyShares parses per-family divisors, as the --family-shares flag
// gives them: comma-separated family.axis=divisor entries such as
// "replay.source=10,replay.principal=40" (the axis follows the family
// name's last dot, so family names may hold dots). The axes and divisors
// are those of ParseShares. Axes a family's entries leave out take the
// shares of every family (Config.Shares). Whether each family is
// configured is checked by Config.Validate.
func ParseFamilyShares(s string) (map[string]Shares, error) {
	out := map[string]Shares{}
	if strings.TrimSpace(s) == "" {
		return out, nil
	}
	for entry := range strings.SplitSeq(s, ",") {
		key, n, err := parseShareEntry(entry)
		if err != nil {
			return nil, err
		}
		i := strings.LastIndexByte(key, '.')
		if i < 0 {
			return nil, fmt.Errorf("family share %q: want family.axis=divisor", strings.TrimSpace(entry))
		}
		family, axis := key[:i], key[i+1:]
		if err := validName(family); err != nil {
			return nil, fmt.Errorf("family share %q: %w", strings.TrimSpace(entry), err)
		}
		sh := out[family]
		if err := sh.set(axis, n); err != nil {
			return nil, fmt.Errorf("family %q: %w", family, err)
		}
		out[family] = sh
	}
	return out, nil
}

// parseShareEntry splits one "key=divisor" entry.
func parseShareEntry(entry string) (string, int64, error) {
	entry = strings.TrimSpace(entry)
	if entry == "" {
		return "", 0, errors.New("empty share entry (a stray comma?)")
	}
	key, num, ok := strings.Cut(entry, "=")
	if !ok {
		return "", 0, fmt.Errorf("share %q: want axis=divisor", entry)
	}
	key, num = strings.TrimSpace(key), strings.TrimSpace(num)
	n, ok := parseCount(num)
	if !ok || n < 1 {
		return "", 0, fmt.Errorf("share %q: divisor %q is not a whole number of at least 1", entry, num)
	}
	return key, n, nil
}

// set sets the divisor of axis once.
func (s *Shares) set(axis string, n int64) error {
	f := s.field(axis)
	if f == nil {
		return fmt.Errorf("unknown share axis %q (want %s)", axis, strings.Join(axes, ", "))
	}
	if *f != 0 {
		return fmt.Errorf("share axis %q given twice", axis)
	}
	*f = n
	return nil
}
