package admission

import (
	"context"
	"fmt"
	"strconv"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/wire"
)

// tierOrder lists the prefix tiers from finest to coarsest within each
// address family; the coarsest present names the source partition, so a
// source and all of its tiers are reserved in one atomic batch.
var tierOrder = []string{wire.TierV4Slash24, wire.TierV6Slash56, wire.TierV6Slash48}

func (s Shares) tierDivisor(tier string) int64 {
	switch tier {
	case wire.TierV4Slash24:
		return s.V4Slash24
	case wire.TierV6Slash56:
		return s.V6Slash56
	}
	return s.V6Slash48
}

// share returns floor(allowance / divisor): the most one identity may
// spend in a day.
func (f *family) share(divisor int64) int64 { return f.allowance / divisor }

// fairness charges n commands to the RPC's source bucket, its prefix tiers
// and its principal, all or none.
func (a *Admitter) fairness(ctx context.Context, f *family, req *wire.Request, day, n int64) error {
	source := req.Source
	if source == "" && f.fair {
		source = wire.UnknownSource
	}
	if a.cfg.switches.noSource {
		source = ""
	}
	principal := req.Principal
	if a.cfg.switches.noPrincipal {
		principal = ""
	}
	var charged []engine.Budget
	var srcPartition string
	if source != "" {
		var err error
		srcPartition, charged, err = a.chargeSource(ctx, f, req, source, day, n)
		if err != nil {
			return err
		}
	}
	if principal == "" {
		return nil
	}
	b := engine.Budget{Key: "p/" + dayName(day), Limit: f.share(f.shares.Principal), WindowMs: keyTTL}
	denied, err := a.reserve(ctx, "adm/p/"+f.name+"/"+principal, n, b)
	if err == nil && denied < 0 {
		return nil
	}
	// Undo the source charge so the refused RPC spends nothing. The
	// budgets keep their expiry (kv.incr keeps a live record's TTL).
	if len(charged) > 0 {
		cmds := make([]engine.Command, len(charged))
		for i, c := range charged {
			cmds[i] = engine.Incr(c.Key, -n, keyTTL)
		}
		var out engine.StepResult
		if uerr := a.eng.ApplyReserved(ctx, srcPartition, &out, cmds...); uerr != nil {
			a.log.Error("refunding a source quota failed; it stays charged", "family", f.name, "err", uerr)
		}
	}
	if err != nil {
		return err
	}
	return problem(wire.CodeLimited, fmt.Sprintf("family %q: principal quota exhausted for today", f.name))
}

// chargeSource reserves n on the source bucket and its tiers in one batch.
func (a *Admitter) chargeSource(ctx context.Context, f *family, req *wire.Request, source string, day, n int64) (string, []engine.Budget, error) {
	d := dayName(day)
	budgets := []engine.Budget{{Key: "src/" + d + "/" + source, Limit: f.share(f.shares.Source), WindowMs: keyTTL}}
	names := []string{"source"}
	partition := source
	if source != wire.UnknownSource && !a.cfg.switches.noTiers {
		for _, tier := range tierOrder {
			h, ok := req.SourceTiers[tier]
			if !ok {
				continue
			}
			budgets = append(budgets, engine.Budget{Key: "t/" + tier + "/" + d + "/" + h, Limit: f.share(f.shares.tierDivisor(tier)), WindowMs: keyTTL})
			names = append(names, "prefix "+tier)
			partition = h
		}
	}
	partition = "adm/q/" + f.name + "/" + partition
	denied, err := a.reserve(ctx, partition, n, budgets...)
	if err != nil {
		return "", nil, err
	}
	if denied >= 0 {
		return "", nil, problem(wire.CodeLimited, fmt.Sprintf("family %q: %s quota exhausted for today", f.name, names[denied]))
	}
	return partition, budgets, nil
}

// reserve reserves n on every budget of one partition, all or none. It
// returns -1 when admitted, or the index of the first budget that denied. A
// share too small for n denies without a store call.
func (a *Admitter) reserve(ctx context.Context, partition string, n int64, budgets ...engine.Budget) (int, error) {
	for i, b := range budgets {
		if b.Limit < n {
			return i, nil
		}
	}
	var out engine.StepResult
	if err := a.eng.ApplyReserved(ctx, partition, &out, engine.Reserve("", n, budgets...)); err != nil {
		return 0, a.unavailable("reserving a fairness quota", err)
	}
	r := out.Results[0]
	if r.Allowed {
		return -1, nil
	}
	for i, w := range r.Windows {
		if !w.Allowed {
			return i, nil
		}
	}
	return 0, nil
}

func parseInt(s string) (int64, bool) {
	if s == "" {
		return 0, true
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}
