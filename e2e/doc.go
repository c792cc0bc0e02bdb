// Package e2e holds Sluice's whole-system tests: each starts the real sluice
// binary (built once per run) on a free loopback port and talks to it over
// HTTP as a client, an operator or a hostile peer would, restarting it where
// a property must survive a restart. Where a property spans processes of
// its clients, the test binary runs again as those processes (see
// TestMain and TestPacedCallsEndToEnd).
//
// Run them with go test ./e2e/. They need nothing but the Go toolchain.
package e2e
