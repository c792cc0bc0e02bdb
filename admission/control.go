package admission

import (
	"context"
	"fmt"
	"slices"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/wire"
)

// FamilyState is one family's admission state, as GET /control/state
// reports it.
type FamilyState struct {
	Family    string `json:"family"`
	Day       string `json:"day"`
	Allowance int64  `json:"allowance"`
	// Used is the allowance leased today by every server (the durable
	// counter); LeasedLeft is what this server still holds unspent.
	Used       int64  `json:"used"`
	LeasedLeft int64  `json:"leasedLeft"`
	Stopped    bool   `json:"stopped"`
	Reason     string `json:"reason,omitempty"`
	// OperatorStop reports a stop set by an operator (until resumed), as
	// opposed to a budget stop (until the next UTC day).
	OperatorStop bool `json:"operatorStop,omitempty"`
}

// State returns every family's state, sorted by name.
func (a *Admitter) State(ctx context.Context) ([]FamilyState, error) {
	if a.invalid != "" {
		return nil, a.Err()
	}
	day := dayOf(a.now())
	k := a.keysOf(day)
	names := make([]string, 0, len(a.fams))
	for name := range a.fams {
		names = append(names, name)
	}
	slices.Sort(names)
	out := make([]FamilyState, 0, len(names))
	for _, name := range names {
		f := a.fams[name]
		st, err := a.reloadStop(ctx, f, a.now(), day) // the stored state, afresh
		if err != nil {
			return nil, a.unavailable("reading the family stop", err)
		}
		var res engine.StepResult
		if err := a.eng.ApplyReserved(ctx, familyPartition(name), &res, engine.Get(k.used)); err != nil {
			return nil, a.unavailable("reading the family usage", err)
		}
		used, _ := parseInt(res.Results[0].Value)
		left := int64(0)
		if c := f.cur.Load(); c.day == day {
			left = c.left.Load()
		}
		out = append(out, FamilyState{
			Family: name, Day: k.name, Allowance: f.allowance, Used: used, LeasedLeft: left,
			Stopped: st.stopped, Reason: st.reason, OperatorStop: st.stopped && st.operator,
		})
	}
	return out, nil
}

func (a *Admitter) family(name string) (*family, error) {
	if a.invalid != "" {
		return nil, a.Err()
	}
	f := a.fams[name]
	if f == nil {
		return nil, problem(wire.CodeInvalid, fmt.Sprintf("unknown family %q", name))
	}
	return f, nil
}

// StopFamily stops one family until ResumeFamily. It persists before it
// returns: once it has returned, this server admits nothing more for the
// family.
func (a *Admitter) StopFamily(ctx context.Context, name, reason string) error {
	f, err := a.family(name)
	if err != nil {
		return err
	}
	if reason == "" {
		reason = "operator stop"
	}
	if err := a.writeStop(ctx, name, operatorStopKey, reason, engine.MaxTTLMs); err != nil {
		return err
	}
	a.setStopCache(f, dayOf(a.now()), true, reason, true)
	a.log.Warn("family stopped by the operator", "family", name, "reason", reason)
	return nil
}

// ResumeFamily clears an operator stop and today's budget stop and resets
// today's family usage, so the family gets a fresh allowance. Fairness
// quotas are preserved (use ResetFairness for those).
func (a *Admitter) ResumeFamily(ctx context.Context, name string) error {
	f, err := a.family(name)
	if err != nil {
		return err
	}
	day := dayOf(a.now())
	k := a.keysOf(day)
	f.mu.Lock()
	defer f.mu.Unlock()
	var out engine.StepResult
	if err := a.eng.ApplyReserved(ctx, familyPartition(name), &out,
		engine.Del(operatorStopKey), engine.Del(k.stop), engine.Del(k.used), engine.Del(k.warn)); err != nil {
		return a.unavailable("resuming the family", err)
	}
	f.resetLease(day)
	f.warnedDay.Store(0)
	a.setStopCache(f, day, false, "", false)
	a.log.Warn("family resumed by the operator", "family", name)
	return nil
}
