package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/engine"
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

Exits 0 when the hit is allowed, 2 when it is denied and 1 on a failure.`,
		Example: `  sluice hit --partition user:42 --key api --limit 10 --window 1m
  sluice hit --partition ip:203.0.113.9 --key login --kind gcra --limit 5 --window 15m --cost 1`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
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
	bindEnv(fl, "secret", client.EnvSecret)
	bindEnv(fl, "pepper", client.EnvPepper)
	bindEnv(fl, "family", client.EnvFamily)
	for _, name := range []string{"partition", "limit", "window"} {
		_ = cmd.MarkFlagRequired(name)
	}
	return cmd
}

func runHit(ctx context.Context, o *hitOptions, out io.Writer) error {
	kind, err := algo.ParseKind(o.Kind)
	if err != nil {
		return fmt.Errorf("--kind %q: want fixed, sliding, log or gcra", o.Kind)
	}
	if o.Window%time.Millisecond != 0 || o.Window <= 0 {
		return fmt.Errorf("--window %s: want a positive whole number of milliseconds", o.Window)
	}
	cfg, err := o.clientConfig()
	if err != nil {
		return err
	}
	c := client.New(cfg)
	defer c.Close()
	if err := c.Err(); err != nil {
		return err
	}
	req := engine.Request{
		OperationID: engine.NewOperationID(),
		Steps: []engine.Step{{Partition: o.Partition, Commands: []engine.Command{
			engine.Hit(o.Cost, engine.Window{Key: o.Key, Kind: kind, Limit: o.Limit, WindowMs: o.Window.Milliseconds()}),
		}}},
	}
	resp, err := engine.New(c).Do(ctx, &req)
	if err != nil {
		return explain(err)
	}
	r := resp.Steps[0].Results[0]
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
