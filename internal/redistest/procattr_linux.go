package redistest

import "syscall"

// sysProcAttr kills a server when the test process dies before its cleanup
// runs, so that an interrupted test run leaves no redis-server behind.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
