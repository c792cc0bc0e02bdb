package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/wire"
)

// exitDenied is the exit status of a denied hit, so scripts can tell a
// denial (2) from a failure (1).
const exitDenied = 2

// hitOptions is one win.hit asked for at a terminal.
type hitOptions struct {
	remote
	Secret, Pepper string
	Family         string
	Partition, Key string
	Kind           string
	Limit          int64
	Window         time.Duration
	Cost           int64
	// Source and Principal, when set (Fair), are the caller's identities
	// for admission fairness, hashed as the Go client hashes them.
	Source, Principal string
	Fair              bool
	// Count is the number of hits to make, one RPC each.
	Count int
}

func newHitCmd() *cobra.Command {
	var o hitOptions
	cmd := &cobra.Command{
		Use:   "hit",
		Short: "Make one rate-limit check against a server",
		Long: `Make one rate-limit check (a win.hit of one window) against a server, as an
application would, and print the decision.

The partition and key are hashed with the pepper before they leave, exactly as
the Go client does, so the check lands on the same counter as an application
using the same pepper. The secret and pepper come from their flags or
variables, or from the data directory of a server on this machine.

--source and --principal send the caller's fairness identities as the Go
client does (WithFairness): the source address reduced to its bucket and
prefix tiers and hashed, the principal hashed; a missing, unspecified or
unparsable source is the shared unknown bucket.

--count N makes N hits, one RPC each, and prints how many the server
admitted, how many the window allowed, and how many admission refused, with
the code of the first refusal (guard_limited for a fairness quota,
guard_stopped for a stopped server or a stopped or exhausted family). Any
other failure ends the hits at once: "hits" then counts those made, the
failed one among them.

Exits 0 when every hit is allowed, 2 when one is denied or refused and 1 on
a failure.`,
		Example: `  sluice hit --partition user:42 --key api --limit 10 --window 1m
  sluice hit --partition ip:203.0.113.9 --key login --kind gcra --limit 5 --window 15m --cost 1
  sluice hit --family replay --source 2001:db8::7 --principal user:42 --partition p --limit 1000 --window 1h --count 50`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Fair = cmd.Flags().Changed("source") || cmd.Flags().Changed("principal")
			if o.Count > 1 {
				return runHits(cmd.Context(), &o, cmd.OutOrStdout())
			}
			if o.Count < 1 {
				return fmt.Errorf("--count %d: want at least 1", o.Count)
			}
			return runHit(cmd.Context(), &o, cmd.OutOrStdout())
		},
	}
	fl := cmd.Flags()
	o.remote.addFlags(fl)
	fl.StringVar(&o.Secret, "secret", "", "signing secret (default: the first line of the data directory's secret file)")
	fl.StringVar(&o.Pepper, "pepper", "", "key-hashing pepper (default: the data directory's pepper file)")
	fl.StringVar(&o.Family, "family", client.DefaultFamily, "admission family of the request")
	fl.StringVar(&o.Partition, "partition", "", "partition to check, such as user:42 (required)")
	fl.StringVar(&o.Key, "key", "hit", "window key inside the partition")
	fl.StringVar(&o.Kind, "kind", "sliding", "window kind: fixed, sliding, log or gcra")
	fl.Int64Var(&o.Limit, "limit", 0, "cost admitted per window (required)")
	fl.DurationVar(&o.Window, "window", 0, "window length, such as 1s, 1m or 24h (required)")
	fl.Int64Var(&o.Cost, "cost", 1, "cost of this hit")
	fl.StringVar(&o.Source, "source", "", "the caller's address, for admission fairness (hashed before it leaves)")
	fl.StringVar(&o.Principal, "principal", "", "the caller's verified user or token, for admission fairness (hashed before it leaves)")
	fl.IntVar(&o.Count, "count", 1, "number of hits to make, one RPC each")
	bindEnv(fl, "secret", client.EnvSecret)
	bindEnv(fl, "pepper", client.EnvPepper)
	bindEnv(fl, "family", client.EnvFamily)
	for _, name := range []string{"partition", "limit", "window"} {
		_ = cmd.MarkFlagRequired(name)
	}
	return cmd
}

// hitter makes the hits of o.
type hitter struct {
	eng *engine.Engine
	cmd engine.Command
}

// newHitter checks o and connects its client; release closes it.
func newHitter(o *hitOptions) (h *hitter, release func(), err error) {
	kind, err := algo.ParseKind(o.Kind)
	if err != nil {
		return nil, nil, fmt.Errorf("--kind %q: want fixed, sliding, log or gcra", o.Kind)
	}
	if o.Window%time.Millisecond != 0 || o.Window <= 0 {
		return nil, nil, fmt.Errorf("--window %s: want a positive whole number of milliseconds", o.Window)
	}
	// The client reads a zero timeout as its default and clamps the
	// others into its bounds: refuse what it would replace.
	if o.Timeout < client.MinTimeout || o.Timeout > client.MaxTimeout {
		return nil, nil, fmt.Errorf("--timeout %s: want %s…%s, the bounds of a client call", o.Timeout, client.MinTimeout, client.MaxTimeout)
	}
	cfg, err := o.clientConfig()
	if err != nil {
		return nil, nil, err
	}
	c := client.New(cfg)
	if err := c.Err(); err != nil {
		c.Close()
		return nil, nil, err
	}
	view := c
	if o.Fair {
		view = c.WithFairness(o.Source, o.Principal)
	}
	return &hitter{eng: engine.New(view),
		cmd: engine.Hit(o.Cost, engine.Window{Key: o.Key, Kind: kind, Limit: o.Limit, WindowMs: o.Window.Milliseconds()}),
	}, func() { c.Close() }, nil
}

// hit makes one hit of partition with a fresh operation id.
func (h *hitter) hit(ctx context.Context, partition string) (engine.Result, error) {
	req := engine.Request{
		OperationID: engine.NewOperationID(),
		Steps:       []engine.Step{{Partition: partition, Commands: []engine.Command{h.cmd}}},
	}
	resp, err := h.eng.Do(ctx, &req)
	if err != nil {
		return engine.Result{}, err
	}
	return resp.Steps[0].Results[0], nil
}

func runHit(ctx context.Context, o *hitOptions, out io.Writer) error {
	h, release, err := newHitter(o)
	if err != nil {
		return err
	}
	defer release()
	r, err := h.hit(ctx, o.Partition)
	if code, reason, ok := refusal(err); ok {
		fmt.Fprintf(out, "allowed      no\nrefused      %s", code)
		if reason != "" {
			fmt.Fprintf(out, ": %s", reason)
		}
		fmt.Fprintln(out)
		return exitError{code: exitDenied}
	}
	if err != nil {
		return explain(err)
	}
	allowed := "yes"
	if !r.Allowed {
		allowed = "no"
	}
	// ResetAt is an instant of the server's clock, shown as such rather
	// than compared with this machine's.
	fmt.Fprintf(out, "allowed      %s\nremaining    %d\nretry after  %s\nreset at     %s (server clock)\n",
		allowed, r.Remaining, ms(r.RetryAfterMs), time.UnixMilli(r.ResetAt).UTC().Format(time.RFC3339Nano))
	if !r.Allowed {
		return exitError{code: exitDenied}
	}
	return nil
}

// runHits makes o.Count hits and prints what admission and the window made
// of them. A refusal by admission (guard_limited, guard_stopped) is counted
// and the hits go on; any other failure ends them, and the output counts
// the hits made, the failed one among them.
func runHits(ctx context.Context, o *hitOptions, out io.Writer) error {
	h, release, err := newHitter(o)
	if err != nil {
		return err
	}
	defer release()
	var made, admitted, allowed, refused int
	var first wire.Code
	var failure error
	for range o.Count {
		made++
		r, err := h.hit(ctx, o.Partition)
		if err == nil {
			admitted++
			if r.Allowed {
				allowed++
			}
			continue
		}
		if code, _, ok := refusal(err); ok {
			refused++
			if first == "" {
				first = code
			}
			continue
		}
		failure = explain(err)
		break
	}
	if failure != nil {
		fmt.Fprintf(out, "hits         %d of %d\n", made, o.Count)
	} else {
		fmt.Fprintf(out, "hits         %d\n", made)
	}
	fmt.Fprintf(out, "admitted     %d\nallowed      %d\nrefused      %d", admitted, allowed, refused)
	if first != "" {
		fmt.Fprintf(out, " (first: %s)", first)
	}
	fmt.Fprintln(out)
	switch {
	case failure != nil:
		fmt.Fprintln(out, "failed       1")
		return failure
	case allowed < o.Count:
		return exitError{code: exitDenied}
	}
	return nil
}

// refusal reports whether err is a refusal by admission (guard_limited for
// a fairness quota, guard_stopped for a stopped or exhausted family), which
// the hit commands count as a denial, with its code and reason.
func refusal(err error) (wire.Code, string, bool) {
	var werr *wire.Error
	if errors.As(err, &werr) && (werr.Code == wire.CodeLimited || werr.Code == wire.CodeStopped) {
		return werr.Code, werr.Reason, true
	}
	return "", "", false
}

// clientConfig returns the client configuration of o, reading the secret
// and pepper from the data directory when no flag gives them.
func (o *hitOptions) clientConfig() (client.Config, error) {
	cfg := client.DefaultConfig()
	cfg.URL, cfg.Family, cfg.Timeout = o.URL, o.Family, o.Timeout
	cfg.Secret, cfg.Pepper = o.Secret, o.Pepper
	var err error
	if cfg.Secret == "" {
		if cfg.Secret, err = readOneCredential(o.DataDir, secretFile); err != nil {
			return cfg, fmt.Errorf("no signing secret: pass --secret or $%s, or run from beside the server's data directory (%w)", client.EnvSecret, err)
		}
	}
	if cfg.Pepper == "" {
		if cfg.Pepper, err = readOneCredential(o.DataDir, pepperFile); err != nil {
			return cfg, fmt.Errorf("no pepper: pass --pepper or $%s, or run from beside the server's data directory (%w)", client.EnvPepper, err)
		}
	}
	if o.CACert != "" {
		hc, err := o.httpClient()
		if err != nil {
			return cfg, err
		}
		hc.Timeout = 0 // the client bounds each call itself
		hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
		cfg.HTTPClient = hc
	}
	return cfg, nil
}

// ms formats a duration in milliseconds for a person.
func ms(d int64) string {
	return (time.Duration(d) * time.Millisecond).String()
}
