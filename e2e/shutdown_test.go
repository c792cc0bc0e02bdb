package e2e

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/wire"
)

// TestGracefulShutdownDrains holds a request in flight — its handler is
// reading the body — while the server receives SIGTERM, then completes it:
// the request is answered, the process exits 0, and the write it made is
// there after a restart.
func TestGracefulShutdownDrains(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverOptions{})
	p := unique(t, "drain")
	body := encode(t, request(step(p, engine.Set("k", "written while shutting down", hour))))
	ts := time.Now().Unix()

	conn, err := net.Dial("tcp", s.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// Expect: 100-continue makes the server say when the handler starts
	// reading the body: from then on the request is in flight.
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nExpect: 100-continue\r\n%s: %d\r\n%s: %s\r\n\r\n",
		wire.PathRPC, s.Addr, len(body), wire.HeaderTimestamp, ts, wire.HeaderSignature,
		wire.Sign([]byte(s.secret()), ts, http.MethodPost, wire.PathRPC, body))
	rd := bufio.NewReader(conn)
	cont, err := http.ReadResponse(rd, nil)
	if err != nil || cont.StatusCode != http.StatusContinue {
		t.Fatalf("want 100 Continue, got %v %v", cont, err)
	}

	mark := s.logs.count()
	s.signal(syscall.SIGTERM)
	if _, ok := s.logs.waitFor(mark, s.exited, func(r logRecord) bool { return r["msg"] == "shutting down: draining in-flight requests" }); !ok {
		t.Fatalf("no shutdown in the logs:\n%s", s.logs)
	}
	if _, err := conn.Write(body); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(rd, nil)
	if err != nil {
		t.Fatalf("the in-flight request was not answered: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("in-flight request answered %s", resp.Status)
	}
	s.waitExit(0)
	if _, ok := s.logs.waitFor(mark, s.exited, func(r logRecord) bool { return r["msg"] == "stopped" }); !ok {
		t.Errorf("no clean stop in the logs:\n%s", s.logs)
	}

	s.start()
	if v, _ := s.get(t, p, "k"); v != "written while shutting down" {
		t.Errorf("after the restart k = %q, want the in-flight write", v)
	}
}
