package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/wire"
)

// ErrUnavailable is engine.ErrUnavailable: the server could not be reached,
// timed out, refused the request (authentication, body bound, fairness
// quota, stop fence, failure) or answered something undecodable, or the
// client is off. Every such failure is one error wrapping ErrUnavailable
// and its cause — a *wire.Error when the server answered one — and the
// caller applies its family's fail mode (see FailMode). The outcome of the
// request is unknown: a retry must reuse its operation id.
//
// The other errors a client returns are those of a local store: a request
// outside the bounds is engine.ErrInvalid, and the server's 400 invalid,
// wrong_type and overflow answers and 409 conflict are engine.ErrInvalid,
// engine.ErrWrongType, engine.ErrOverflow and engine.ErrOperationConflict,
// each also wrapping the *wire.Error. A 400 or 409 without the server's
// problem document (from a proxy, say) is unavailability.
var ErrUnavailable = engine.ErrUnavailable

func unavailable(cause error) error {
	return fmt.Errorf("%w: %w", ErrUnavailable, cause)
}

// answerError maps a non-200 answer to the client's error.
func answerError(status int, body []byte) error {
	var p wire.Problem
	if json.Unmarshal(body, &p) != nil {
		p = wire.Problem{}
	}
	return problemError(status, p)
}

// envelopeError maps a non-200 answer to a whole envelope to the error of
// every call it carried. Nothing in the envelope ran, and no caller made a
// mistake of its own (its request was checked before it was sent), so
// every such answer is unavailability, the server's problem its cause.
func envelopeError(status int, body []byte) error {
	var p wire.Problem
	if json.Unmarshal(body, &p) != nil {
		p = wire.Problem{}
	}
	return unavailable(answerCause(status, p))
}

// answerCause returns the cause of a non-200 answer: its problem document
// as a *wire.Error, or the status when it had none.
func answerCause(status int, p wire.Problem) error {
	if p.Code == "" {
		return fmt.Errorf("unexpected answer %d %s", status, http.StatusText(status))
	}
	p.Status = status // trust the transport over the document
	return &wire.Error{Problem: p}
}

// problemError maps a non-200 status and its problem document (one
// without a code when there was none) to the client's error.
func problemError(status int, p wire.Problem) error {
	cause := answerCause(status, p)
	switch {
	case status == http.StatusBadRequest && p.Code == wire.CodeInvalid:
		return fmt.Errorf("%w: %w", engine.ErrInvalid, cause)
	case status == http.StatusBadRequest && p.Code == wire.CodeWrongType:
		return fmt.Errorf("%w: %w", engine.ErrWrongType, cause)
	case status == http.StatusBadRequest && p.Code == wire.CodeOverflow:
		return fmt.Errorf("%w: %w", engine.ErrOverflow, cause)
	case status == http.StatusConflict && p.Code == wire.CodeConflict:
		return fmt.Errorf("%w: %w", engine.ErrOperationConflict, cause)
	}
	return unavailable(cause)
}

// isUnavailable reports whether err calls for the fail mode.
func isUnavailable(err error) bool { return errors.Is(err, ErrUnavailable) }
