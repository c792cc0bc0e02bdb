package wire

import (
	"errors"
	"fmt"
	"net/http"
)

// Code is the machine-readable code of an error answer.
type Code string

// The error codes, each with exactly one HTTP status (see Status).
const (
	CodeInvalid      Code = "invalid"           // 400: malformed or out-of-bounds request (only after authentication)
	CodeUnauthorized Code = "unauthorized"      // 401: missing, bad or stale signature or operator token
	CodeWrongType    Code = "wrong_type"        // 400: a command met a key holding another kind of record; its batch changed nothing
	CodeOverflow     Code = "overflow"          // 400: a counter would overflow; its batch changed nothing
	CodeConflict     Code = "conflict"          // 409: operation id reused with different commands
	CodeTooLarge     Code = "too_large"         // 413: body over MaxBody
	CodeLimited      Code = "guard_limited"     // 429: an admission fairness quota denied the request
	CodeUnavailable  Code = "guard_unavailable" // 503: misconfigured or failing server; Reason says why
	CodeStopped      Code = "guard_stopped"     // 503: the operator stop fence (or a family stop) is set
	CodeNotFound     Code = "not_found"         // 404: unknown path
	CodeMethod       Code = "method_not_allowed"

	// CodeNoSuchLimiter answers a request naming a limiter that was never
	// configured (404), so a client tells it from a server without the
	// limiters endpoints (404 not_found).
	CodeNoSuchLimiter Code = "no_such_limiter"
	// CodeNoSuchPolicy answers a request naming a route quota policy that
	// is not stored (404), for the same reason.
	CodeNoSuchPolicy Code = "no_such_policy"
)

// Status returns the HTTP status of c.
func (c Code) Status() int {
	switch c {
	case CodeInvalid, CodeWrongType, CodeOverflow:
		return http.StatusBadRequest
	case CodeUnauthorized:
		return http.StatusUnauthorized
	case CodeConflict:
		return http.StatusConflict
	case CodeTooLarge:
		return http.StatusRequestEntityTooLarge
	case CodeLimited:
		return http.StatusTooManyRequests
	case CodeNotFound, CodeNoSuchLimiter, CodeNoSuchPolicy:
		return http.StatusNotFound
	case CodeMethod:
		return http.StatusMethodNotAllowed
	}
	return http.StatusServiceUnavailable
}

// Problem is the body of every error answer, an RFC 9457 problem document
// (Content-Type application/problem+json) extended with Code and Reason.
type Problem struct {
	Type   string `json:"type"`   // "about:blank"
	Title  string `json:"title"`  // the status text
	Status int    `json:"status"` // the HTTP status
	Code   Code   `json:"code"`
	// Reason explains the error for a person; it never echoes secrets or
	// raw identities.
	Reason string `json:"reason,omitempty"`
}

// NewProblem returns the problem document for code with reason.
func NewProblem(code Code, reason string) Problem {
	st := code.Status()
	return Problem{Type: "about:blank", Title: http.StatusText(st), Status: st, Code: code, Reason: reason}
}

// Error is an error answer received by a client. It is errors.Is-able
// against the sentinels below by code.
type Error struct {
	Problem
}

func (e *Error) Error() string {
	if e.Reason != "" {
		return fmt.Sprintf("sluice: %d %s: %s", e.Status, e.Code, e.Reason)
	}
	return fmt.Sprintf("sluice: %d %s", e.Status, e.Code)
}

// Is matches another *Error with the same code.
func (e *Error) Is(target error) bool {
	var t *Error
	return errors.As(target, &t) && t.Code == e.Code
}

// Sentinels for errors.Is on a received *Error.
var (
	ErrInvalid      error = &Error{Problem{Code: CodeInvalid}}
	ErrUnauthorized error = &Error{Problem{Code: CodeUnauthorized}}
	ErrConflict     error = &Error{Problem{Code: CodeConflict}}
	ErrTooLarge     error = &Error{Problem{Code: CodeTooLarge}}
	ErrLimited      error = &Error{Problem{Code: CodeLimited}}
	ErrUnavailable  error = &Error{Problem{Code: CodeUnavailable}}
	ErrStopped      error = &Error{Problem{Code: CodeStopped}}

	// ErrNoSuchLimiter matches a 404 no_such_limiter answer.
	ErrNoSuchLimiter error = &Error{Problem{Code: CodeNoSuchLimiter}}
	// ErrNoSuchPolicy matches a 404 no_such_policy answer.
	ErrNoSuchPolicy error = &Error{Problem{Code: CodeNoSuchPolicy}}
)
