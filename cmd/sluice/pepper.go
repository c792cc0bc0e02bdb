package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/client"
)

func newPepperCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "pepper",
		Short: "Print a new random key-hashing pepper",
		Long: `Print a new random key-hashing pepper, for a fleet that keeps its
credentials in a secret store rather than in a data directory (servers
sharing one Redis, say): give the same pepper to every server and client
sharing the quotas, with --pepper or SLUICE_PEPPER.

The pepper is in the compact form ("` + client.CompactPrefix + `" and 32 random
bytes), as sluice serve creates in a new data directory: clients name keys
by 22 characters under it. A new pepper names nothing as an old one did,
so replacing a pepper in use starts every counter afresh
(docs/operations.md, "Key names and the pepper's form").`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), client.NewPepper())
			return err
		},
	}
}
