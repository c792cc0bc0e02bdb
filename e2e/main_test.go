package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"
)

// sluiceBin is the sluice binary under test, built by TestMain.
var sluiceBin string

func TestMain(m *testing.M) {
	if job := os.Getenv(paceWorkerEnv); job != "" { // a worker of TestPacedCallsEndToEnd
		os.Exit(paceWorker(job))
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "sluice-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	sluiceBin = filepath.Join(dir, "sluice")
	args := []string{"build", "-o", sluiceBin}
	if raceEnabled {
		args = append(args, "-race")
	}
	build := exec.Command("go", append(args, "github.com/sluicehq/sluice/cmd/sluice")...)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: building sluice:", err)
		return 1
	}
	code := m.Run()
	if code == 0 {
		// The processes under test are separate; what the tests run in
		// this one (clients, stores, listeners) must end with them.
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "e2e: goroutines left behind:", err)
			code = 1
		}
	}
	return code
}
