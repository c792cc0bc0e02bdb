// Package cputime reads the CPU time this process has used, for
// benchmarks that report it beside the wall time: on a shared machine the
// CPU time per operation holds much steadier than the time per operation,
// which also counts the time spent waiting for a core.
package cputime
