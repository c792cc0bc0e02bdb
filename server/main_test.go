package server_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if any test leaves a goroutine behind: the server's handlers and its tests' listeners end when closed.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
