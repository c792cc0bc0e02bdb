package pace_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if any test leaves a goroutine behind: a bound limiter's renewals and timers end with its calls.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
