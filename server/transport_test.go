package server_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/server"
	"github.com/sluicehq/sluice/store/memstore"
	"github.com/sluicehq/sluice/wire"
)

const hugeBody = 100 << 20 // 100 MB

func newBoundServer(t *testing.T) *server.Server {
	t.Helper()
	st, err := memstore.New(memstore.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	cfg := server.DefaultConfig()
	cfg.Secrets = []string{strings.Repeat("s", wire.MinSecretLen)}
	cfg.OperatorToken = strings.Repeat("o", wire.MinSecretLen)
	return server.New(engine.New(st), cfg)
}

// countingBody yields n zero bytes and counts what was read of them.
type countingBody struct {
	left int64
	read atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	if b.left == 0 {
		return 0, io.EOF
	}
	n := int(min(int64(len(p)), b.left))
	clear(p[:n])
	b.left -= int64(n)
	b.read.Add(int64(n))
	return n, nil
}

func (b *countingBody) Close() error { return nil }

// TestRPCReadsAtMostTheBoundPlusOne sends 100 MB bodies that announce their
// size in three ways and checks that the handler refuses each with 413
// after reading at most wire.MaxBody+1 bytes.
func TestRPCReadsAtMostTheBoundPlusOne(t *testing.T) {
	s := newBoundServer(t)
	for _, tc := range []struct {
		name          string
		contentLength int64
		maxRead       int64
	}{
		{"chunked", -1, wire.MaxBody + 1},
		{"lying content-length", 100, wire.MaxBody + 1},
		{"honest content-length", hugeBody, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := &countingBody{left: hugeBody}
			req := httptest.NewRequest(http.MethodPost, wire.PathRPC, nil)
			req.Body, req.ContentLength = body, tc.contentLength
			ts := time.Now().Unix()
			req.Header.Set(wire.HeaderTimestamp, strconv.FormatInt(ts, 10))
			req.Header.Set(wire.HeaderSignature, wire.Sign([]byte(strings.Repeat("s", wire.MinSecretLen)), ts, http.MethodPost, wire.PathRPC, nil))
			rec := httptest.NewRecorder()
			s.ServeHTTP(rec, req)
			if rec.Code != http.StatusRequestEntityTooLarge {
				t.Fatalf("status %d, want 413; body %s", rec.Code, rec.Body)
			}
			if got := body.read.Load(); got > tc.maxRead {
				t.Errorf("the handler read %d bytes of the body, want at most %d", got, tc.maxRead)
			}
			if got := rec.Header().Get("Connection"); got != "close" {
				t.Errorf("Connection %q, want close (so net/http does not drain the rest)", got)
			}
		})
	}
}

// socketCounts counts what a server reads off its connections, and how
// much it had read when it first wrote to one: what it read before it
// answered.
type socketCounts struct {
	read            atomic.Int64
	readBeforeWrite atomic.Int64 // -1 until the first write
}

// countingListener hands out connections that update counts.
type countingListener struct {
	net.Listener
	counts *socketCounts
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return countingConn{c, l.counts}, nil
}

type countingConn struct {
	net.Conn
	counts *socketCounts
}

func (c countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.counts.read.Add(int64(n))
	return n, err
}

func (c countingConn) Write(p []byte) (int, error) {
	c.counts.readBeforeWrite.CompareAndSwap(-1, c.counts.read.Load())
	return c.Conn.Write(p)
}

// TestRPCBodyBoundOnTheWire streams a 100 MB chunked body to a real HTTP
// server and counts the bytes the server took off the socket before it
// answered: the bound plus one, the request head and chunk framing, and at
// most one buffer of read-ahead. Without the handler's Connection: close,
// net/http would first drain up to 256 KiB more, hoping to keep the
// connection alive.
func TestRPCBodyBoundOnTheWire(t *testing.T) {
	counts := &socketCounts{}
	counts.readBeforeWrite.Store(-1)
	hs := httptest.NewUnstartedServer(newBoundServer(t))
	hs.Listener = countingListener{hs.Listener, counts}
	hs.Start()
	defer hs.Close()

	conn, err := net.Dial("tcp", hs.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ts := time.Now().Unix()
	head := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: sluice\r\nTransfer-Encoding: chunked\r\n%s: %d\r\n%s: %s\r\n\r\n",
		wire.PathRPC, wire.HeaderTimestamp, ts, wire.HeaderSignature,
		wire.Sign([]byte("not the secret, never checked: the body is refused first"), ts, http.MethodPost, wire.PathRPC, nil))
	if _, err := io.WriteString(conn, head); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	sent := make(chan int64, 1)
	go func() {
		chunk := []byte(strings.Repeat("x", 64<<10))
		frame := fmt.Sprintf("%x\r\n", len(chunk))
		var n int64
		defer func() { sent <- n }()
		for n < hugeBody {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := io.WriteString(conn, frame); err != nil {
				return
			}
			if _, err := conn.Write(chunk); err != nil {
				return
			}
			n += int64(len(chunk))
			if _, err := io.WriteString(conn, "\r\n"); err != nil {
				return
			}
		}
	}()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	close(stop)
	conn.Close() // unblocks a writer stuck on a full socket buffer
	if n := <-sent; n >= hugeBody {
		t.Errorf("the client sent the whole body (%d bytes) before the refusal", n)
	}
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("status %d, want 413", resp.StatusCode)
	}
	if !resp.Close {
		t.Error("the refusal keeps the connection open; want Connection: close")
	}
	const slack = 8 << 10 // request head, chunk framing, one bufio buffer
	if got := counts.readBeforeWrite.Load(); got > wire.MaxBody+1+slack {
		t.Errorf("the server read %d bytes off the socket before answering, want at most %d", got, wire.MaxBody+1+slack)
	}
}

// TestMethodAndPathAnswers checks the answers to a known path with the
// wrong method (405 with Allow) and to an unknown path (404), both as
// problem documents.
func TestMethodAndPathAnswers(t *testing.T) {
	s := newBoundServer(t)
	for _, tc := range []struct {
		method, path string
		status       int
		allow        string
	}{
		{http.MethodGet, wire.PathRPC, http.StatusMethodNotAllowed, "POST"},
		{http.MethodPost, wire.PathPing, http.StatusMethodNotAllowed, "GET, HEAD"},
		{http.MethodDelete, wire.PathStop, http.StatusMethodNotAllowed, "POST"},
		{http.MethodGet, "/v1/nothing", http.StatusNotFound, ""},
	} {
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, httptest.NewRequest(tc.method, tc.path, nil))
		if rec.Code != tc.status || rec.Header().Get("Allow") != tc.allow || rec.Header().Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s %s: %d Allow %q %s, want %d Allow %q", tc.method, tc.path, rec.Code, rec.Header().Get("Allow"), rec.Header().Get("Content-Type"), tc.status, tc.allow)
		}
	}
}
