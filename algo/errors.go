package algo

import "errors"

// Errors returned by this package. Callers branch on them with errors.Is.
var (
	// ErrInvalid reports an argument outside its documented bounds: a
	// non-positive limit, window or cost, a cost above the limit, or a value
	// large enough to overflow the arithmetic.
	ErrInvalid = errors.New("algo: invalid argument")
	// ErrOverflow reports a counter addition that would leave the int64
	// range. Counters never wrap.
	ErrOverflow = errors.New("algo: integer overflow")
	// ErrCorrupt reports a state encoding that cannot be decoded.
	ErrCorrupt = errors.New("algo: corrupt state")
)
