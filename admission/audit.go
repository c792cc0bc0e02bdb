package admission

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/wire"
)

// The audit trail of fairness resets lives in one reserved partition: a
// sequence counter and one record per reset under the sequence number it
// drew. Records are kept for the longest lifetime a record may have (120
// days); the counter's lifetime is renewed with every record, so it
// outlives them all and numbers never repeat while a record holding them
// lives.
const (
	auditPartition = "adm/audit"
	auditSeqKey    = "seq"
	auditTTL       = engine.MaxTTLMs
)

// Bounds of one page of the audit trail.
const (
	DefaultAuditLimit = 100
	MaxAuditLimit     = 1000
)

func auditKey(seq int64) string { return "a/" + strconv.FormatInt(seq, 10) }

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
	// Seq numbers the records in the order they were written, from 1.
	Seq    int64        `json:"seq"`
	At     time.Time    `json:"at"`
	Actor  string       `json:"actor"`
	Action string       `json:"action"`
	Reset  ResetRequest `json:"reset"`
}

// AuditPage is one page of the audit trail, newest first.
type AuditPage struct {
	Records []AuditRecord `json:"records"`
	// Next, when not zero, is the Before of the next (older) page.
	Next int64 `json:"next,omitempty"`
}

// ResetFairness deletes today's quota counters named by r and records an
// audit entry (who, when, what) in the store and the log. The record is
// written first: no reset takes effect unaudited. A reset that fails after
// it answers an error, and its record stays as that of an attempt.
//
// The reset takes effect on this server at once, and on other servers
// sharing the store within Config.StateRefresh: until they read the
// family's stored state again they may still refuse the identity from
// their denial memory.
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
	rec := AuditRecord{At: a.now().UTC(), Actor: actor, Action: "fairness.reset", Reset: r}
	if rec.Seq, err = a.appendAudit(ctx, &rec); err != nil {
		return AuditRecord{}, err
	}
	// From here on quotas may be deleted, even by a call that fails (its
	// outcome unknown): whatever happens, this server forgets what it
	// remembered of them, lest it keep refusing an identity whose quota is
	// gone until the day ends. Forgetting only costs store calls.
	defer f.forget()

	k := a.keysOf(dayOf(rec.At))
	id := identitiesOf(r.Source, r.SourceTiers, r.Principal)
	if id.source != "" {
		keys := []engine.Command{engine.Del(k.quotaKey(axisSource, id.source))}
		name := id.source
		for i, t := range tierAxes {
			if h := id.tiers[i]; h != "" {
				keys = append(keys, engine.Del(k.quotaKey(t.axis, h)))
				name = h
			}
		}
		var out engine.StepResult
		if err := a.eng.ApplyReservedPartition(ctx, f.quotaPartition+name, &out, keys...); err != nil {
			return AuditRecord{}, a.unavailable("resetting a source quota", err)
		}
	}
	if id.principal != "" {
		var out engine.StepResult
		if err := a.eng.ApplyReservedPartition(ctx, f.principalPartition+id.principal, &out, engine.Del(k.quotaKey(axisPrincipal, id.principal))); err != nil {
			return AuditRecord{}, a.unavailable("resetting a principal quota", err)
		}
	}
	// Tell every server: a fresh epoch makes them forget their remembered
	// denials when they next read the family's state.
	epoch := engine.NewOperationID()
	var out engine.StepResult
	if err := a.eng.ApplyReserved(ctx, familyPartition(f.name), &out, engine.Set(resetEpochKey, epoch, engine.MaxTTLMs)); err != nil {
		return AuditRecord{}, a.unavailable("publishing the fairness reset", err)
	}
	f.stopMu.Lock()
	f.resetEpoch = epoch
	f.stopMu.Unlock()

	a.log.Warn("fairness quota reset", "family", r.Family, "actor", actor, "reason", r.Reason,
		"source", r.Source != "", "principal", r.Principal != "", "seq", rec.Seq)
	return rec, nil
}

// appendAudit stores rec under the next sequence number and returns it.
func (a *Admitter) appendAudit(ctx context.Context, rec *AuditRecord) (int64, error) {
	var out engine.StepResult
	if err := a.eng.ApplyReserved(ctx, auditPartition, &out,
		engine.Incr(auditSeqKey, 1, auditTTL), engine.Expire(auditSeqKey, auditTTL)); err != nil {
		return 0, a.unavailable("numbering the audit record", err)
	}
	seq := out.Results[0].Int
	rec.Seq = seq
	enc, err := json.Marshal(rec)
	if err != nil {
		return 0, err
	}
	if err := a.eng.ApplyReserved(ctx, auditPartition, &out, engine.Set(auditKey(seq), string(enc), auditTTL)); err != nil {
		return 0, a.unavailable("recording the audit entry", err)
	}
	return seq, nil
}

// Audit returns a page of the fairness-reset audit trail, newest first:
// the records numbered below before (every record when before is 0),
// reading at most limit sequence numbers (1 … MaxAuditLimit; 0 means
// DefaultAuditLimit). A page may hold fewer records than limit while older
// ones follow — a number whose record has expired, or whose reset failed
// before its record was written, holds none — so read on while Next is not
// zero.
func (a *Admitter) Audit(ctx context.Context, before int64, limit int) (AuditPage, error) {
	if a.invalid != "" {
		return AuditPage{}, a.Err()
	}
	if limit == 0 {
		limit = DefaultAuditLimit
	}
	if limit < 1 || limit > MaxAuditLimit {
		return AuditPage{}, problem(wire.CodeInvalid, fmt.Sprintf("audit limit %d outside 1…%d", limit, MaxAuditLimit))
	}
	if before < 0 {
		return AuditPage{}, problem(wire.CodeInvalid, fmt.Sprintf("audit cursor %d is negative", before))
	}
	var out engine.StepResult
	if err := a.eng.ApplyReserved(ctx, auditPartition, &out, engine.Get(auditSeqKey)); err != nil {
		return AuditPage{}, a.unavailable("reading the audit sequence", err)
	}
	top, ok := parseInt(out.Results[0].Value)
	if !ok {
		return AuditPage{}, a.unavailable("reading the audit sequence", fmt.Errorf("sequence %q", out.Results[0].Value))
	}
	if before > 0 {
		top = min(top, before-1)
	}
	low := max(top-int64(limit), 0) // read (low, top]
	page := AuditPage{Records: []AuditRecord{}}
	cmds := make([]engine.Command, 0, engine.MaxCommandsPerStep)
	for hi := top; hi > low; hi -= engine.MaxCommandsPerStep {
		cmds = cmds[:0]
		for seq := hi; seq > max(low, hi-engine.MaxCommandsPerStep); seq-- {
			cmds = append(cmds, engine.Get(auditKey(seq)))
		}
		if err := a.eng.ApplyReserved(ctx, auditPartition, &out, cmds...); err != nil {
			return AuditPage{}, a.unavailable("reading the audit trail", err)
		}
		for i, r := range out.Results {
			if !r.Found {
				continue
			}
			var rec AuditRecord
			if err := json.Unmarshal([]byte(r.Value), &rec); err != nil {
				// Never hide that a reset happened: show what is known.
				rec = AuditRecord{Seq: hi - int64(i), Action: "unreadable audit record"}
			}
			page.Records = append(page.Records, rec)
		}
	}
	if low > 0 {
		page.Next = low + 1
	}
	return page, nil
}
