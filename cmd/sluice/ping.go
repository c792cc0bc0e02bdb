package main

import (
	"context"
	"fmt"
	"io"
	"net/http"

	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/wire"
)

func newPingCmd() *cobra.Command {
	var r remote
	cmd := &cobra.Command{
		Use:   "ping",
		Short: "Report a server's protocol version and readiness",
		Long: `Report a server's protocol version, build version and readiness.

Fails when the server speaks another protocol version than this sluice, when
it is not ready (an invalid configuration, an unreachable store) or when it
cannot be reached.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runPing(cmd.Context(), &r, cmd.OutOrStdout())
		},
	}
	r.addFlags(cmd.Flags())
	return cmd
}

func runPing(ctx context.Context, r *remote, out io.Writer) error {
	hc, err := r.httpClient()
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.endpoint(wire.PathPing), nil)
	if err != nil {
		return err
	}
	var ping wire.Ping
	if err := call(hc, req, &ping); err != nil {
		return fmt.Errorf("pinging %s: %w", r.URL, explain(err))
	}
	fmt.Fprintf(out, "server    %s\nprotocol  %d\nversion   %s\n", r.URL, ping.Protocol, ping.Version)
	if ping.Protocol != wire.ProtocolVersion {
		return fmt.Errorf("protocol mismatch: the server speaks version %d, this sluice speaks version %d; upgrade the older side",
			ping.Protocol, wire.ProtocolVersion)
	}
	req, err = http.NewRequestWithContext(ctx, http.MethodGet, r.endpoint(wire.PathReadyz), nil)
	if err != nil {
		return err
	}
	var ready map[string]string
	if err := call(hc, req, &ready); err != nil {
		fmt.Fprintf(out, "ready     no\n")
		return fmt.Errorf("the server is not ready: %w", explain(err))
	}
	fmt.Fprintf(out, "ready     yes\n")
	return nil
}
