package main

import (
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/pflag"

	"github.com/sluicehq/sluice/admission"
)

// admissionFlags are the admission settings of sluice serve as given, text
// and all: they are parsed only when the server starts, and a malformed
// value becomes a reason for every RPC to answer 503 guard_unavailable,
// never an exit or a silent default.
type admissionFlags struct {
	DailyBudget   string
	Families      string
	FamilyBudgets string
	FairFamilies  string
	Shares        string
	FamilyShares  string
	Chunk         string
	QuotaChunk    string
}

func defaultAdmissionFlags() admissionFlags {
	return admissionFlags{
		DailyBudget: strconv.FormatInt(admission.DefaultTotal, 10),
		Chunk:       strconv.FormatInt(admission.DefaultChunk, 10),
		QuotaChunk:  strconv.FormatInt(admission.DefaultQuotaChunk, 10),
	}
}

// addFlags declares the admission flags and their variables on fs.
func (a *admissionFlags) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&a.DailyBudget, "daily-budget", a.DailyBudget, "commands admitted per UTC day across every family")
	fs.StringVar(&a.Families, "families", a.Families, `admission families RPCs may name, comma-separated (default "default")`)
	fs.StringVar(&a.FamilyBudgets, "family-budgets", a.FamilyBudgets, "explicit daily budgets, such as offline=600000,replay=100000; families left out share the rest equally")
	fs.StringVar(&a.FairFamilies, "fair-families", a.FairFamilies, "families whose every RPC is charged to a source bucket (the shared unknown bucket when it names none), comma-separated")
	fs.StringVar(&a.Shares, "shares", a.Shares, "fairness shares of every family as budget divisors, such as source=20,principal=20,v4/24=5,v6/56=10,v6/48=5")
	fs.StringVar(&a.FamilyShares, "family-shares", a.FamilyShares, "fairness shares of one family, such as replay.source=10,replay.principal=40")
	fs.StringVar(&a.Chunk, "admission-chunk", a.Chunk, "commands this server leases from a family's daily budget at a time (at most 1 % of the budget)")
	fs.StringVar(&a.QuotaChunk, "quota-chunk", a.QuotaChunk, "commands of a source's or principal's daily quota this server reserves ahead (at most 1 % of the quota; 0 charges every RPC in the store)")
	for name, env := range map[string]string{
		"daily-budget":    "SLUICE_DAILY_BUDGET",
		"families":        "SLUICE_FAMILIES",
		"family-budgets":  "SLUICE_FAMILY_BUDGETS",
		"fair-families":   "SLUICE_FAIR_FAMILIES",
		"shares":          "SLUICE_SHARES",
		"family-shares":   "SLUICE_FAMILY_SHARES",
		"admission-chunk": "SLUICE_ADMISSION_CHUNK",
		"quota-chunk":     "SLUICE_QUOTA_CHUNK",
	} {
		bindEnv(fs, name, env)
	}
}

// config returns the admission configuration of a. It never fails: every
// malformed value is recorded in the result (Config.AddProblem), so the
// Admitter built from it refuses every RPC with the reasons.
func (a admissionFlags) config() admission.Config {
	cfg := admission.DefaultConfig()
	cfg.Total = parseCount(&cfg, "daily budget (--daily-budget)", a.DailyBudget, cfg.Total)
	cfg.Chunk = parseCount(&cfg, "admission chunk (--admission-chunk)", a.Chunk, cfg.Chunk)
	cfg.QuotaChunk = parseCountFrom(&cfg, "quota chunk (--quota-chunk)", a.QuotaChunk, 0, cfg.QuotaChunk)
	cfg.Families = splitList(a.Families)
	cfg.Split = a.FamilyBudgets
	cfg.Fair = splitList(a.FairFamilies)
	var err error
	if cfg.Shares, err = admission.ParseShares(a.Shares); err != nil {
		cfg.AddProblem(fmt.Errorf("shares (--shares): %w", err))
	}
	if cfg.FamilyShares, err = admission.ParseFamilyShares(a.FamilyShares); err != nil {
		cfg.AddProblem(fmt.Errorf("family shares (--family-shares): %w", err))
	}
	return cfg
}

// parseCount parses a positive whole number, recording a problem in cfg
// and keeping def when it is malformed.
func parseCount(cfg *admission.Config, what, s string, def int64) int64 {
	return parseCountFrom(cfg, what, s, 1, def)
}

// parseCountFrom parses a whole number of at least least, recording a
// problem in cfg and keeping def when it is malformed.
func parseCountFrom(cfg *admission.Config, what, s string, least, def int64) int64 {
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil || n < least {
		cfg.AddProblem(fmt.Errorf("%s %q is not a whole number of at least %d", what, s, least))
		return def
	}
	return n
}

// splitList splits a comma list, trimming blanks around each entry. An
// empty list yields nil; an empty entry stays, for validation to refuse.
func splitList(s string) []string {
	if strings.TrimSpace(s) == "" {
		return nil
	}
	parts := strings.Split(s, ",")
	for i, p := range parts {
		parts[i] = strings.TrimSpace(p)
	}
	return parts
}

// logAdmission logs the admission configuration a server starts with.
func logAdmission(log *slog.Logger, cfg admission.Config) {
	allowances, err := cfg.Allowances()
	if err != nil {
		return // admission.New has logged the reason
	}
	names := make([]string, 0, len(allowances))
	for f := range allowances {
		names = append(names, f)
	}
	slices.Sort(names)
	var parts []string
	for _, f := range names {
		part := fmt.Sprintf("%s=%d", f, allowances[f])
		if slices.Contains(cfg.Fair, f) {
			part += " (fair)"
		}
		if chunk := admission.EffectiveChunk(cfg.Chunk, allowances[f]); chunk < cfg.Chunk {
			part += fmt.Sprintf(" (chunk %d: 1 %% of the budget)", chunk)
		}
		parts = append(parts, part)
	}
	log.Info("admission", "daily_budget", cfg.Total, "families", strings.Join(parts, ", "), "chunk", cfg.Chunk, "quota_chunk", cfg.QuotaChunk)
}
