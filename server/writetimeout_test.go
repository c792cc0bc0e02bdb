package server_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
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
		hs, err := server.NewHTTPServer(h, cfg)
		if err != nil {
			t.Fatal(err)
		}
		ln := newPipeListener()
		served := make(chan error, 1)
		go func() { served <- hs.Serve(ln) }()

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

		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := hs.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if err := <-served; err != http.ErrServerClosed {
			t.Errorf("Serve: %v", err)
		}
	})
}
