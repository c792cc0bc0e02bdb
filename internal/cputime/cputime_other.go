//go:build !unix

package cputime

import "time"

// Process reports the CPU time as unknown on this platform.
func Process() (time.Duration, bool) { return 0, false }
