package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/wire"
)

// probe is the counter every bounds request increments first: it reads 1
// after an accepted request and is absent after a refused one, which shows
// the refusal came before any command ran.
const probe = "probe"

// TestBoundsAtAndPastTheLimit sends every bound at its limit, which must
// run, and one past it, which must be refused before any command runs.
func TestBoundsAtAndPastTheLimit(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverOptions{})
	incr := func(key string) engine.Command { return engine.Incr(key, 1, hour) }

	for _, tc := range []struct {
		name  string
		limit int
		build func(partition string, n int) wire.Request
	}{
		{"steps", engine.MaxSteps, func(p string, n int) wire.Request {
			steps := []engine.Step{step(p, incr(probe))}
			for i := 1; i < n; i++ {
				steps = append(steps, step(p, incr(fmt.Sprint("k", i))))
			}
			return request(steps...)
		}},
		{"commands in a step", engine.MaxCommandsPerStep, func(p string, n int) wire.Request {
			cmds := []engine.Command{incr(probe)}
			for i := 1; i < n; i++ {
				cmds = append(cmds, incr(fmt.Sprint("k", i)))
			}
			return request(step(p, cmds...))
		}},
		{"commands in a request", engine.MaxCommands, func(p string, n int) wire.Request {
			cmds := []engine.Command{incr(probe)}
			for i := 1; i < n; i++ {
				cmds = append(cmds, incr(fmt.Sprint("k", i)))
			}
			var steps []engine.Step
			for len(cmds) > 0 {
				k := min(len(cmds), engine.MaxCommandsPerStep)
				steps = append(steps, step(p, cmds[:k]...))
				cmds = cmds[k:]
			}
			return request(steps...)
		}},
		{"windows in a hit", engine.MaxWindowsPerHit, func(p string, n int) wire.Request {
			var ws []engine.Window
			for i := range n {
				ws = append(ws, engine.Window{Key: fmt.Sprint("w", i), Kind: algo.KindFixed, Limit: 5, WindowMs: hour})
			}
			return request(step(p, incr(probe), engine.Hit(1, ws...)))
		}},
		{"value bytes", engine.MaxValueBytes, func(p string, n int) wire.Request {
			return request(step(p, incr(probe), engine.Set("v", strings.Repeat("x", n), hour)))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			at := unique(t, "at")
			s.do(t, tc.build(at, tc.limit))
			if v, _ := s.get(t, at, probe); v != "1" {
				t.Errorf("at the limit (%d): probe %q, want 1", tc.limit, v)
			}
			past := unique(t, "past")
			p := s.call(t, tc.build(past, tc.limit+1)).problem(t, wire.CodeInvalid)
			if p.Reason == "" {
				t.Error("a refusal without a reason")
			}
			s.mustBeAbsent(t, past, probe)
		})
	}

	day := 24 * hour
	for _, tc := range []struct {
		name string
		ttl  int64
		ok   bool
	}{
		{"ttl 0", 0, false},
		{"ttl 1 s", engine.MinTTLMs, true},
		{"ttl 120 d", 120 * day, true},
		{"ttl 120 d + 1 s", 120*day + 1000, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := unique(t, "ttl")
			r := request(step(p, incr(probe), engine.Set("v", "x", tc.ttl)))
			if !tc.ok {
				s.call(t, r).problem(t, wire.CodeInvalid)
				s.mustBeAbsent(t, p, probe)
				return
			}
			s.do(t, r)
			ttl := s.do(t, request(step(p, engine.TTL("v")))).Steps[0].Results[0]
			if !ttl.Found || ttl.TTLMs > tc.ttl || ttl.TTLMs < tc.ttl-10*1000 {
				t.Errorf("ttl of the record: %+v, want about %d ms", ttl, tc.ttl)
			}
		})
	}

	for _, p := range protocols {
		t.Run("body bytes over "+p.name, func(t *testing.T) {
			// JSON allows trailing blanks, so a request is padded to the
			// exact size, and signed with its padding.
			padded := func(part string, size int) []byte {
				body := encode(t, request(step(part, incr(probe))))
				return append(body, bytes.Repeat([]byte(" "), size-len(body))...)
			}
			at := unique(t, "at")
			sendWith(t, p.client, p.major, signedRequest(t, s.URL, s.secret(), time.Now().Unix(), padded(at, wire.MaxBody))).response(t)
			if v, _ := s.get(t, at, probe); v != "1" {
				t.Errorf("a %d-byte body: probe %q, want 1", wire.MaxBody, v)
			}
			past := unique(t, "past")
			sendWith(t, p.client, p.major, signedRequest(t, s.URL, s.secret(), time.Now().Unix(), padded(past, wire.MaxBody+1))).problem(t, wire.CodeTooLarge)
			s.mustBeAbsent(t, past, probe)
		})
	}
}

// TestHugeBodyRefusedWhileSending streams a 100 MB body over a raw
// connection, framed four ways, and checks that the refusal arrives while
// the client is still sending and that the connection is closed after it.
// (The server package's tests count the bytes read: at most the bound plus
// one.)
//   - chunked: 413 once the bound is passed;
//   - content-length: the true length, 413 from the header alone;
//   - lying content-length: 1,000 bytes declared, 100 MB sent. The server
//     reads the 1,000 as the body, whose signature fails (401), and refuses
//     what follows as a malformed request;
//   - chunked with a content-length of 1,000 as well: chunked framing
//     wins, and the bound refuses it (413).
func TestHugeBodyRefusedWhileSending(t *testing.T) {
	t.Parallel()
	const huge = 100 << 20
	s := startServer(t, serverOptions{})
	for _, tc := range []struct {
		name    string
		framing string
		chunked bool
		status  int
	}{
		{"chunked", "Transfer-Encoding: chunked", true, http.StatusRequestEntityTooLarge},
		{"content-length", fmt.Sprintf("Content-Length: %d", huge), false, http.StatusRequestEntityTooLarge},
		{"lying content-length", "Content-Length: 1000", false, http.StatusUnauthorized},
		{"chunked and a content-length", "Transfer-Encoding: chunked\r\nContent-Length: 1000", true, http.StatusRequestEntityTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", s.Addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			ts := time.Now().Unix()
			fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: %s\r\n%s\r\nContent-Type: application/json\r\n%s: %d\r\n%s: %s\r\n\r\n",
				wire.PathRPC, s.Addr, tc.framing, wire.HeaderTimestamp, ts, wire.HeaderSignature,
				wire.Sign([]byte(s.secret()), ts, http.MethodPost, wire.PathRPC, []byte("{")))

			stop := make(chan struct{})
			sent := make(chan int64, 1)
			go func() {
				chunk := bytes.Repeat([]byte("{"), 64<<10)
				var n int64
				defer func() { sent <- n }()
				for n < huge {
					select {
					case <-stop:
						return
					default:
					}
					var err error
					if tc.chunked {
						_, err = fmt.Fprintf(conn, "%x\r\n%s\r\n", len(chunk), chunk)
					} else {
						_, err = conn.Write(chunk)
					}
					if err != nil {
						return // the server closed the connection
					}
					n += int64(len(chunk))
				}
			}()

			br := bufio.NewReader(conn)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("no answer while sending: %v", err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			// Nothing after the refusal is served: either the refusal
			// closed the connection, or the bytes that follow it are
			// refused as a malformed request (an endless request line:
			// 431), and then it is closed.
			var next *http.Response
			if !resp.Close {
				next, _ = http.ReadResponse(br, nil)
			}
			close(stop)
			conn.Close() // releases a writer blocked on a full socket
			n := <-sent
			if resp.StatusCode != tc.status {
				t.Fatalf("answer %s, want %d", resp.Status, tc.status)
			}
			if n >= huge {
				t.Errorf("the client sent all %d bytes before the answer", n)
			}
			if !resp.Close && (next == nil || next.StatusCode/100 != 4 || !next.Close) {
				t.Errorf("after the refusal the connection stayed open, or served what followed: %+v", next)
			}
		})
	}
}

// TestHugeBodyRefusedOverH2C streams a 100 MB body over HTTP/2 with prior
// knowledge and checks that the 413 arrives while the client is still
// sending, and that the connection, which other requests share, serves
// the next request. (The server package's tests count what the server
// reads off the socket: at most the stream's flow-control window and the
// bound.)
func TestHugeBodyRefusedOverH2C(t *testing.T) {
	t.Parallel()
	const huge = 100 << 20
	s := startServer(t, serverOptions{})
	var dials atomic.Int64
	dialer := &net.Dialer{}
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		Protocols: h2cOnly(),
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			dials.Add(1)
			return dialer.DialContext(ctx, network, addr)
		},
	}}
	defer hc.CloseIdleConnections()

	body := &endlessBody{left: huge}
	req := signedRequest(t, s.URL, s.secret(), time.Now().Unix(), []byte("{"))
	req.Body, req.GetBody, req.ContentLength = body, nil, -1
	a := sendWith(t, hc, 2, req)
	a.problem(t, wire.CodeTooLarge)
	if n := body.read.Load(); n >= huge {
		t.Errorf("the client sent all %d bytes before the answer", n)
	}
	key := unique(t, "after")
	sendWith(t, hc, 2, signedRequest(t, s.URL, s.secret(), time.Now().Unix(), encode(t, request(step("h2c", engine.Incr(key, 1, hour)))))).response(t)
	if n := dials.Load(); n != 1 {
		t.Errorf("%d connections for two requests: the refusal closed the connection", n)
	}
}

// endlessBody yields left bytes of "{" and counts what was read of them.
type endlessBody struct {
	left int64
	read atomic.Int64
}

func (b *endlessBody) Read(p []byte) (int, error) {
	if b.left == 0 {
		return 0, io.EOF
	}
	n := int(min(int64(len(p)), b.left))
	for i := range p[:n] {
		p[i] = '{'
	}
	b.left -= int64(n)
	b.read.Add(int64(n))
	return n, nil
}

func (b *endlessBody) Close() error { return nil }

// TestHeaderBound sends 64 KiB of headers: the server refuses them with
// 431 without running the request. (Go's HTTP/2 client refuses to send
// headers over the bound the server announces; the server package's tests
// send them with a raw framer.)
func TestHeaderBound(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverOptions{})
	p := unique(t, "hdr")
	req := signedRequest(t, s.URL, s.secret(), time.Now().Unix(), encode(t, request(step(p, engine.Incr(probe, 1, hour)))))
	req.Header.Set("X-Padding", strings.Repeat("x", 64<<10))
	if a := send(t, req); a.Status != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("answer %d, want 431", a.Status)
	}
	s.mustBeAbsent(t, p, probe)
}
