//go:build unix

package rpcbench

import (
	"syscall"
	"time"
)

// processUsage returns the user and system CPU time this process has used,
// and the context switches of all its threads (voluntary: a thread that
// blocked, in a system call or waiting for work; involuntary: one the
// kernel preempted).
func processUsage() usage {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return usage{}
	}
	return usage{
		cpu:      time.Duration(ru.Utime.Nano() + ru.Stime.Nano()),
		switches: uint64(ru.Nvcsw) + uint64(ru.Nivcsw),
	}
}
