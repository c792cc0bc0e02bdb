package engine

import "errors"

// Sentinel errors. Every error the engine and the stores return wraps one of
// these; branch on them with errors.Is. A denial is a result, never an error.
var (
	// ErrInvalid reports a request outside the documented bounds or with a
	// malformed command. Nothing was changed.
	ErrInvalid = errors.New("sluice: invalid request")
	// ErrWrongType reports a command applied to a key holding another kind
	// of record (a counter incremented where a window lives, a value that
	// is not an integer). The whole batch was rolled back.
	ErrWrongType = errors.New("sluice: wrong record type")
	// ErrOverflow reports a counter that would leave the int64 range. The
	// whole batch was rolled back.
	ErrOverflow = errors.New("sluice: integer overflow")
	// ErrOperationConflict reports an operation id reused with different
	// commands within the replay window. Nothing was changed.
	ErrOperationConflict = errors.New("sluice: operation id reused with different commands")
	// ErrCapacity reports a store that refuses a new key because it is full.
	// Live quotas are never evicted to make room. Nothing was changed.
	ErrCapacity = errors.New("sluice: store at capacity")
	// ErrCorrupt reports stored state that cannot be decoded, or a store
	// whose answer does not match what it ran (a result per command, a
	// step result per step).
	ErrCorrupt = errors.New("sluice: corrupt stored state")
	// ErrClosed reports a call on a closed store.
	ErrClosed = errors.New("sluice: store closed")
	// ErrUnavailable reports a store that could not be reached or failed
	// (I/O error, timeout). The outcome of the batch is unknown; a caller
	// retrying must reuse the operation id.
	ErrUnavailable = errors.New("sluice: store unavailable")
)
