package main

import (
	"fmt"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// lookupEnvFunc reads an environment variable; os.LookupEnv in main, a map
// in tests.
type lookupEnvFunc func(key string) (string, bool)

// exitError ends the process with code and no further message: the command
// has already said what happened.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// newRootCmd returns the sluice command tree. Flags not given on the command
// line take their value from the SLUICE_* variable named in their help,
// read through lookupEnv.
func newRootCmd(lookupEnv lookupEnvFunc) *cobra.Command {
	root := &cobra.Command{
		Use:   "sluice",
		Short: "Shared, durable, correct rate limiting for fleets of services",
		Long: `Sluice is shared, durable, correct rate limiting for fleets of services.

"sluice serve" runs the server on the embedded durable store with no
configuration at all; the other commands talk to a running server.
Every flag falls back to the SLUICE_* environment variable named in its help.`,
		Version:       version(),
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			return applyEnv(cmd.Flags(), lookupEnv)
		},
	}
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return fmt.Errorf("%w (see %q)", err, cmd.CommandPath()+" --help")
	})
	root.AddCommand(newServeCmd(), newPingCmd(), newHitCmd(), newControlCmd())
	root.AddCommand(newLimitsCmd(), newPepperCmd())
	return root
}

// version returns the module version of the binary, with the commit it was
// built from when known.
func version() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "dev"
	}
	v := info.Main.Version
	if v == "" || v == "(devel)" {
		v = "dev"
	}
	var rev, dirty string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "-dirty"
			}
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if rev != "" && v == "dev" {
		v += "+" + rev + dirty
	}
	return v
}
