package wire

import (
	"errors"
	"fmt"
)

// MaxFamily is the longest family name; MaxIdentity the longest hashed
// source or principal.
const (
	MaxFamily   = 64
	MaxIdentity = 128
)

// Validate checks the envelope of r and then every bound of its steps (see
// engine.Request.Validate).
func (r *Request) Validate() error {
	if r.OperationID == "" {
		return errors.New("operationId is required")
	}
	if r.Family == "" || len(r.Family) > MaxFamily {
		return fmt.Errorf("family of %d bytes (want 1…%d)", len(r.Family), MaxFamily)
	}
	if len(r.Source) > MaxIdentity || len(r.Principal) > MaxIdentity {
		return fmt.Errorf("source or principal over %d bytes (send hashes, never raw identities)", MaxIdentity)
	}
	if err := r.validateTiers(); err != nil {
		return err
	}
	return r.Engine().Validate()
}

// validateTiers checks that the source tiers are those of one address
// family and come with a source.
func (r *Request) validateTiers() error {
	if len(r.SourceTiers) == 0 {
		return nil
	}
	if r.Source == "" || r.Source == UnknownSource {
		return errors.New("sourceTiers without a source")
	}
	v4, v6 := 0, 0
	for tier, h := range r.SourceTiers {
		switch tier {
		case TierV4Slash24:
			v4++
		case TierV6Slash56, TierV6Slash48:
			v6++
		default:
			return fmt.Errorf("unknown source tier %q (want %s, %s or %s)", tier, TierV4Slash24, TierV6Slash56, TierV6Slash48)
		}
		if h == "" || len(h) > MaxIdentity {
			return fmt.Errorf("source tier %q of %d bytes (want 1…%d)", tier, len(h), MaxIdentity)
		}
	}
	if v4 > 0 && v6 > 0 {
		return errors.New("sourceTiers mix IPv4 and IPv6 tiers")
	}
	return nil
}
