package coalesce_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if any test leaves a goroutine behind: a queue's drain goroutine ends once the queue is empty.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
