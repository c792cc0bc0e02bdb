package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/server"
	"github.com/sluicehq/sluice/wire"
)

// operatorRemote is a remote reached with the operator token.
type operatorRemote struct {
	remote
	// Token is the operator token; empty means the data directory's
	// operator-token file.
	Token string
}

func (o *operatorRemote) addFlags(fs *pflag.FlagSet) {
	o.remote.addFlags(fs)
	fs.StringVar(&o.Token, "operator-token", "", "operator token (default: the data directory's operator-token file)")
	bindEnv(fs, "operator-token", "SLUICE_OPERATOR_TOKEN")
}

func (o *operatorRemote) token() (string, error) {
	if o.Token != "" {
		return o.Token, nil
	}
	t, err := readOneCredential(o.DataDir, operatorTokenFile)
	if err != nil {
		return "", fmt.Errorf("no operator token: pass --operator-token or $SLUICE_OPERATOR_TOKEN, or run from beside the server's data directory (%w)", err)
	}
	return t, nil
}

// do calls an operator endpoint with body (nil for none) and decodes its
// answer into answer.
func (o *operatorRemote) do(ctx context.Context, method, path string, body, answer any) error {
	token, err := o.token()
	if err != nil {
		return err
	}
	hc, err := o.httpClient()
	if err != nil {
		return err
	}
	var rd io.Reader
	if body != nil {
		enc, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(enc)
	}
	req, err := http.NewRequestWithContext(ctx, method, o.endpoint(path), rd)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if err := call(hc, req, answer); err != nil {
		return fmt.Errorf("%s %s: %w", method, path, explain(err))
	}
	return nil
}

// state calls an endpoint answering the control state and prints it.
func (o *operatorRemote) state(ctx context.Context, method, path string, body any, out io.Writer) error {
	var st server.ControlState
	if err := o.do(ctx, method, path, body, &st); err != nil {
		return err
	}
	printState(out, st)
	return nil
}

// printState prints the stop fence on one line ("running", or when and why
// it was stopped) and, when the server admits by family, a table of the
// families.
func printState(out io.Writer, st server.ControlState) {
	if !st.Stopped {
		fmt.Fprintln(out, "running")
	} else {
		fmt.Fprintf(out, "stopped since %s: %s\n", st.Since.UTC().Format(time.RFC3339), st.Reason)
	}
	if len(st.Families) == 0 {
		return
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "FAMILY\tDAY (UTC)\tUSED\tALLOWANCE\tUNSPENT HERE\tSTATE")
	for _, f := range st.Families {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\n", f.Family, f.Day, f.Used, f.Allowance, f.LeasedLeft, familyState(f))
	}
	tw.Flush()
}

func familyState(f admission.FamilyState) string {
	switch {
	case !f.Stopped:
		return "running"
	case f.OperatorStop:
		return "stopped by the operator until resumed: " + f.Reason
	}
	return "stopped until the next UTC day or a resume: " + f.Reason
}

func newControlCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "control",
		Short: "Operate a server's stop fence, family stops and fairness quotas",
		Long: `Operate a server with the operator token: the global stop fence, the stop of
one admission family, the fairness quotas of one identity and the audit trail
of their resets.

A stopped server answers every RPC 503 guard_stopped before running any
command; a stopped family, every RPC of that family. Stored data is kept, and
a stop survives restarts until resumed. The token comes from
--operator-token, $SLUICE_OPERATOR_TOKEN, or the operator-token file of the
data directory.`,
	}
	var o operatorRemote
	o.addFlags(cmd.PersistentFlags())
	var stop server.StopRequest
	stopCmd := &cobra.Command{
		Use:   "stop",
		Short: "Stop every RPC, or one family's, until resumed",
		Long: `Stop every RPC until resumed, or with --family only that family's. The stop
is durable and acknowledged only once it is stored: from then on this server
admits nothing it covers.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := familyGiven(cmd, stop.Family, "stop every RPC"); err != nil {
				return err
			}
			return o.state(cmd.Context(), http.MethodPost, wire.PathStop, stop, cmd.OutOrStdout())
		},
	}
	stopCmd.Flags().StringVar(&stop.Family, "family", "", "stop only this admission family")
	stopCmd.Flags().StringVar(&stop.Reason, "reason", "", "why, for the logs and the state (default \"operator stop\")")
	var resume server.StopRequest
	resumeCmd := &cobra.Command{
		Use:   "resume",
		Short: "Clear the stop fence, or one family's stop",
		Long: `Clear the global stop fence, or with --family that family's stop: an operator
stop or today's budget stop. Resuming a family also resets its usage for the
day, giving it a fresh allowance; fairness quotas are kept (see
fairness-reset).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := familyGiven(cmd, resume.Family, "clear the global stop fence"); err != nil {
				return err
			}
			return o.state(cmd.Context(), http.MethodPost, wire.PathResume, resume, cmd.OutOrStdout())
		},
	}
	resumeCmd.Flags().StringVar(&resume.Family, "family", "", "resume only this admission family")
	resumeCmd.Flags().StringVar(&resume.Reason, "reason", "", "why, for the logs")
	stateCmd := &cobra.Command{
		Use:   "state",
		Short: "Print the stop fence and every family's usage and stop",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.state(cmd.Context(), http.MethodGet, wire.PathState, nil, cmd.OutOrStdout())
		},
	}
	cmd.AddCommand(stopCmd, resumeCmd, stateCmd, newFairnessResetCmd(&o), newAuditCmd(&o))
	return cmd
}

// familyGiven refuses a --family given empty, which the server would read
// as no family at all, acting on the global fence: only leaving the flag
// out asks for that act, which what names.
func familyGiven(cmd *cobra.Command, family, what string) error {
	if cmd.Flags().Changed("family") && strings.TrimSpace(family) == "" {
		return fmt.Errorf("--family is empty: name a family, or leave --family out to %s", what)
	}
	return nil
}

func newAuditCmd(o *operatorRemote) *cobra.Command {
	var limit int
	var before int64
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "List the fairness resets, newest first",
		Long: `List the audit trail of fairness resets kept by the server (120 days):
newest first, one page at a time. Each record shows its number, when, who
(as named, with the operator's address), the family, what was reset and why.
Identities are hashed before they reach the server, so the trail names the
axes reset, not the addresses or principals.

A page reads --limit record numbers (default 100, at most 1,000); the command
ends by naming the --before of the next, older page when there is one.`,
		Example: `  sluice control audit
  sluice control audit --limit 20 --before 381`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// What is given is sent, zero included, for the server to
			// refuse: never read as "not given".
			q := url.Values{}
			if cmd.Flags().Changed("limit") {
				q.Set("limit", strconv.Itoa(limit))
			}
			if cmd.Flags().Changed("before") {
				q.Set("before", strconv.FormatInt(before, 10))
			}
			path := wire.PathAudit
			if len(q) > 0 {
				path += "?" + q.Encode()
			}
			var page admission.AuditPage
			if err := o.do(cmd.Context(), http.MethodGet, path, nil, &page); err != nil {
				return err
			}
			printAudit(cmd.OutOrStdout(), page)
			return nil
		},
	}
	cmd.Flags().IntVar(&limit, "limit", 0, "record numbers to read (1…1000; default 100)")
	cmd.Flags().Int64Var(&before, "before", 0, "list the records older than this number (the previous page names it)")
	return cmd
}

// printAudit prints a page of the audit trail as a table.
func printAudit(out io.Writer, page admission.AuditPage) {
	if len(page.Records) == 0 {
		fmt.Fprintln(out, "no fairness resets recorded")
	} else {
		tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "SEQ\tAT (UTC)\tACTOR\tFAMILY\tRESET\tREASON")
		for _, r := range page.Records {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", r.Seq, r.At.UTC().Format(time.RFC3339), r.Actor, r.Reset.Family, resetAxes(r.Reset), r.Reset.Reason)
		}
		tw.Flush()
	}
	if page.Next != 0 {
		fmt.Fprintf(out, "older: sluice control audit --before %d\n", page.Next)
	}
}

// resetAxes names what a reset covered: the source with its tiers, the
// principal, or both.
func resetAxes(r admission.ResetRequest) string {
	var parts []string
	if r.Source != "" {
		tiers := slices.Sorted(maps.Keys(r.SourceTiers))
		s := "source"
		if len(tiers) > 0 {
			s += " (" + strings.Join(tiers, ", ") + ")"
		}
		parts = append(parts, s)
	}
	if r.Principal != "" {
		parts = append(parts, "principal")
	}
	return strings.Join(parts, " + ")
}

// fairnessReset is one fairness reset asked for at a terminal.
type fairnessReset struct {
	Family, Source, Principal string
	SourceSet                 bool
	Actor, Reason             string
	Pepper                    string
}

func newFairnessResetCmd(o *operatorRemote) *cobra.Command {
	var f fairnessReset
	cmd := &cobra.Command{
		Use:   "fairness-reset",
		Short: "Reset one identity's fairness quotas for today (audited)",
		Long: `Reset today's fairness quotas of one source address and/or one principal in
one family, so they are admitted again. The reset is audited: the actor, the
time, the family and the identities (hashed) are logged by the server and
kept in its store.

The source and principal are given raw and hashed here with the pepper,
exactly as the Go client hashes them, so they name the quotas the client
charged. A source is reduced to its bucket (an IPv4 address, an IPv6 /64, or
the shared unknown bucket for a missing, unspecified or unparsable address)
and resetting it also resets its prefix tiers (the IPv4 /24, or the IPv6 /56
and /48). The pepper comes from --pepper, $SLUICE_PEPPER or the data
directory's pepper file.`,
		Example: `  sluice control fairness-reset --family replay --source 203.0.113.9 --actor alice --reason "office NAT"
  sluice control fairness-reset --family password --principal user:42 --actor alice`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f.SourceSet = cmd.Flags().Changed("source")
			return runFairnessReset(cmd.Context(), o, &f, cmd.OutOrStdout())
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.Family, "family", "", "admission family whose quotas to reset (required)")
	fl.StringVar(&f.Source, "source", "", "source address whose bucket and prefix tiers to reset")
	fl.StringVar(&f.Principal, "principal", "", "principal (verified user or token) whose quota to reset")
	fl.StringVar(&f.Actor, "actor", "", "who is resetting, for the audit trail (required)")
	fl.StringVar(&f.Reason, "reason", "", "why, for the audit trail")
	fl.StringVar(&f.Pepper, "pepper", "", "key-hashing pepper (default: the data directory's pepper file)")
	bindEnv(fl, "pepper", client.EnvPepper)
	for _, name := range []string{"family", "actor"} {
		_ = cmd.MarkFlagRequired(name)
	}
	return cmd
}

func runFairnessReset(ctx context.Context, o *operatorRemote, f *fairnessReset, out io.Writer) error {
	if !f.SourceSet && f.Principal == "" {
		return fmt.Errorf("name a --source, a --principal or both")
	}
	if strings.TrimSpace(f.Actor) == "" {
		return fmt.Errorf("--actor is empty: name who is resetting")
	}
	pepper := f.Pepper
	if pepper == "" {
		var err error
		if pepper, err = readOneCredential(o.DataDir, pepperFile); err != nil {
			return fmt.Errorf("no pepper: pass --pepper or $%s, or run from beside the server's data directory (%w)", client.EnvPepper, err)
		}
	}
	if len(pepper) < wire.MinSecretLen {
		return fmt.Errorf("the pepper is %d characters (minimum %d): it cannot be the clients' pepper", len(pepper), wire.MinSecretLen)
	}
	// An off client needs no server: it only hashes, with the pepper.
	hasher := client.New(client.Config{Off: true, Pepper: pepper})
	defer hasher.Close()
	id := hasher.WithFairness(f.Source, f.Principal).Identities()
	req := server.FairnessResetRequest{
		ResetRequest: admission.ResetRequest{Family: f.Family, Principal: id.Principal, Reason: f.Reason},
		Actor:        f.Actor,
	}
	if f.SourceSet {
		req.Source, req.SourceTiers = id.Source, id.SourceTiers
	}
	var rec admission.AuditRecord
	if err := o.do(ctx, http.MethodPost, wire.PathFairnessReset, req, &rec); err != nil {
		return err
	}
	fmt.Fprintf(out, "reset        %s\nat           %s\nby           %s\n", rec.Reset.Family, rec.At.UTC().Format(time.RFC3339), rec.Actor)
	if f.SourceSet {
		what := "bucket " + client.SourceBucket(f.Source)
		if bucket := client.SourceBucket(f.Source); bucket == client.UnknownSource {
			what = "the shared unknown bucket"
		} else {
			tiers := client.SourceTiers(f.Source)
			names := make([]string, 0, len(tiers))
			for tier := range tiers {
				names = append(names, tiers[tier])
			}
			slices.Sort(names)
			what += ", with " + strings.Join(names, " and ")
		}
		fmt.Fprintf(out, "source       %s\n", what)
	}
	if f.Principal != "" {
		fmt.Fprintf(out, "principal    %s\n", f.Principal)
	}
	if rec.Reset.Reason != "" {
		fmt.Fprintf(out, "reason       %s\n", rec.Reset.Reason)
	}
	return nil
}
