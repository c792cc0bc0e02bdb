package server_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/server"
)

// pipeListener is a net.Listener whose connections are in-memory pipes,
// dialled by the test: inside a synctest bubble, their deadlines follow
// the bubble's clock.
type pipeListener struct {
	conns chan net.Conn
	once  sync.Once
	done  chan struct{}
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), done: make(chan struct{})}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return pipeAddr{} }

// dial returns the client's end of a new connection.
func (l *pipeListener) dial() net.Conn {
	client, srv := net.Pipe()
	l.conns <- srv
	return client
}

// servePipes serves h with a server of NewHTTPServer(cfg) on in-memory
// connections, dialled with the listener it returns, and shuts it down
// when the test ends. Call it in a synctest bubble.
func servePipes(t *testing.T, h http.Handler, cfg server.HTTPConfig) *pipeListener {
	t.Helper()
	hs, err := server.NewHTTPServer(h, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln := newPipeListener()
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := hs.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if err := <-served; err != http.ErrServerClosed {
			t.Errorf("Serve: %v", err)
		}
	})
	return ln
}

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "pipe" }

// TestWriteTimeoutCutsASlowAnswer runs a server of NewHTTPServer on
// in-memory connections in a synctest bubble, so that its timeouts follow
// the bubble's clock. A handler that takes longer than WriteTimeout before
// it answers gets no answer through: its connection is closed, and the
// client reads no response. One that answers within the timeout is
// served on the same kind of connection.
func TestWriteTimeoutCutsASlowAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := server.DefaultHTTPConfig()
		cfg.WriteTimeout = time.Second
		// /slow answers after twice the write timeout, any other path at once.
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/slow" {
				time.Sleep(2 * cfg.WriteTimeout) // the bubble's clock: no real wait
			}
			io.WriteString(w, "answered")
		})
		ln := servePipes(t, h, cfg)

		get := func(path string) (*http.Response, error) {
			conn := ln.dial()
			defer conn.Close()
			if _, err := io.WriteString(conn, "GET "+path+" HTTP/1.1\r\nHost: sluice\r\n\r\n"); err != nil {
				return nil, err
			}
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				return nil, err
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err == nil && string(body) != "answered" {
				err = errors.New("body " + string(body))
			}
			return resp, err
		}

		if resp, err := get("/fast"); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("an answer within the write timeout: %v, %v", resp, err)
		}
		if resp, err := get("/slow"); err == nil {
			t.Errorf("an answer after the write timeout reached the client: %d", resp.StatusCode)
		}

	})
}

// TestSlowHeadersAndIdleConnectionsAreCut checks, on in-memory connections
// in a synctest bubble, the two timeouts that free a connection a client
// holds without using it: a client that sends half its request headers and
// then nothing is disconnected at ReadHeaderTimeout, and a keep-alive
// connection left idle after a request is closed at IdleTimeout. ReadTimeout,
// on which Go's server falls back where either is unset, is an hour, so the
// test tells them apart. The handler never runs for the first.
func TestSlowHeadersAndIdleConnectionsAreCut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int64
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { calls.Add(1) })
		cfg := server.DefaultHTTPConfig()
		cfg.ReadHeaderTimeout, cfg.IdleTimeout, cfg.ReadTimeout = time.Second, 2*time.Second, time.Hour
		ln := servePipes(t, h, cfg)
		// closedAfter reads conn until the server closes it and returns how
		// long that took on the bubble's clock.
		closedAfter := func(conn net.Conn, from time.Time) time.Duration {
			t.Helper()
			if _, err := io.Copy(io.Discard, conn); err != nil && !errors.Is(err, io.EOF) {
				t.Fatalf("reading until the server closes: %v", err)
			}
			return time.Since(from)
		}

		slow := ln.dial()
		start := time.Now()
		io.WriteString(slow, "GET / HTTP/1.1\r\nHost: sluice\r\nX-Half: ")
		if took := closedAfter(slow, start); took != cfg.ReadHeaderTimeout {
			t.Errorf("half the headers: closed after %v, want ReadHeaderTimeout (%v)", took, cfg.ReadHeaderTimeout)
		}
		slow.Close()
		if calls.Load() != 0 {
			t.Error("the handler ran for a request whose headers never ended")
		}

		idle := ln.dial()
		io.WriteString(idle, "GET / HTTP/1.1\r\nHost: sluice\r\n\r\n")
		br := bufio.NewReader(idle)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		answered := time.Now()
		if resp.StatusCode != http.StatusOK || resp.Close {
			t.Fatalf("answer %d, close %v: want 200 on a kept-alive connection", resp.StatusCode, resp.Close)
		}
		if took := closedAfter(idle, answered); took != cfg.IdleTimeout {
			t.Errorf("an idle keep-alive connection: closed after %v, want IdleTimeout (%v)", took, cfg.IdleTimeout)
		}
		idle.Close()

	})
}
