package redistest_test

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/redistest"
)

// outcome is a testing.TB that records how a test it stands for ends:
// Fatalf and Skipf record their message and end the goroutine, as the
// real ones do.
type outcome struct {
	testing.TB
	fatal, skip string
}

func (o *outcome) Helper() {}

func (o *outcome) Fatalf(format string, args ...any) {
	o.fatal = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func (o *outcome) Skipf(format string, args ...any) {
	o.skip = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// binaryWithout runs Binary on a PATH holding no redis-server, with CI set
// to ci, and returns how the test it was given ended.
func binaryWithout(t *testing.T, ci string) *outcome {
	t.Setenv("PATH", t.TempDir())
	t.Setenv("CI", ci)
	o := &outcome{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		redistest.Binary(o)
	}()
	<-done
	return o
}

// TestBinaryMissing: without redis-server, a test that needs it is
// skipped with a loud message on a developer's machine, and fails under
// CI=true, so that CI never passes by skipping the Redis tests.
func TestBinaryMissing(t *testing.T) {
	if o := binaryWithout(t, ""); o.fatal != "" || !strings.Contains(o.skip, "redis-server is not installed") {
		t.Errorf("outside CI: fatal %q, skip %q; want a skip naming the missing redis-server", o.fatal, o.skip)
	}
	if o := binaryWithout(t, "true"); o.skip != "" || !strings.Contains(o.fatal, "required under CI=true") {
		t.Errorf("under CI=true: fatal %q, skip %q; want a failure", o.fatal, o.skip)
	}
}
