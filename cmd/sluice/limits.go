package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/term"

	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/wire"
)

// limitsRemote is how the limits commands reach a server. Unlike the other
// tools they have no default URL: they change what a fleet calls, so the
// server is named, not guessed.
type limitsRemote struct {
	remote
	// Key is the limits key, Token the operator token; either opens
	// /v1/limiters. With neither, the data directory's operator-token file.
	Key, Token string
	// File is the limits file.
	File string
}

func (o *limitsRemote) addFlags(fs *pflag.FlagSet) {
	fs.StringVarP(&o.File, "file", "f", defaultLimitsFile, "limits file: .yaml, .yml, .json or .jsonc")
	fs.StringVar(&o.URL, "url", "", "base URL of the server (asked for on a terminal)")
	fs.StringVar(&o.Key, "limits-key", "", "limits key of the server (or --operator-token)")
	fs.StringVar(&o.Token, "operator-token", "", "operator token of the server (default: the data directory's operator-token file)")
	fs.StringVar(&o.DataDir, "data-dir", "sluice-data", "data directory to read the operator token from when no flag gives a key")
	fs.StringVar(&o.CACert, "ca-cert", "", "PEM file of the certificate authority of an HTTPS server")
	fs.DurationVar(&o.Timeout, "timeout", client.DefaultLimitersTimeout, "timeout of one call")
	for name, env := range map[string]string{
		"file":           "SLUICE_LIMITS_FILE",
		"url":            client.EnvURL,
		"limits-key":     client.EnvLimitsKey,
		"operator-token": "SLUICE_OPERATOR_TOKEN",
		"data-dir":       "SLUICE_DATA_DIR",
		"ca-cert":        "SLUICE_CA_CERT",
	} {
		bindEnv(fs, name, env)
	}
}

// console is the person at the terminal, if there is one.
type console struct {
	in  *bufio.Reader
	out io.Writer // where questions and progress go: standard error
	// ask reports whether standard input is a terminal, so that a missing
	// setting can be asked for; draw whether standard error is one, so
	// that progress can be drawn.
	ask, draw bool
	// readSecret reads a line without echoing it.
	readSecret func() (string, error)
}

// newConsole returns the console of cmd's standard input and error.
func newConsole(cmd *cobra.Command) *console {
	c := &console{in: bufio.NewReader(cmd.InOrStdin()), out: cmd.ErrOrStderr()}
	if f, ok := cmd.InOrStdin().(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		c.ask = true
		c.readSecret = func() (string, error) {
			b, err := term.ReadPassword(int(f.Fd()))
			fmt.Fprintln(c.out)
			return string(b), err
		}
	}
	if f, ok := cmd.ErrOrStderr().(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		c.draw = true
	}
	return c
}

// question asks for a value, offering def when the answer is empty.
func (c *console) question(prompt, def string) (string, error) {
	if def != "" {
		prompt += " [" + def + "]"
	}
	fmt.Fprint(c.out, prompt+": ")
	line, err := c.in.ReadString('\n')
	if err != nil && (line == "" || !errors.Is(err, io.EOF)) {
		return "", err
	}
	if line = strings.TrimSpace(line); line == "" {
		return def, nil
	}
	return line, nil
}

// secret asks for a value without echoing it.
func (c *console) secret(prompt string) (string, error) {
	fmt.Fprint(c.out, prompt+": ")
	if c.readSecret == nil {
		line, err := c.in.ReadString('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return "", err
		}
		return strings.TrimSpace(line), nil
	}
	s, err := c.readSecret()
	return strings.TrimSpace(s), err
}

// progress is a progress bar drawn on a terminal; without one, or for a
// single step, it draws nothing.
type progress struct{ bar *progressbar.ProgressBar }

// progress returns the progress bar of n steps.
func (c *console) progress(n int, what string) progress {
	if !c.draw || n < 2 {
		return progress{}
	}
	return progress{progressbar.NewOptions(n,
		progressbar.OptionSetWriter(c.out),
		progressbar.OptionSetDescription(what),
		progressbar.OptionShowCount(),
		progressbar.OptionClearOnFinish(),
		progressbar.OptionSetRenderBlankState(true),
	)}
}

// step records one step done.
func (p progress) step() {
	if p.bar != nil {
		_ = p.bar.Add(1)
	}
}

// end removes the bar, whether every step was done or not.
func (p progress) end() {
	if p.bar != nil {
		_ = p.bar.Clear()
	}
}

// connect returns a client of the server's limiters and one of its route
// quota policies. A setting no flag or
// variable gives is asked for on a terminal; without one the call fails at
// once, naming every flag and variable that would have answered.
func (o *limitsRemote) connect(con *console) (*client.Limiters, *client.Policies, error) {
	url, key := o.URL, o.Key
	if key == "" {
		key = o.Token
	}
	if key == "" {
		key, _ = readOneCredential(o.DataDir, operatorTokenFile)
	}
	var missing []string
	if url == "" {
		missing = append(missing, "the server's URL: pass --url or set $"+client.EnvURL)
	}
	if key == "" {
		missing = append(missing, fmt.Sprintf("a key: pass --limits-key or set $%s (or --operator-token, $SLUICE_OPERATOR_TOKEN, or run beside the server's %s)", client.EnvLimitsKey, o.DataDir))
	}
	if len(missing) > 0 && !con.ask {
		return nil, nil, fmt.Errorf("standard input is not a terminal, so nothing can be asked; missing %s", strings.Join(missing, "; and "))
	}
	var err error
	if url == "" {
		if url, err = con.question("Server URL", "http://127.0.0.1:7420"); err != nil {
			return nil, nil, err
		}
	}
	if key == "" {
		if key, err = con.secret("Limits key or operator token"); err != nil {
			return nil, nil, err
		}
	}
	hc, err := o.httpClient()
	if err != nil {
		return nil, nil, err
	}
	// The bearer key must not follow a redirect elsewhere.
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	cfg := client.LimitersConfig{URL: url, Key: key, Timeout: o.Timeout, HTTPClient: hc}
	lc, err := client.NewLimiters(cfg)
	if err != nil {
		return nil, nil, err
	}
	pc, err := client.NewPolicies(cfg)
	if err != nil {
		return nil, nil, err
	}
	return lc, pc, nil
}

func newLimitsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "limits",
		Short: "Keep the paced-call limiters and route policies of a server in a file under version control",
		Long: `Keep the paced-call limiters of a server (package pace) in a limits file under
version control: one entry per upstream limit, in YAML (.yaml, .yml) or JSON
with comments (.json, .jsonc). An optional "routes" section keeps the route
quota policies of the HTTP stages (package httplimit) in the same file.

  sluice limits sample                 write a commented example file
  sluice limits apply                  configure the server from the file
  sluice limits stats [--save]         read every limiter back (and rewrite the file)

Changes take effect at once, with no restart: every process calling a limiter
reads its configuration from the server's store. apply and stats need the
server's URL (--url, $SLUICE_URL) and a key: the limits key (--limits-key,
$SLUICE_LIMITS_KEY), which opens nothing but the limiters and policies, or the operator
token (--operator-token, $SLUICE_OPERATOR_TOKEN, or the data directory's
operator-token file). On a terminal a missing one is asked for; otherwise the
command fails at once, naming the flag and the variable that would have
given it. Progress is drawn on a terminal only.`,
	}
	var o limitsRemote
	o.addFlags(cmd.PersistentFlags())
	cmd.AddCommand(newLimitsSampleCmd(&o), newLimitsApplyCmd(&o), newLimitsStatsCmd(&o))
	return cmd
}

func newLimitsSampleCmd(o *limitsRemote) *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:   "sample",
		Short: "Write a commented example limits file",
		Long: `Write a commented example limits file to --file (sluice-limits.yaml by
default), in the format its extension names. An existing file is kept unless
--force is given. Nothing is sent to any server.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			format, err := formatOf(o.File)
			if err != nil {
				return err
			}
			sample := sampleYAML
			if format == formatJSONC {
				sample = sampleJSONC
			}
			if err := writeLimitsFile(o.File, []byte(sample), force); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s: edit it, then run \"sluice limits apply -f %s\"\n", o.File, o.File)
			return nil
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "replace an existing file")
	return cmd
}

func newLimitsApplyCmd(o *limitsRemote) *cobra.Command {
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "apply",
		Short: "Configure the server's limiters from the limits file",
		Long: `Configure the server's limiters from the limits file, with no restart.

The whole file is checked first: if any entry is wrong, every problem is
reported with its limiter and field, and nothing is sent. Then each limiter
is compared with the server's: a new one is created, a changed one gets the
file's complete configuration (the calls waiting on it are rejected with
pace.ErrReconfigured and retry under the new limits), and an unchanged one
is left alone, so applying the same file twice disturbs nothing. Limiters
on the server that the file does not name are listed and kept: nothing is
ever deleted. The route policies of a "routes" section are applied the same
way, after the limiters; the stages enforce a change within their refresh
interval.`,
		Example: `  sluice limits apply --url https://sluice.internal:7420 -f limits/prod.yaml
  SLUICE_URL=… SLUICE_LIMITS_KEY=… sluice limits apply --dry-run`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runLimitsApply(cmd.Context(), o, newConsole(cmd), dryRun, cmd.OutOrStdout())
		},
	}
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "check the file and show what would change, changing nothing")
	return cmd
}

func newLimitsStatsCmd(o *limitsRemote) *cobra.Command {
	var save bool
	cmd := &cobra.Command{
		Use:   "stats",
		Short: "Print every limiter's configuration and state; --save rewrites the file",
		Long: `Read every limiter of the server back and print its limit, its calls
remaining in the window, when the window empties, the upstream penalty in
force, and the calls in flight and waiting; then every route quota policy.

With --save the limits file is rewritten to describe the server's limiters
and route policies.
A file that already describes them is left byte for byte as it is, comments
and all, so "apply" then "stats --save" changes nothing. Otherwise a YAML
file is rewritten in sluice's canonical layout with its comments kept beside
the fields and limiters that remain, and a JSON file is edited value by
value, keeping its comments and layout wherever nothing changed.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runLimitsStats(cmd.Context(), o, newConsole(cmd), save, cmd.OutOrStdout())
		},
	}
	cmd.Flags().BoolVar(&save, "save", false, "rewrite the limits file from the server's limiters")
	return cmd
}

func runLimitsApply(ctx context.Context, o *limitsRemote, con *console, dryRun bool, out io.Writer) error {
	file, err := readLimitsFile(o.File)
	if err != nil {
		return fmt.Errorf("nothing was applied: %w", err)
	}
	lc, pc, err := o.connect(con)
	if err != nil {
		return err
	}
	current, err := lc.List(ctx)
	if err != nil {
		return explain(err)
	}
	// The server's policies are read before anything is written, so that
	// a server without them refuses the file before any change.
	var policies []wire.Policy
	if len(file.routes) > 0 {
		if policies, err = pc.List(ctx); err != nil {
			return fmt.Errorf("nothing was applied: reading the route policies: %w", explain(err))
		}
	}
	onServer := make(limits, len(current))
	for _, l := range current {
		onServer[l.Name] = l.Config
	}
	type change struct{ name, what string }
	var changes []change
	unchanged := 0
	for _, name := range file.limits.names() {
		want := file.limits[name]
		cur, ok := onServer[name]
		switch {
		case !ok:
			changes = append(changes, change{name, "create"})
		case cur != want:
			changes = append(changes, change{name, "change " + diffConfigs(cur, want)})
		default:
			unchanged++
		}
	}
	verb := func(what string) string { return what }
	if !dryRun {
		bar := con.progress(len(changes), "configuring")
		for i, c := range changes {
			if _, err := lc.Configure(ctx, c.name, file.limits[c.name]); err != nil {
				bar.end()
				for _, done := range changes[:i] {
					fmt.Fprintf(out, "%-8s %s\n", pastTense(done.what), done.name)
				}
				return fmt.Errorf("limiter %q: %w (%d of %d changes applied)", c.name, explain(err), i, len(changes))
			}
			bar.step()
		}
		bar.end()
		verb = pastTense
	}
	for _, c := range changes {
		fmt.Fprintf(out, "%-8s %s\n", verb(c.what), c.name)
	}
	var extra []string
	for name := range onServer {
		if _, ok := file.limits[name]; !ok {
			extra = append(extra, name)
		}
	}
	slices.Sort(extra)
	summary := fmt.Sprintf("%d limiter(s) in %s: %d to create or change, %d unchanged", len(file.limits), o.File, len(changes), unchanged)
	if !dryRun {
		summary = fmt.Sprintf("%d limiter(s) in %s: %d created or changed, %d unchanged", len(file.limits), o.File, len(changes), unchanged)
	}
	fmt.Fprintln(out, summary)
	if len(extra) > 0 {
		fmt.Fprintf(out, "on the server but not in the file, kept as they are: %s\n", strings.Join(extra, ", "))
	}
	if len(file.routes) > 0 {
		return applyRoutes(ctx, pc, con, file.routes, policies, o.File, dryRun, out)
	}
	return nil
}

// applyRoutes sets the route quota policies of the file that are new or
// differ from the server's, policies, and reports as runLimitsApply does.
func applyRoutes(ctx context.Context, pc *client.Policies, con *console, file routes, policies []wire.Policy, path string, dryRun bool, out io.Writer) error {
	onServer := make(routes, len(policies))
	for _, p := range policies {
		onServer[p.Name] = p.Config
	}
	type change struct{ name, what string }
	var changes []change
	for _, name := range file.names() {
		want := file[name]
		switch cur, ok := onServer[name]; {
		case !ok:
			changes = append(changes, change{name, "create"})
		case cur != want:
			changes = append(changes, change{name, "change " + diffPolicies(cur, want)})
		}
	}
	verb := func(what string) string { return what }
	if !dryRun {
		bar := con.progress(len(changes), "setting route policies")
		for i, c := range changes {
			if _, err := pc.Set(ctx, c.name, file[c.name]); err != nil {
				bar.end()
				for _, done := range changes[:i] {
					fmt.Fprintf(out, "%-8s route %s\n", pastTense(done.what), done.name)
				}
				return fmt.Errorf("route %q: %w (%d of %d route changes applied)", c.name, explain(err), i, len(changes))
			}
			bar.step()
		}
		bar.end()
		verb = pastTense
	}
	for _, c := range changes {
		fmt.Fprintf(out, "%-8s route %s\n", verb(c.what), c.name)
	}
	var extra []string
	for name := range onServer {
		if _, ok := file[name]; !ok {
			extra = append(extra, name)
		}
	}
	slices.Sort(extra)
	done := "created or changed"
	if dryRun {
		done = "to create or change"
	}
	fmt.Fprintf(out, "%d route policy(ies) in %s: %d %s, %d unchanged\n", len(file), path, len(changes), done, len(file)-len(changes))
	if len(extra) > 0 {
		fmt.Fprintf(out, "route policies on the server but not in the file, kept as they are: %s\n", strings.Join(extra, ", "))
	}
	return nil
}

// diffPolicies names the fields that differ from a to b, with both values.
func diffPolicies(a, b wire.PolicyConfig) string {
	var d []string
	add := func(field string, x, y any) {
		if x != y {
			d = append(d, fmt.Sprintf("%s %v→%v", field, x, y))
		}
	}
	add("limit", a.Limit, b.Limit)
	add("windowMs", a.WindowMs, b.WindowMs)
	add("kind", a.Kind, b.Kind)
	return "(" + strings.Join(d, ", ") + ")"
}

// pastTense turns a planned change ("create", "change …") into a done one.
func pastTense(what string) string {
	if rest, ok := strings.CutPrefix(what, "change"); ok {
		return "changed" + rest
	}
	return "created"
}

// diffConfigs names the fields that differ from a to b, with both values.
func diffConfigs(a, b wire.LimiterConfig) string {
	var d []string
	add := func(field string, x, y any) {
		if x != y {
			d = append(d, fmt.Sprintf("%s %v→%v", field, x, y))
		}
	}
	add("limitPerWindow", a.LimitPerWindow, b.LimitPerWindow)
	add("windowMs", a.WindowMs, b.WindowMs)
	add("concurrency", a.Concurrency, b.Concurrency)
	add("leaseTtlMs", a.LeaseTTLMs, b.LeaseTTLMs)
	add("refillFraction", a.RefillFraction, b.RefillFraction)
	add("maxWaitMs", a.MaxWaitMs, b.MaxWaitMs)
	add("startToleranceMs", a.StartToleranceMs, b.StartToleranceMs)
	add("retry.attempts", a.Retry.Attempts, b.Retry.Attempts)
	add("retry.floorMs", a.Retry.FloorMs, b.Retry.FloorMs)
	add("retry.ceilingMs", a.Retry.CeilingMs, b.Retry.CeilingMs)
	add("retry.factor", a.Retry.Factor, b.Retry.Factor)
	return "(" + strings.Join(d, ", ") + ")"
}

func runLimitsStats(ctx context.Context, o *limitsRemote, con *console, save bool, out io.Writer) error {
	var old *parsedLimits
	format, err := formatOf(o.File)
	if save {
		if err != nil {
			return err
		}
		// The file is read before anything is fetched: one that does not
		// read cleanly cannot be rewritten faithfully.
		if old, err = readLimitsFile(o.File); errors.Is(err, os.ErrNotExist) {
			old = nil
		} else if err != nil {
			return fmt.Errorf("not rewriting it: %w", err)
		}
	}
	lc, pc, err := o.connect(con)
	if err != nil {
		return err
	}
	list, err := lc.List(ctx)
	if err != nil {
		return explain(err)
	}
	state := make(limits, len(list))
	statuses := make([]wire.LimiterStatus, 0, len(list))
	bar := con.progress(len(list), "reading")
	for _, l := range list {
		st, err := lc.Get(ctx, l.Name)
		if errors.Is(err, wire.ErrNoSuchLimiter) {
			continue // gone since the list was read
		}
		if err != nil {
			bar.end()
			return fmt.Errorf("limiter %q: %w", l.Name, explain(err))
		}
		statuses = append(statuses, st)
		state[st.Name] = st.Config
		bar.step()
	}
	bar.end()
	printLimiterStats(out, statuses)
	policies, err := pc.List(ctx)
	var we *wire.Error
	if errors.As(err, &we) && we.Code == wire.CodeNotFound && (old == nil || len(old.routes) == 0) {
		// A server from before the policies endpoints: it has none, and
		// the file names none to lose.
		policies, err = nil, nil
	}
	if err != nil {
		return fmt.Errorf("reading the route policies: %w", explain(err))
	}
	rts := make(routes, len(policies))
	for _, p := range policies {
		rts[p.Name] = p.Config
	}
	printPolicies(out, policies)
	if !save {
		return nil
	}
	b, err := renderLimits(format, old, state, rts)
	if err != nil {
		return err
	}
	if old != nil && string(b) == string(old.raw) {
		fmt.Fprintf(out, "%s already describes the server's %d limiter(s) and %d route policy(ies): left as it is\n", o.File, len(state), len(rts))
		return nil
	}
	if err := writeLimitsFile(o.File, b, true); err != nil {
		return err
	}
	fmt.Fprintf(out, "wrote the server's %d limiter(s) and %d route policy(ies) to %s\n", len(state), len(rts), o.File)
	return nil
}

// printLimiterStats prints one line per limiter.
func printLimiterStats(out io.Writer, statuses []wire.LimiterStatus) {
	if len(statuses) == 0 {
		fmt.Fprintln(out, "no limiters configured")
		return
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "LIMITER\tLIMIT\tCONCURRENCY\tREMAINING\tEMPTY IN\tPENALTY\tIN FLIGHT\tWAITING")
	for _, st := range statuses {
		c, s := st.Config, st.Stats
		conc := "-"
		if c.Concurrency > 0 {
			conc = fmt.Sprint(c.Concurrency)
		}
		penalty := "-"
		if s.PenaltyUntil > s.At {
			penalty = msDuration(s.PenaltyUntil - s.At)
		}
		fmt.Fprintf(tw, "%s\t%d per %s\t%s\t%d\t%s\t%s\t%d\t%d\n", st.Name, c.LimitPerWindow, msDuration(c.WindowMs),
			conc, s.Remaining, msDuration(max(s.ResetAt-s.At, 0)), penalty, s.InFlight, s.Waiting)
	}
	tw.Flush()
}

// printPolicies prints one line per route quota policy, if there are any.
func printPolicies(out io.Writer, policies []wire.Policy) {
	if len(policies) == 0 {
		return
	}
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ROUTE POLICY\tLIMIT\tKIND")
	for _, p := range policies {
		fmt.Fprintf(tw, "%s\t%d per %s\t%s\n", p.Name, p.Config.Limit, msDuration(p.Config.WindowMs), p.Config.Kind)
	}
	tw.Flush()
}

func msDuration(ms int64) string { return (time.Duration(ms) * time.Millisecond).String() }

// writeLimitsFile writes data to path atomically: it appears whole or not
// at all. An existing file is replaced only with replace, and keeps its
// mode.
func writeLimitsFile(path string, data []byte, replace bool) error {
	mode := os.FileMode(0o644)
	if fi, err := os.Stat(path); err == nil {
		if !replace {
			return fmt.Errorf("%s exists: pass --force to replace it", path)
		}
		mode = fi.Mode().Perm()
	}
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if !replace {
		// A hard link fails if path appeared meanwhile, unlike a rename.
		return os.Link(tmp.Name(), path)
	}
	return os.Rename(tmp.Name(), path)
}
