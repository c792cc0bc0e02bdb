package main

import (
	"errors"
	"fmt"

	"github.com/spf13/pflag"
)

// envAnnotation is the flag annotation naming a flag's environment
// variable.
const envAnnotation = "sluice_env"

// bindEnv makes the environment variable env the fallback of the flag name
// of fs and says so in the flag's help.
func bindEnv(fs *pflag.FlagSet, name, env string) {
	f := fs.Lookup(name)
	if f == nil {
		panic("bindEnv: no flag " + name) // a programming error in this package
	}
	f.Usage += fmt.Sprintf(" [$%s]", env)
	if f.Annotations == nil {
		f.Annotations = map[string][]string{}
	}
	f.Annotations[envAnnotation] = []string{env}
}

// applyEnv sets every flag of fs that was not given on the command line
// from its environment variable, when that variable is set (even to the
// empty string: an explicitly empty secret is a configuration error, not a
// request for the default).
func applyEnv(fs *pflag.FlagSet, lookupEnv lookupEnvFunc) error {
	var errs []error
	fs.VisitAll(func(f *pflag.Flag) {
		env := f.Annotations[envAnnotation]
		if f.Changed || len(env) == 0 {
			return
		}
		v, ok := lookupEnv(env[0])
		if !ok {
			return
		}
		if err := fs.Set(f.Name, v); err != nil {
			errs = append(errs, fmt.Errorf("$%s: %w", env[0], err))
		}
	})
	return errors.Join(errs...)
}
