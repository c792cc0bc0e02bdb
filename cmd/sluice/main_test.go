package main

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if any test leaves a goroutine behind: the
// commands close their clients, and the tests their servers and stores.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
