package redisstore_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if any test leaves a goroutine behind: go-redis's pools close with their clients, and the test servers are stopped.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
