package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

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

// do calls an operator endpoint and prints the fence state it answers.
func (o *operatorRemote) do(ctx context.Context, method, path string, body any, out io.Writer) error {
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
	var st server.FenceState
	if err := call(hc, req, &st); err != nil {
		return fmt.Errorf("%s %s: %w", method, path, explain(err))
	}
	printFence(out, st)
	return nil
}

func printFence(out io.Writer, st server.FenceState) {
	if !st.Stopped {
		fmt.Fprintln(out, "running")
		return
	}
	fmt.Fprintf(out, "stopped since %s: %s\n", st.Since.UTC().Format(time.RFC3339), st.Reason)
}

func newControlCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "control",
		Short: "Operate a server's stop fence",
		Long: `Operate a server's durable stop fence with the operator token.

A stopped server answers every RPC 503 guard_stopped before running any
command; stored data is kept, and the stop survives restarts until resumed.
The token comes from --operator-token, $SLUICE_OPERATOR_TOKEN, or the
operator-token file of the data directory.`,
	}
	var o operatorRemote
	o.addFlags(cmd.PersistentFlags())
	var reason string
	stopCmd := &cobra.Command{
		Use:   "stop",
		Short: "Stop every RPC until resumed",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.do(cmd.Context(), http.MethodPost, wire.PathStop, server.StopRequest{Reason: reason}, cmd.OutOrStdout())
		},
	}
	stopCmd.Flags().StringVar(&reason, "reason", "", "why, for the logs and the state (default \"operator stop\")")
	resumeCmd := &cobra.Command{
		Use:   "resume",
		Short: "Clear the stop fence",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.do(cmd.Context(), http.MethodPost, wire.PathResume, nil, cmd.OutOrStdout())
		},
	}
	stateCmd := &cobra.Command{
		Use:   "state",
		Short: "Print the stop fence",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.do(cmd.Context(), http.MethodGet, wire.PathState, nil, cmd.OutOrStdout())
		},
	}
	cmd.AddCommand(stopCmd, resumeCmd, stateCmd)
	return cmd
}
