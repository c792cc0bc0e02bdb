package e2e

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// startTimeout bounds how long a server may take to start or stop before
// the test fails; it is a failure bound, not a performance claim.
const startTimeout = 60 * time.Second

// serverOptions configure one sluice serve process.
type serverOptions struct {
	// Args follow "sluice serve".
	Args []string
	// Env is added to an environment cleared of every SLUICE_* variable.
	Env []string
	// Dir is the working directory, so the default data directory is
	// Dir/sluice-data. Empty means a fresh temporary directory.
	Dir string
	// Misconfigured servers are waited for on /healthz, since /readyz
	// refuses them.
	Misconfigured bool
	// Secret is the signing secret the helpers sign with; empty means the
	// first line of the data directory's secret file.
	Secret string
	// Client reaches the server; nil means httpClient. A TLS server needs
	// one trusting its certificate.
	Client *http.Client
}

// server is one running sluice serve process.
type server struct {
	t    *testing.T
	opts serverOptions

	cmd    *exec.Cmd
	logs   *logSink
	exited chan struct{}
	// URL is the server's base URL, Addr its host:port.
	URL, Addr string
}

// startServer starts sluice serve and waits until it is ready. The process
// is killed and reaped when the test ends, if it is still running.
func startServer(t *testing.T, opts serverOptions) *server {
	t.Helper()
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	if opts.Client == nil {
		opts.Client = httpClient
	}
	s := &server{t: t, opts: opts}
	s.start()
	return s
}

// DataDir is the server's default data directory.
func (s *server) DataDir() string { return filepath.Join(s.opts.Dir, "sluice-data") }

func (s *server) start() {
	t := s.t
	t.Helper()
	cmd := exec.Command(sluiceBin, append([]string{"serve"}, s.opts.Args...)...)
	cmd.Dir = s.opts.Dir
	cmd.Env = append(cleanEnv(), "SLUICE_ADDR=127.0.0.1:0", "SLUICE_LOG_FORMAT=json")
	cmd.Env = append(cmd.Env, s.opts.Env...)
	s.logs = &logSink{}
	cmd.Stdout, cmd.Stderr = s.logs, s.logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting sluice serve: %v", err)
	}
	s.cmd = cmd
	exited := make(chan struct{})
	s.exited = exited
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		select {
		case <-exited:
		default:
			_ = cmd.Process.Kill() // by its PID: we started it
			<-exited
		}
		if t.Failed() {
			t.Logf("logs of sluice serve (pid %d):\n%s", cmd.Process.Pid, s.logs)
		}
	})

	rec, ok := s.logs.waitFor(0, exited, func(r logRecord) bool { return r["msg"] == "listening" })
	if !ok {
		t.Fatalf("sluice serve did not start listening:\n%s", s.logs)
	}
	s.Addr, _ = rec["addr"].(string)
	s.URL = "http://" + s.Addr
	if tls, _ := rec["tls"].(bool); tls {
		s.URL = "https://" + s.Addr
	}
	path := "/readyz"
	if s.opts.Misconfigured {
		path = "/healthz"
	}
	s.waitOK(path)
}

// waitOK polls path until it answers 200, within startTimeout.
func (s *server) waitOK(path string) {
	s.t.Helper()
	deadline := time.Now().Add(startTimeout)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	last := "no answer"
	for time.Now().Before(deadline) {
		resp, err := s.opts.Client.Get(s.URL + path)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		select {
		case <-s.exited:
			s.t.Fatalf("sluice serve exited while starting:\n%s", s.logs)
		case <-tick.C:
		}
	}
	s.t.Fatalf("%s never answered 200 (last: %s):\n%s", path, last, s.logs)
}

// stop sends SIGTERM and waits for a clean exit.
func (s *server) stop() {
	s.t.Helper()
	s.signal(syscall.SIGTERM)
	s.waitExit(0)
}

// signal sends sig to the process.
func (s *server) signal(sig os.Signal) {
	s.t.Helper()
	if err := s.cmd.Process.Signal(sig); err != nil {
		s.t.Fatalf("signalling sluice serve: %v", err)
	}
}

// waitExit waits for the process to end and checks its exit status.
func (s *server) waitExit(want int) {
	s.t.Helper()
	select {
	case <-s.exited:
	case <-time.After(startTimeout):
		s.t.Fatalf("sluice serve did not exit:\n%s", s.logs)
	}
	if got := s.cmd.ProcessState.ExitCode(); got != want {
		s.t.Fatalf("sluice serve exited with status %d, want %d:\n%s", got, want, s.logs)
	}
}

// restart stops the server cleanly and starts it again on the same data.
func (s *server) restart() {
	s.t.Helper()
	s.stop()
	s.start()
}

// kill ends the process with SIGKILL, as a crash would.
func (s *server) kill() {
	s.t.Helper()
	_ = s.cmd.Process.Kill()
	<-s.exited
}

// cleanEnv returns the environment without any SLUICE_* variable, so a
// developer's settings cannot leak into a test.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SLUICE_") {
			env = append(env, kv)
		}
	}
	return env
}

// logRecord is one JSON log line.
type logRecord map[string]any

// logSink collects a process's output and lets tests wait for a line.
type logSink struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	lines   []string
	partial []byte
	changed chan struct{} // closed and replaced when a line arrives
}

func (l *logSink) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf.Write(p)
	l.partial = append(l.partial, p...)
	added := false
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			break
		}
		l.lines = append(l.lines, string(l.partial[:i]))
		l.partial = l.partial[i+1:]
		added = true
	}
	if added && l.changed != nil {
		close(l.changed)
		l.changed = nil
	}
	return len(p), nil
}

func (l *logSink) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// count returns the number of complete lines so far.
func (l *logSink) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.lines)
}

// waitFor returns the first JSON line at index from or later matching
// match, waiting for it until startTimeout passes or done is closed (the
// process exited: every line it wrote is in by then).
func (l *logSink) waitFor(from int, done <-chan struct{}, match func(logRecord) bool) (logRecord, bool) {
	timeout := time.After(startTimeout)
	finished := false
	for {
		rec, next, changed := l.scan(from, match)
		if rec != nil {
			return rec, true
		}
		if finished {
			return nil, false
		}
		from = next
		select {
		case <-changed:
		case <-done:
			finished = true
		case <-timeout:
			return nil, false
		}
	}
}

// scan looks for a matching line at index from or later. It returns the
// line, or the index to resume from and a channel closed on the next line.
func (l *logSink) scan(from int, match func(logRecord) bool) (logRecord, int, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for ; from < len(l.lines); from++ {
		var rec logRecord
		if json.Unmarshal([]byte(l.lines[from]), &rec) == nil && match(rec) {
			return rec, from, nil
		}
	}
	if l.changed == nil {
		l.changed = make(chan struct{})
	}
	return nil, from, l.changed
}
