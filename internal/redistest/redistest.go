// Package redistest starts real redis-server processes for tests: a single
// node, one speaking only TLS with client certificates of a throwaway
// certificate authority, a cluster of masters, a primary with a replica,
// and a sentinel watching a primary. Each server runs
// on a free loopback port with persistence off, in a directory of the test's
// own, and is stopped by its process id when the test ends.
//
// When redis-server is not installed the helpers skip the test with a loud
// message; under CI=true they fail it instead, so a CI machine that lost its
// Redis cannot pass by skipping. StartTLS does the same when redis-server
// was built without TLS (Debian's and most distributions' builds have it).
//
// Nothing outside tests imports this package.
package redistest

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// StartTimeout bounds how long a helper waits for servers to become ready
// (to answer PING, to agree on a cluster, to finish a first sync).
const StartTimeout = 20 * time.Second

// Server is one running redis-server process.
type Server struct {
	// Addr is the server's loopback address, host:port.
	Addr string
	// Dir is the server's working directory (its log and cluster state).
	Dir string

	// tls, for a server started by StartTLS, is the configuration its
	// clients connect with.
	tls  *tls.Config
	cmd  *exec.Cmd
	done chan struct{} // closed once the process has exited and been reaped
	mu   sync.Mutex
	err  error // the process's exit status, once done is closed
}

// Binary returns the path of redis-server. Without one it skips t loudly,
// or fails it when the environment variable CI is "true".
func Binary(t testing.TB) string {
	t.Helper()
	path, err := exec.LookPath("redis-server")
	if err == nil {
		return path
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("redis-server is required under CI=true and was not found: %v", err)
	}
	warnOnce.Do(func() {
		fmt.Fprintln(os.Stderr, "redistest: SKIPPING every test that needs Redis: redis-server is not installed (apt-get install redis-server)")
	})
	t.Skipf("SKIPPED: redis-server is not installed (%v)", err)
	return ""
}

var warnOnce sync.Once

// Start starts a single redis-server and stops it when t ends. Extra
// arguments are passed to the server after the defaults (for example
// "--maxmemory-policy", "allkeys-lru").
func Start(t testing.TB, extra ...string) *Server {
	t.Helper()
	return start(t, false, extra)
}

// start starts one server, retrying on a fresh port when the one it picked
// was taken in the meantime.
func start(t testing.TB, cluster bool, extra []string) *Server {
	t.Helper()
	bin := Binary(t)
	var lastErr error
	for range 5 {
		s, err := launch(t, bin, cluster, extra)
		if err == nil {
			return s
		}
		lastErr = err
	}
	t.Fatalf("redistest: could not start redis-server: %v", lastErr)
	return nil
}

func launch(t testing.TB, bin string, cluster bool, extra []string) (*Server, error) {
	return launchIn(t, bin, cluster, nil, nil, extra)
}

// launchTLS starts one server listening only on a TLS port, which clients
// reach with client.
func launchTLS(t testing.TB, bin string, client *tls.Config, extra []string) (*Server, error) {
	return launchIn(t, bin, false, client, nil, extra)
}

// launchIn starts one server; first, if any, are the arguments before the
// defaults (a sentinel's configuration file and --sentinel). With
// tlsClient its port is a TLS port (the plain one is off), and tlsClient
// is how clients connect.
func launchIn(t testing.TB, bin string, cluster bool, tlsClient *tls.Config, first func(dir string) ([]string, error), extra []string) (*Server, error) {
	ports, err := freePorts(1 + btoi(cluster))
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(t.TempDir(), "redis-")
	if err != nil {
		return nil, err
	}
	var args []string
	if first != nil {
		if args, err = first(dir); err != nil {
			return nil, err
		}
	}
	if tlsClient != nil {
		args = append(args, "--port", "0", "--tls-port", strconv.Itoa(ports[0]))
	} else {
		args = append(args, "--port", strconv.Itoa(ports[0]))
	}
	args = append(args,
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", dir,
		"--logfile", "redis.log",
		"--daemonize", "no",
	)
	if cluster {
		args = append(args,
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-port", strconv.Itoa(ports[1]),
			"--cluster-node-timeout", "5000",
		)
	}
	args = append(args, extra...)
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0])), Dir: dir, tls: tlsClient, cmd: cmd, done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		s.mu.Lock()
		s.err = err
		s.mu.Unlock()
		close(s.done)
	}()
	t.Cleanup(s.Stop)
	if err := s.waitReady(); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// waitReady polls the server with PING until it answers, it exits, or
// StartTimeout passes.
func (s *Server) waitReady() error {
	deadline := time.Now().Add(StartTimeout)
	for {
		select {
		case <-s.done:
			return fmt.Errorf("redis-server on %s exited at start: %v\n%s", s.Addr, s.exitErr(), s.LogTail())
		default:
		}
		if ping(s.Addr, s.tls) == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server on %s not ready after %v\n%s", s.Addr, StartTimeout, s.LogTail())
		}
		time.Sleep(20 * time.Millisecond) // polling a readiness condition
	}
}

// ping sends one PING over a fresh connection (TLS with tlsConf) and
// checks that the server answers it.
func ping(addr string, tlsConf *tls.Config) error {
	var conn net.Conn
	var err error
	if tlsConf != nil {
		conn, err = tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", addr, tlsConf)
	} else {
		conn, err = net.DialTimeout("tcp", addr, time.Second)
	}
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
	// A server started with --requirepass answers NOAUTH: it is up.
	if line != "+PONG\r\n" && !strings.HasPrefix(line, "-NOAUTH") {
		return fmt.Errorf("PING answered %q", line)
	}
	return nil
}

func (s *Server) exitErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// PID returns the server's process id.
func (s *Server) PID() int { return s.cmd.Process.Pid }

// Stop kills the server with SIGKILL (which also ends a paused process) and
// reaps it. It is idempotent and safe to call from several goroutines.
func (s *Server) Stop() {
	select {
	case <-s.done:
		return
	default:
	}
	_ = syscall.Kill(s.PID(), syscall.SIGKILL)
	<-s.done
}

// Restart starts a stopped server again: the same command line, so the
// same address and directory, and, since it persists nothing, empty. It
// waits until the server answers, and fails t if it does not (the address
// was taken meanwhile, say). Call it from the goroutine that stopped the
// server, not concurrently with its other methods.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	if s.Running() {
		t.Fatal("redistest: Restart of a running server")
	}
	cmd := exec.Command(s.cmd.Path, s.cmd.Args[1:]...)
	cmd.Dir, cmd.SysProcAttr = s.cmd.Dir, sysProcAttr()
	if err := cmd.Start(); err != nil {
		t.Fatalf("redistest: restarting %s: %v", s.Addr, err)
	}
	done := make(chan struct{})
	s.mu.Lock()
	s.cmd, s.done, s.err = cmd, done, nil
	s.mu.Unlock()
	go func() {
		err := cmd.Wait()
		s.mu.Lock()
		s.err = err
		s.mu.Unlock()
		close(done)
	}()
	if err := s.waitReady(); err != nil {
		s.Stop()
		t.Fatalf("redistest: restarting %s: %v", s.Addr, err)
	}
}

// Running reports whether the process has not exited.
func (s *Server) Running() bool {
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}

// Pause stops the process with SIGSTOP: it keeps its connections open but
// answers nothing until Resume.
func (s *Server) Pause() error { return s.signal(syscall.SIGSTOP) }

// Resume continues a paused process with SIGCONT.
func (s *Server) Resume() error { return s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) error {
	if !s.Running() {
		return fmt.Errorf("redis-server on %s has exited", s.Addr)
	}
	return syscall.Kill(s.PID(), sig)
}

// LogTail returns the last lines of the server's log, for failure messages.
func (s *Server) LogTail() string {
	b, err := os.ReadFile(filepath.Join(s.Dir, "redis.log"))
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 20 {
		lines = lines[len(lines)-20:]
	}
	return strings.Join(lines, "\n")
}

// Options returns client options for the server suited to tests: context
// deadlines honoured and no automatic retries; for a server started by
// StartTLS, TLS with a client certificate.
func (s *Server) Options() *redis.Options {
	return &redis.Options{Addr: s.Addr, ContextTimeoutEnabled: true, MaxRetries: -1, Protocol: 3, TLSConfig: s.TLSConfig()}
}

// TLSConfig returns the TLS configuration clients of a server started by
// StartTLS connect with (a copy), or nil for a plain server.
func (s *Server) TLSConfig() *tls.Config {
	if s.tls == nil {
		return nil
	}
	return s.tls.Clone()
}

// Client returns a client of the server, closed when t ends.
func (s *Server) Client(t testing.TB) *redis.Client {
	c := redis.NewClient(s.Options())
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Cluster is a Redis Cluster of masters without replicas, every slot
// assigned.
type Cluster struct {
	Masters []*Server
}

// StartCluster starts a cluster of n masters (n ≥ 1), splits the 16384 slots
// between them in contiguous ranges, joins them with CLUSTER MEET and waits
// until every node reports cluster_state:ok and knows every other. The
// servers stop when t ends.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	if n < 1 {
		t.Fatalf("redistest: a cluster needs at least one master, not %d", n)
	}
	c := &Cluster{}
	for range n {
		c.Masters = append(c.Masters, start(t, true, nil))
	}
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	if err := c.form(ctx); err != nil {
		t.Fatalf("redistest: forming a %d-master cluster: %v", n, err)
	}
	return c
}

func (c *Cluster) form(ctx context.Context) error {
	const slots = 16384
	n := len(c.Masters)
	clients := make([]*redis.Client, n)
	for i, s := range c.Masters {
		clients[i] = redis.NewClient(s.Options())
		defer clients[i].Close()
	}
	for i, cl := range clients {
		first, last := i*slots/n, (i+1)*slots/n-1
		if err := cl.Do(ctx, "cluster", "addslotsrange", first, last).Err(); err != nil {
			return fmt.Errorf("CLUSTER ADDSLOTSRANGE %d %d on %s: %w", first, last, c.Masters[i].Addr, err)
		}
	}
	for i := 1; i < n; i++ {
		conf, err := clients[i].ConfigGet(ctx, "cluster-port").Result()
		if err != nil || conf["cluster-port"] == "" {
			return fmt.Errorf("reading cluster-port of %s: %v %v", c.Masters[i].Addr, conf, err)
		}
		host, port, _ := net.SplitHostPort(c.Masters[i].Addr)
		if err := clients[0].Do(ctx, "cluster", "meet", host, port, conf["cluster-port"]).Err(); err != nil {
			return fmt.Errorf("CLUSTER MEET %s: %w", c.Masters[i].Addr, err)
		}
	}
	for {
		ready := true
		var last string
		for i, cl := range clients {
			info, err := cl.ClusterInfo(ctx).Result()
			if err != nil {
				return fmt.Errorf("CLUSTER INFO on %s: %w", c.Masters[i].Addr, err)
			}
			if infoField(info, "cluster_state") != "ok" || infoField(info, "cluster_known_nodes") != strconv.Itoa(n) ||
				infoField(info, "cluster_slots_ok") != strconv.Itoa(slots) {
				ready, last = false, info
				break
			}
		}
		if ready {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster not ready: %w; last CLUSTER INFO:\n%s", ctx.Err(), last)
		case <-time.After(50 * time.Millisecond): // polling a readiness condition
		}
	}
}

// Addrs returns the masters' addresses.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.Masters))
	for i, s := range c.Masters {
		addrs[i] = s.Addr
	}
	return addrs
}

// Options returns cluster client options suited to tests: context deadlines
// honoured and no automatic retries (redirections still followed).
func (c *Cluster) Options() *redis.ClusterOptions {
	return &redis.ClusterOptions{Addrs: c.Addrs(), ContextTimeoutEnabled: true, MaxRetries: -1, Protocol: 3}
}

// Client returns a cluster client, closed when t ends.
func (c *Cluster) Client(t testing.TB) *redis.ClusterClient {
	cl := redis.NewClusterClient(c.Options())
	t.Cleanup(func() { _ = cl.Close() })
	return cl
}

// Replicated is a primary with one replica attached.
type Replicated struct {
	Primary, Replica *Server
}

// replicaArgs make a primary serve a first sync at once instead of waiting
// for more replicas to share it.
var replicaArgs = []string{"--repl-diskless-sync-delay", "0"}

// StartReplicated starts a primary and a replica of it, both with the extra
// arguments, and waits until the replica has finished its first sync. The
// servers stop when t ends.
func StartReplicated(t testing.TB, extra ...string) *Replicated {
	t.Helper()
	primary := Start(t, append(replicaArgs, extra...)...)
	return &Replicated{Primary: primary, Replica: StartReplica(t, primary, extra...)}
}

// StartReplica starts a server with the extra arguments as a replica of
// primary and waits until it has finished its first sync. It stops when t
// ends.
func StartReplica(t testing.TB, primary *Server, extra ...string) *Server {
	t.Helper()
	s := Start(t, append(replicaArgs, extra...)...)
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	c := redis.NewClient(s.Options())
	defer c.Close()
	host, port, _ := net.SplitHostPort(primary.Addr)
	if err := c.Do(ctx, "replicaof", host, port).Err(); err != nil {
		t.Fatalf("redistest: REPLICAOF on %s: %v", s.Addr, err)
	}
	if err := WaitSynced(ctx, primary, s); err != nil {
		t.Fatalf("redistest: %v\n%s\n%s", err, primary.describe("primary"), s.describe("replica"))
	}
	return s
}

// describe returns what a failure message needs to know of the server:
// whether its process still runs, how it exited, and its log's last lines.
func (s *Server) describe(role string) string {
	state := "running"
	if !s.Running() {
		state = fmt.Sprintf("exited (%v)", s.exitErr())
	}
	return fmt.Sprintf("%s %s, pid %d, %s; its log ends:\n%s", role, s.Addr, s.PID(), state, s.LogTail())
}

// WaitSynced waits until the replica's link to the primary is up and the
// primary counts it among its connected replicas.
func WaitSynced(ctx context.Context, primary, replica *Server) error {
	p, q := redis.NewClient(primary.Options()), redis.NewClient(replica.Options())
	defer p.Close()
	defer q.Close()
	for {
		pi, perr := p.Info(ctx, "replication").Result()
		qi, qerr := q.Info(ctx, "replication").Result()
		if perr == nil && qerr == nil && infoField(pi, "connected_slaves") != "0" && infoField(qi, "master_link_status") == "up" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("replica %s not in sync with %s: %w (%v, %v)", replica.Addr, primary.Addr, ctx.Err(), perr, qerr)
		case <-time.After(20 * time.Millisecond): // polling a readiness condition
		}
	}
}

// Promote turns the replica into a primary (REPLICAOF NO ONE).
func (r *Replicated) Promote(ctx context.Context) error {
	replica := redis.NewClient(r.Replica.Options())
	defer replica.Close()
	return replica.Do(ctx, "replicaof", "no", "one").Err()
}

// SentinelPrimary is the name under which StartSentinel's sentinel
// watches its primary.
const SentinelPrimary = "sluice"

// StartSentinel starts one sentinel watching primary under the name
// SentinelPrimary, with a quorum of one and a down-after of one second, so
// that it fails over about a second after the primary stops answering. It
// waits until the sentinel knows the primary and stops when t ends.
func StartSentinel(t testing.TB, primary *Server) *Server {
	t.Helper()
	bin := Binary(t)
	host, port, _ := net.SplitHostPort(primary.Addr)
	conf := func(dir string) ([]string, error) {
		// A sentinel rewrites its configuration file, so it needs one of
		// its own; the command line adds the rest.
		path := filepath.Join(dir, "sentinel.conf")
		body := fmt.Sprintf("sentinel monitor %s %s %s 1\n"+
			"sentinel down-after-milliseconds %[1]s 1000\n"+
			"sentinel failover-timeout %[1]s 10000\n", SentinelPrimary, host, port)
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			return nil, err
		}
		return []string{path, "--sentinel"}, nil
	}
	var s *Server
	var err error
	for range 5 {
		if s, err = launchIn(t, bin, false, nil, conf, nil); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("redistest: could not start a sentinel: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	c := redis.NewSentinelClient(&redis.Options{Addr: s.Addr})
	defer c.Close()
	for {
		addr, err := c.GetMasterAddrByName(ctx, SentinelPrimary).Result()
		if err == nil && len(addr) == 2 && net.JoinHostPort(addr[0], addr[1]) == primary.Addr {
			return s
		}
		select {
		case <-ctx.Done():
			t.Fatalf("redistest: sentinel %s does not know its primary %s: %v %v", s.Addr, primary.Addr, addr, err)
		case <-time.After(20 * time.Millisecond): // polling a readiness condition
		}
	}
}

// infoField returns the value of a "name:value" line of INFO or CLUSTER
// INFO output, or "" when there is none.
func infoField(info, name string) string {
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
}

// freePorts returns n distinct loopback ports that were free a moment ago.
// A server started on one may still find it taken; start retries then.
func freePorts(n int) ([]int, error) {
	var ports []int
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			l.Close()
		}
	}()
	for len(ports) < n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		listeners = append(listeners, l)
		addr, ok := l.Addr().(*net.TCPAddr)
		if !ok {
			return nil, fmt.Errorf("listener address %v is not TCP", l.Addr())
		}
		ports = append(ports, addr.Port)
	}
	return ports, nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
