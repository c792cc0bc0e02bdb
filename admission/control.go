package admission

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/wire"
)

// auditTTL keeps audit records as long as any record may live.
const auditTTL = engine.MaxTTLMs

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
	names := make([]string, 0, len(a.fams))
	for name := range a.fams {
		names = append(names, name)
	}
	slices.Sort(names)
	out := make([]FamilyState, 0, len(names))
	for _, name := range names {
		f := a.fams[name]
		a.invalidateStop(f)
		st, err := a.stopState(ctx, f, day)
		if err != nil {
			return nil, a.unavailable("reading the family stop", err)
		}
		var res engine.StepResult
		if err := a.eng.ApplyReserved(ctx, familyPartition(name), &res, engine.Get(usedKey(day))); err != nil {
			return nil, a.unavailable("reading the family usage", err)
		}
		used, _ := parseInt(res.Results[0].Value)
		left := int64(0)
		if f.day.Load() == day {
			left = f.left.Load()
		}
		out = append(out, FamilyState{
			Family: name, Day: dayName(day), Allowance: f.allowance, Used: used, LeasedLeft: left,
			Stopped: st.stopped, Reason: st.reason, OperatorStop: st.stopped && st.operator,
		})
	}
	return out, nil
}

func (a *Admitter) invalidateStop(f *family) {
	f.stopMu.Lock()
	f.stop.valid = false
	f.stopMu.Unlock()
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
	f.mu.Lock()
	defer f.mu.Unlock()
	var out engine.StepResult
	if err := a.eng.ApplyReserved(ctx, familyPartition(name), &out,
		engine.Del(operatorStopKey), engine.Del(stopKey(day)), engine.Del(usedKey(day)), engine.Del(warnKey(day))); err != nil {
		return a.unavailable("resuming the family", err)
	}
	f.left.Store(0)
	a.setStopCache(f, day, false, "", false)
	a.log.Warn("family resumed by the operator", "family", name)
	return nil
}

// ResetRequest names the fairness quotas to reset for one family and the
// current UTC day. Identities are the hashed values clients send (see
// wire.Request): Source with its SourceTiers resets the source bucket and
// every tier given; Principal resets the principal.
type ResetRequest struct {
	Family      string            `json:"family"`
	Source      string            `json:"source,omitempty"`
	SourceTiers map[string]string `json:"sourceTiers,omitempty"`
	Principal   string            `json:"principal,omitempty"`
	// Reason is recorded in the audit trail.
	Reason string `json:"reason,omitempty"`
}

// AuditRecord is the durable record of one fairness reset.
type AuditRecord struct {
	At     time.Time    `json:"at"`
	Actor  string       `json:"actor"`
	Action string       `json:"action"`
	Reset  ResetRequest `json:"reset"`
}

// ResetFairness deletes today's quota counters named by r and records an
// audit entry (who, when, what) in the store and the log.
func (a *Admitter) ResetFairness(ctx context.Context, actor string, r ResetRequest) (AuditRecord, error) {
	f, err := a.family(r.Family)
	if err != nil {
		return AuditRecord{}, err
	}
	if r.Source == "" && r.Principal == "" {
		return AuditRecord{}, problem(wire.CodeInvalid, "a fairness reset names a source or a principal")
	}
	probe := &wire.Request{OperationID: "reset", Family: r.Family, Source: r.Source, SourceTiers: r.SourceTiers, Principal: r.Principal,
		Steps: []engine.Step{{Partition: "p", Commands: []engine.Command{engine.Get("k")}}}}
	if err := probe.Validate(); err != nil {
		return AuditRecord{}, problem(wire.CodeInvalid, err.Error())
	}
	d := dayName(dayOf(a.now()))
	if r.Source != "" {
		keys := []engine.Command{engine.Del("src/" + d + "/" + r.Source)}
		partition := r.Source
		for _, tier := range tierOrder {
			if h, ok := r.SourceTiers[tier]; ok {
				keys = append(keys, engine.Del("t/"+tier+"/"+d+"/"+h))
				partition = h
			}
		}
		var out engine.StepResult
		if err := a.eng.ApplyReserved(ctx, "adm/q/"+f.name+"/"+partition, &out, keys...); err != nil {
			return AuditRecord{}, a.unavailable("resetting a source quota", err)
		}
	}
	if r.Principal != "" {
		var out engine.StepResult
		if err := a.eng.ApplyReserved(ctx, "adm/p/"+f.name+"/"+r.Principal, &out, engine.Del("p/"+d)); err != nil {
			return AuditRecord{}, a.unavailable("resetting a principal quota", err)
		}
	}
	rec := AuditRecord{At: a.now().UTC(), Actor: actor, Action: "fairness.reset", Reset: r}
	enc, err := json.Marshal(rec)
	if err != nil {
		return AuditRecord{}, err
	}
	var out engine.StepResult
	key := "a/" + rec.At.Format(time.RFC3339Nano) + "/" + engine.NewOperationID()[:8]
	if err := a.eng.ApplyReserved(ctx, "adm/audit", &out, engine.Set(key, string(enc), auditTTL)); err != nil {
		return AuditRecord{}, a.unavailable("recording the audit entry", err)
	}
	a.log.Warn("fairness quota reset", "family", r.Family, "actor", actor, "reason", r.Reason,
		"source", r.Source != "", "principal", r.Principal != "")
	return rec, nil
}
