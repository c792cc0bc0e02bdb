package cputime_test

import (
	"runtime"
	"testing"

	"github.com/sluicehq/sluice/internal/cputime"
)

// The CPU time read grows with work done, on platforms where it is known.
func TestProcessGrowsWithWork(t *testing.T) {
	before, ok := cputime.Process()
	if !ok {
		if runtime.GOOS != "windows" && runtime.GOOS != "plan9" && runtime.GOOS != "js" && runtime.GOOS != "wasip1" {
			t.Fatalf("CPU time unknown on %s", runtime.GOOS)
		}
		t.Skipf("CPU time is not measured on %s", runtime.GOOS)
	}
	x := uint64(1)
	for range 1 << 26 { // tens of milliseconds of CPU
		x = x*6364136223846793005 + 1442695040888963407
	}
	after, _ := cputime.Process()
	if after <= before {
		t.Fatalf("CPU time %v after work, %v before (%x)", after, before, x)
	}
}
