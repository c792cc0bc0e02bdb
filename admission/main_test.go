package admission_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if any test leaves a goroutine behind: its tests start servers and stores, and close them.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
