//go:build !unix

package rpcbench

// processUsage is not measured on this platform.
func processUsage() usage { return usage{} }
