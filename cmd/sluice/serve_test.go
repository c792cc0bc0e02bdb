package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// serveProcessDirEnv names the data directory of the sluice serve that
// TestServeProcess runs in a child process: the test binary, executed
// again, runs the command tree as the sluice binary does.
const serveProcessDirEnv = "SLUICE_TEST_SERVE_PROCESS_DIR"

// TestServeProcess runs sluice serve in a process of its own on a data
// directory. A second serve on that directory is refused at start with a
// reason that says another process holds it; SIGTERM then drains the first
// one, which exits 0 having logged "stopped"; and the directory it leaves
// opens again.
func TestServeProcess(t *testing.T) {
	if dir := os.Getenv(serveProcessDirEnv); dir != "" {
		// As main does: a failure is reported on standard error and
		// ends the process with status 1. No SLUICE_* variable of the
		// test's environment applies.
		root := newRootCmd(mapEnv(nil))
		root.SetArgs([]string{"serve", "--data-dir", dir, "--addr", "127.0.0.1:0"})
		if err := root.Execute(); err != nil {
			fmt.Fprintln(os.Stderr, "sluice:", err)
			os.Exit(1)
		}
		return
	}
	dir := filepath.Join(t.TempDir(), "data")
	serve := func() *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^TestServeProcess$", "-test.count=1")
		cmd.Env = append(os.Environ(), serveProcessDirEnv+"="+dir)
		return cmd
	}
	cmd := serve()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	sc := bufio.NewScanner(stderr)
	var log strings.Builder
	for sc.Scan() {
		log.WriteString(sc.Text() + "\n")
		if strings.Contains(sc.Text(), "msg=listening") {
			break
		}
	}
	if !strings.Contains(log.String(), "msg=listening") {
		t.Fatalf("the first serve ended without listening:\n%s", log.String())
	}
	rest := make(chan string)
	go func() {
		var b strings.Builder
		for sc.Scan() {
			b.WriteString(sc.Text() + "\n")
		}
		rest <- b.String()
	}()

	second, err := serve().CombinedOutput()
	if err == nil || !strings.Contains(string(second), "in use by another process") || !strings.Contains(string(second), "one server may use a data directory") {
		t.Errorf("a second serve on the data directory: %v\n%s\nwant it to fail, saying another process holds the directory", err, second)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	log.WriteString(<-rest)
	if err := cmd.Wait(); err != nil {
		t.Errorf("the first serve after SIGTERM: %v, want exit status 0\n%s", err, log.String())
	}
	if !strings.Contains(log.String(), "msg=stopped") {
		t.Errorf("the first serve did not log that it stopped:\n%s", log.String())
	}
	if err := serveUntilListening(t, nil, "--data-dir", dir, "--addr", "127.0.0.1:0"); err != nil {
		t.Errorf("serve on the data directory left by SIGTERM: %v", err)
	}
}
