// Command sluice is the Sluice server and its command-line tools.
//
//	sluice serve                  run the server (embedded store, zero configuration)
//	sluice ping                   report a server's protocol version and readiness
//	sluice hit                    make rate-limit checks against a server
//	sluice control stop|resume|state|fairness-reset
//	                              operate a server's stop fence, family
//	                              stops and fairness quotas
//	sluice limits sample|apply|stats
//	                              keep a server's paced-call limiters in a
//	                              limits file under version control
//	sluice pepper                 print a new key-hashing pepper
//
// Every flag has a SLUICE_* environment variable as its fallback; run
// "sluice help COMMAND" for the list. docs/operations.md describes running
// the server and docs/protocol.md the wire contract.
package main

import (
	"errors"
	"fmt"
	"os"
)

func main() {
	err := newRootCmd(os.LookupEnv).Execute()
	if err == nil {
		return
	}
	var exit exitError
	if errors.As(err, &exit) {
		os.Exit(exit.code)
	}
	fmt.Fprintln(os.Stderr, "sluice:", err)
	os.Exit(1)
}
