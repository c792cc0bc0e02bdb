package storetest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/testclock"
)

// run executes s against store, whose clock is clock, and returns the first
// mismatch between what the store answered and what the script expects.
func (s *script) run(ctx context.Context, store engine.Store, clock *testclock.Clock) error {
	eng := engine.New(store)
	_, whole := store.(engine.RequestStore)
	clock.SetMilli(s.epoch)
	for _, a := range s.actions {
		switch a.kind {
		case actAt:
			clock.SetMilli(s.epoch + a.ms)
		case actAdvance:
			clock.Advance(time.Duration(a.ms) * time.Millisecond)
		case actRequest:
			if err := s.runRequest(ctx, eng, a.req, whole); err != nil {
				line := a.line
				var le *lineError
				if errors.As(err, &le) {
					line, err = le.line, le.err
				}
				return fmt.Errorf("%s:%d: at %s: %w", s.name, line, s.fmtInstant(engine.UnixMilli(clock)), err)
			}
		}
	}
	return nil
}

// runRequest runs spec on eng. whole reports that the store runs whole
// requests itself (engine.RequestStore): such a store may answer a request
// failing at a later step with no results at all, as a server does, and
// the script's later lines check what the earlier steps did.
func (s *script) runRequest(ctx context.Context, eng *engine.Engine, spec *requestSpec, whole bool) error {
	req := &engine.Request{OperationID: spec.opID, Mode: spec.mode}
	errStep, errCmd := -1, (*commandSpec)(nil)
	for i, st := range spec.steps {
		step := engine.Step{Partition: st.partition}
		for _, cs := range st.cmds {
			step.Commands = append(step.Commands, cs.cmd)
			if cs.want != nil && cs.want.err != nil {
				errStep, errCmd = i, cs
			}
		}
		req.Steps = append(req.Steps, step)
	}

	resp, err := eng.Do(ctx, req)
	switch {
	case errCmd != nil && err == nil:
		return atLine(errCmd.line, "want error %s, got none", errCmd.want.errName)
	case errCmd != nil && !errors.Is(err, errCmd.want.err):
		return atLine(errCmd.line, "want error %s, got %v", errCmd.want.errName, err)
	case errCmd == nil && err != nil:
		return fmt.Errorf("unexpected error: %w", err)
	}
	completed := len(spec.steps)
	switch {
	case errCmd != nil && errCmd.want.err == engine.ErrInvalid:
		completed = 0 // validation runs before any step
	case errCmd != nil:
		// The request stopped at the failing step; every earlier step
		// completed and its results must be as expected.
		completed = errStep
	}
	var got []engine.StepResult
	if resp != nil {
		got = resp.Steps
	}
	if whole && resp == nil && err != nil {
		completed = 0
	}
	if len(got) != completed {
		return fmt.Errorf("the store returned %d step results, want %d (err: %v)", len(got), completed, err)
	}
	for i := range completed {
		if err := s.checkStep(spec.steps[i], &got[i]); err != nil {
			return err
		}
	}
	return nil
}

func (s *script) checkStep(st *stepSpec, got *engine.StepResult) error {
	if got.Skipped != st.skipped {
		return atLine(st.line, "step on %q: skipped = %t, want %t", st.partition, got.Skipped, st.skipped)
	}
	if got.Replayed != st.replayed {
		return atLine(st.line, "step on %q: replayed = %t, want %t", st.partition, got.Replayed, st.replayed)
	}
	if st.skipped {
		if len(got.Results) != 0 || got.Denied {
			return atLine(st.line, "skipped step holds %d results (denied %t)", len(got.Results), got.Denied)
		}
		return nil
	}
	if len(got.Results) != len(st.cmds) {
		return atLine(st.line, "step on %q has %d results for %d commands", st.partition, len(got.Results), len(st.cmds))
	}
	denied := false
	for i, cs := range st.cmds {
		want := cs.want.expected(&cs.cmd)
		denied = denied || !want.Allowed
		if !sameResult(&want, &got.Results[i]) {
			return atLine(cs.line, "%s\n\tgot:  %s\n\twant: %s", cs.cmd.Op, s.fmtResult(&got.Results[i]), s.fmtResult(&want))
		}
	}
	if got.Denied != denied {
		return atLine(st.line, "step on %q: denied = %t, want %t", st.partition, got.Denied, denied)
	}
	return nil
}

// expected returns the full Result w describes for c. A command over a single
// window or budget that lists no window outcome expects that window's
// outcome to be the command's own.
func (w *want) expected(c *engine.Command) engine.Result {
	r := w.res
	if !w.windows && len(c.Windows)+len(c.Budgets) == 1 {
		r.Windows = []engine.WindowResult{{Allowed: r.Allowed, Remaining: r.Remaining, ResetAt: r.ResetAt, RetryAfterMs: r.RetryAfterMs}}
	}
	return r
}

func sameResult(want, got *engine.Result) bool {
	a, b := *want, *got
	if len(a.Windows) == 0 && len(b.Windows) == 0 {
		a.Windows, b.Windows = nil, nil // no window outcome, however it is spelled
	}
	return reflect.DeepEqual(a, b)
}

// fmtResult renders r in the script's expectation syntax, instants relative
// to the epoch, so that a mismatch reads like the line to fix.
func (s *script) fmtResult(r *engine.Result) string {
	var b strings.Builder
	if r.Allowed {
		b.WriteString("ok")
	} else {
		b.WriteString("denied")
	}
	if r.Found {
		b.WriteString(" found")
	}
	if r.Value != "" {
		b.WriteString(" value=" + strconv.Quote(r.Value))
	}
	if r.Int != 0 {
		fmt.Fprintf(&b, " int=%d", r.Int)
	}
	if r.TTLMs != 0 {
		b.WriteString(" ttl=" + fmtMillis(r.TTLMs))
	}
	if r.Remaining != 0 {
		fmt.Fprintf(&b, " remaining=%d", r.Remaining)
	}
	if r.ResetAt != 0 {
		b.WriteString(" resetAt=" + s.fmtInstant(r.ResetAt))
	}
	if r.RetryAfterMs != 0 {
		b.WriteString(" retryAfter=" + fmtMillis(r.RetryAfterMs))
	}
	if r.At != 0 {
		b.WriteString(" at=" + s.fmtInstant(r.At))
	}
	for _, w := range r.Windows {
		verdict := "denied"
		if w.Allowed {
			verdict = "ok"
		}
		fmt.Fprintf(&b, " win=%s/%d/%s", verdict, w.Remaining, s.fmtInstant(w.ResetAt))
		if w.RetryAfterMs != 0 {
			b.WriteString("/" + fmtMillis(w.RetryAfterMs))
		}
	}
	return b.String()
}

func (s *script) fmtInstant(ms int64) string { return fmtMillis(ms - s.epoch) }

func fmtMillis(ms int64) string { return (time.Duration(ms) * time.Millisecond).String() }
