package main

import (
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

func mapEnv(m map[string]string) lookupEnvFunc {
	return func(k string) (string, bool) {
		v, ok := m[k]
		return v, ok
	}
}

func TestApplyEnv(t *testing.T) {
	newSet := func() (*pflag.FlagSet, *string, *string, *time.Duration) {
		fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
		addr := fs.String("addr", "default", "")
		token := fs.String("token", "", "")
		wait := fs.Duration("wait", time.Second, "")
		bindEnv(fs, "addr", "T_ADDR")
		bindEnv(fs, "token", "T_TOKEN")
		bindEnv(fs, "wait", "T_WAIT")
		return fs, addr, token, wait
	}

	t.Run("flag beats environment", func(t *testing.T) {
		fs, addr, _, _ := newSet()
		if err := fs.Parse([]string{"--addr", "from-flag"}); err != nil {
			t.Fatal(err)
		}
		if err := applyEnv(fs, mapEnv(map[string]string{"T_ADDR": "from-env"})); err != nil {
			t.Fatal(err)
		}
		if *addr != "from-flag" {
			t.Errorf("addr %q, want the flag's", *addr)
		}
	})
	t.Run("environment beats default", func(t *testing.T) {
		fs, addr, _, wait := newSet()
		_ = fs.Parse(nil)
		if err := applyEnv(fs, mapEnv(map[string]string{"T_ADDR": "from-env", "T_WAIT": "3s"})); err != nil {
			t.Fatal(err)
		}
		if *addr != "from-env" || *wait != 3*time.Second {
			t.Errorf("addr %q wait %s, want the environment's", *addr, *wait)
		}
	})
	t.Run("explicitly empty counts as set", func(t *testing.T) {
		fs, _, token, _ := newSet()
		_ = fs.Parse(nil)
		if err := applyEnv(fs, mapEnv(map[string]string{"T_TOKEN": ""})); err != nil {
			t.Fatal(err)
		}
		if !fs.Changed("token") || *token != "" {
			t.Errorf("an empty T_TOKEN: changed %v, value %q", fs.Changed("token"), *token)
		}
	})
	t.Run("unset leaves the default", func(t *testing.T) {
		fs, addr, _, _ := newSet()
		_ = fs.Parse(nil)
		if err := applyEnv(fs, mapEnv(nil)); err != nil {
			t.Fatal(err)
		}
		if *addr != "default" || fs.Changed("addr") {
			t.Errorf("addr %q, changed %v", *addr, fs.Changed("addr"))
		}
	})
	t.Run("malformed value names the variable", func(t *testing.T) {
		fs, _, _, _ := newSet()
		_ = fs.Parse(nil)
		err := applyEnv(fs, mapEnv(map[string]string{"T_WAIT": "soon"}))
		if err == nil || !strings.Contains(err.Error(), "$T_WAIT") {
			t.Errorf("error %v, want one naming $T_WAIT", err)
		}
	})
	t.Run("help names the variable", func(t *testing.T) {
		fs, _, _, _ := newSet()
		if u := fs.Lookup("addr").Usage; !strings.Contains(u, "$T_ADDR") {
			t.Errorf("usage %q does not name $T_ADDR", u)
		}
	})
}

// TestEveryFlagHasAnEnvironmentVariable walks the command tree: every flag
// that configures (rather than describes the one call being made) falls
// back to a SLUICE_* variable.
func TestEveryFlagHasAnEnvironmentVariable(t *testing.T) {
	perCall := map[string]bool{
		"help": true, "timeout": true, "reason": true,
		"partition": true, "key": true, "kind": true, "limit": true, "window": true, "cost": true,
		"source": true, "principal": true, "count": true, "actor": true, "before": true,
		"dry-run": true, "force": true, "save": true, // sluice limits
		// sluice hit's --family falls back to SLUICE_FAMILY; an operator's
		// --family never falls back to anything, so a stop without one is
		// always the global stop.
		"family": true,
	}
	root := newRootCmd(mapEnv(nil))
	cmds := root.Commands()
	for len(cmds) > 0 {
		cmd := cmds[0]
		cmds = append(cmds[1:], cmd.Commands()...)
		if cmd.Name() == "help" || cmd.Name() == "completion" || cmd.HasParent() && cmd.Parent().Name() == "completion" {
			continue
		}
		check := func(f *pflag.Flag) {
			if perCall[f.Name] {
				return
			}
			env := f.Annotations[envAnnotation]
			if len(env) != 1 || !strings.HasPrefix(env[0], "SLUICE_") {
				t.Errorf("%s --%s has no SLUICE_* variable", cmd.CommandPath(), f.Name)
			}
		}
		cmd.LocalFlags().VisitAll(check)
	}
}
