package redisbench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"
)

// Server is a redis-server process the harness started on a free loopback
// port, persistence off, in a directory of its own. It is stopped by its
// process id.
type Server struct {
	Addr string
	cmd  *exec.Cmd
	done chan struct{}
	dir  string
}

// ErrNoRedis reports that redis-server is not installed.
var ErrNoRedis = errors.New("redisbench: redis-server is not installed (apt-get install redis-server)")

// StartServer starts redis-server with the extra arguments and waits until
// it answers PING.
func StartServer(ctx context.Context, extra ...string) (*Server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, ErrNoRedis
	}
	var lastErr error
	for range 5 { // the free port may be taken before the server binds it
		s, err := launch(ctx, bin, extra)
		if err == nil {
			return s, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

func launch(ctx context.Context, bin string, extra []string) (*Server, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	dir, err := os.MkdirTemp("", "redisbench-")
	if err != nil {
		return nil, err
	}
	args := append([]string{
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no",
		"--dir", dir, "--logfile", "redis.log", "--daemonize", "no",
	}, extra...)
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), cmd: cmd, done: make(chan struct{}), dir: dir}
	go func() {
		_ = cmd.Wait()
		close(s.done)
	}()
	deadline := time.Now().Add(20 * time.Second)
	for ping(s.Addr) != nil {
		select {
		case <-s.done:
			s.Stop()
			return nil, fmt.Errorf("redis-server on %s exited at start", s.Addr)
		case <-ctx.Done():
			s.Stop()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond): // polling readiness
		}
		if time.Now().After(deadline) {
			s.Stop()
			return nil, fmt.Errorf("redis-server on %s not ready after 20s", s.Addr)
		}
	}
	return s, nil
}

func ping(addr string) error {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Second))
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" {
		return fmt.Errorf("PING answered %q", line)
	}
	return nil
}

// Attach returns the Server of a redis-server already running at addr,
// started by someone else: Stop leaves it running. Measurements flush its
// data. Two harness binaries (code before and after a change) attached to
// one server in turn are compared on the same server process.
func Attach(addr string) (*Server, error) {
	if err := ping(addr); err != nil {
		return nil, fmt.Errorf("redisbench: no redis-server at %s: %w", addr, err)
	}
	return &Server{Addr: addr}, nil
}

// PID returns the server's process id, or 0 for an attached server.
func (s *Server) PID() int {
	if s.cmd == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Stop kills the server by its process id, reaps it and removes its
// directory. It is idempotent, and does nothing to an attached server.
func (s *Server) Stop() {
	if s.cmd == nil {
		return
	}
	select {
	case <-s.done:
	default:
		_ = syscall.Kill(s.PID(), syscall.SIGKILL)
		<-s.done
	}
	os.RemoveAll(s.dir)
}
