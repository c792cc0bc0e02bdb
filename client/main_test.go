package client_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if any test leaves a goroutine behind: its tests start servers, and a client keeps no goroutine of its own once closed.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
