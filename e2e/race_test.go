//go:build race

package e2e

// raceEnabled builds the server binary with the race detector when the
// tests themselves run under it.
const raceEnabled = true
