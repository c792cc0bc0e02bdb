package diskstore_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if any test leaves a goroutine behind: the sweeper and the syncer end when the store is closed.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
