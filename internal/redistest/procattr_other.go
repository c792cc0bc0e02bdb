//go:build !linux

package redistest

import "syscall"

// sysProcAttr has nothing to add where the parent's death cannot be
// forwarded: servers are stopped by the tests' cleanups only.
func sysProcAttr() *syscall.SysProcAttr { return nil }
