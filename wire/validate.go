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
	return r.Engine().Validate()
}
