package redisstore

import (
	"fmt"
	"strconv"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/engine"
)

// The script's failure codes (see lua/prelude.lua) and the sentinels they
// map to. A failure reply means the script wrote nothing.
var failures = map[int64]error{
	1: engine.ErrWrongType,
	2: engine.ErrOverflow,
	3: engine.ErrOperationConflict,
	4: engine.ErrCorrupt,
	5: engine.ErrInvalid,
}

// replyError reports a reply that does not have the script's shape. The
// script may have run, so the batch's outcome is unknown.
func replyError(format string, args ...any) error {
	return fmt.Errorf("%w: redisstore: malformed script reply: %s", engine.ErrUnavailable, fmt.Sprintf(format, args...))
}

// decodeReply decodes the script's reply into out (reset by the caller).
// Every element is type-checked: a reply of any other shape is an error,
// never a result.
func decodeReply(v any, b *engine.Batch, out *engine.StepResult) error {
	arr, code, err := replyStatus(v)
	if err != nil {
		return err
	}
	if code != 0 {
		return decodeFailure(code, arr, b)
	}
	if isLone(b) {
		return decodeLone(arr, out)
	}
	if len(arr) != 3+len(b.Commands) {
		return replyError("%d elements for %d commands", len(arr), len(b.Commands))
	}
	replayed, err := boolean(arr[1])
	if err != nil {
		return replyError("replayed: %v", err)
	}
	denied, err := boolean(arr[2])
	if err != nil {
		return replyError("denied: %v", err)
	}
	out.Replayed, out.Denied = replayed, denied
	for i := range b.Commands {
		if err := decodeResult(arr[3+i], nextResult(out)); err != nil {
			return replyError("result %d: %v", i, err)
		}
	}
	return nil
}

// replyStatus returns a reply as the array it must be, and its status:
// 0, or a failure code.
func replyStatus(v any) ([]any, int64, error) {
	arr, ok := v.([]any)
	if !ok || len(arr) == 0 {
		return nil, 0, replyError("%T, want an array", v)
	}
	code, ok := arr[0].(int64)
	if !ok {
		return nil, 0, replyError("status %T", arr[0])
	}
	return arr, code, nil
}

// decodeLone decodes the compact reply of a lone hit of one window:
// {0, allowed, the window's remaining, resetAt and retryAfter}. The hit's
// own figures are those a hit of one window derives from its window's, as
// the script's cmdHit does: remaining at most algo.MaxLimit, resetAt and
// retryAfter at least 0.
func decodeLone(arr []any, out *engine.StepResult) error {
	if len(arr) != 5 {
		return replyError("%d elements for a lone hit, want 5", len(arr))
	}
	allowed, err := boolean(arr[1])
	if err != nil {
		return replyError("allowed: %v", err)
	}
	var f [3]int64
	for i := range f {
		var ok bool
		if f[i], ok = arr[2+i].(int64); !ok {
			return replyError("lone hit field %d: %T, want an integer", 2+i, arr[2+i])
		}
	}
	out.Denied = !allowed
	r := nextResult(out)
	r.Allowed, r.Remaining, r.ResetAt, r.RetryAfterMs = allowed, min(algo.MaxLimit, f[0]), max(0, f[1]), max(0, f[2])
	r.Windows = append(r.Windows, engine.WindowResult{Allowed: allowed, Remaining: f[0], ResetAt: f[1], RetryAfterMs: f[2]})
	return nil
}

// decodeFailure turns a failure reply {code, command, message} into the
// engine's error, naming the failing command as the engine's executor does.
func decodeFailure(code int64, arr []any, b *engine.Batch) error {
	sentinel, ok := failures[code]
	if !ok || len(arr) != 3 {
		return replyError("failure %d with %d elements", code, len(arr))
	}
	idx, ok1 := arr[1].(int64)
	msg, ok2 := arr[2].(string)
	if !ok1 || !ok2 {
		return replyError("failure %d: %T, %T", code, arr[1], arr[2])
	}
	if sentinel == engine.ErrOperationConflict {
		return sentinel
	}
	if idx >= 1 && idx <= int64(len(b.Commands)) {
		return fmt.Errorf("command %d (%s): %w: %s", idx-1, b.Commands[idx-1].Op, sentinel, msg)
	}
	return fmt.Errorf("%w: %s", sentinel, msg)
}

// decodeResult decodes one result:
// {allowed, found, remaining, resetAt, retryAfter, at, ttl, int, value, windows}.
func decodeResult(v any, r *engine.Result) error {
	f, ok := v.([]any)
	if !ok || len(f) != 10 {
		return fmt.Errorf("%T of %d elements, want 10", v, len(f))
	}
	var err error
	if r.Allowed, err = boolean(f[0]); err != nil {
		return err
	}
	if r.Found, err = boolean(f[1]); err != nil {
		return err
	}
	for i, dst := range []*int64{&r.Remaining, &r.ResetAt, &r.RetryAfterMs, &r.At, &r.TTLMs} {
		if *dst, ok = f[2+i].(int64); !ok {
			return fmt.Errorf("field %d: %T, want an integer", 2+i, f[2+i])
		}
	}
	n, ok := f[7].(string)
	if !ok {
		return fmt.Errorf("int: %T, want a string", f[7])
	}
	if r.Int, err = strconv.ParseInt(n, 10, 64); err != nil {
		return fmt.Errorf("int: %w", err)
	}
	if r.Value, ok = f[8].(string); !ok {
		return fmt.Errorf("value: %T, want a string", f[8])
	}
	w, ok := f[9].([]any)
	if !ok || len(w)%4 != 0 || len(w) > 4*engine.MaxWindowsPerHit {
		return fmt.Errorf("windows: %T of %d elements", f[9], len(w))
	}
	for i := 0; i < len(w); i += 4 {
		var wr engine.WindowResult
		if wr.Allowed, err = boolean(w[i]); err != nil {
			return err
		}
		for j, dst := range []*int64{&wr.Remaining, &wr.ResetAt, &wr.RetryAfterMs} {
			if *dst, ok = w[i+1+j].(int64); !ok {
				return fmt.Errorf("window %d field %d: %T, want an integer", i/4, j+1, w[i+1+j])
			}
		}
		r.Windows = append(r.Windows, wr)
	}
	return nil
}

func boolean(v any) (bool, error) {
	switch v {
	case int64(0):
		return false, nil
	case int64(1):
		return true, nil
	}
	return false, fmt.Errorf("%v (%T), want 0 or 1", v, v)
}

func resetStep(out *engine.StepResult) {
	out.Skipped, out.Replayed, out.Denied = false, false, false
	out.Results = out.Results[:0]
}

// nextResult appends a zero Result to out, reusing the capacity of the
// slot's previous Windows slice so a reused StepResult allocates no new
// window slices.
func nextResult(out *engine.StepResult) *engine.Result {
	n := len(out.Results)
	if n < cap(out.Results) {
		out.Results = out.Results[:n+1]
		r := &out.Results[n]
		*r = engine.Result{Windows: r.Windows[:0]}
		return r
	}
	out.Results = append(out.Results, engine.Result{})
	return &out.Results[n]
}
