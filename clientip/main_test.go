package clientip_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if any test leaves a goroutine behind: resolution starts nothing of its own.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
