package server_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

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
// size in three ways, over HTTP/1.1 and HTTP/2, and checks that the handler
// refuses each with 413 after reading at most wire.MaxBody+1 bytes, closing
// an HTTP/1.1 connection but not an HTTP/2 one (other requests share it;
// net/http would answer Connection: close with GOAWAY).
func TestRPCReadsAtMostTheBoundPlusOne(t *testing.T) {
	s := newBoundServer(t)
	for _, tc := range []struct {
		name          string
		contentLength int64
		maxRead       int64
		proto         int
		connection    string
	}{
		{"chunked", -1, wire.MaxBody + 1, 1, "close"},
		{"lying content-length", 100, wire.MaxBody + 1, 1, "close"},
		{"honest content-length", hugeBody, 0, 1, "close"},
		{"HTTP/2 streamed", -1, wire.MaxBody + 1, 2, ""},
		{"HTTP/2 declared length", hugeBody, 0, 2, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := &countingBody{left: hugeBody}
			req := httptest.NewRequest(http.MethodPost, wire.PathRPC, nil)
			req.Body, req.ContentLength = body, tc.contentLength
			req.ProtoMajor, req.ProtoMinor, req.Proto = tc.proto, 0, fmt.Sprintf("HTTP/%d.0", tc.proto)
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
			if got := rec.Header().Get("Connection"); got != tc.connection {
				t.Errorf("Connection %q, want %q", got, tc.connection)
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
	hs, counts := startCounted(t)

	ts := time.Now().Unix()
	head := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: sluice\r\nTransfer-Encoding: chunked\r\n%s: %d\r\n%s: %s\r\n\r\n",
		wire.PathRPC, wire.HeaderTimestamp, ts, wire.HeaderSignature,
		wire.Sign([]byte("not the secret, never checked: the body is refused first"), ts, http.MethodPost, wire.PathRPC, nil))
	resp := streamChunked(t, hs.Listener.Addr().String(), head)
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
		// Paths not in their clean form name no endpoint either; they are
		// not redirected.
		{http.MethodPost, "//v1/rpc", http.StatusNotFound, ""},
		{http.MethodPost, "/v1/../v1/rpcs", http.StatusNotFound, ""},
		{http.MethodGet, "/v1/./ping", http.StatusNotFound, ""},
		{http.MethodGet, "/control//state", http.StatusNotFound, ""},
		{http.MethodGet, "/v1/limiters/./x", http.StatusNotFound, ""},
	} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(tc.method, "/", nil)
		req.URL.Path = tc.path // as sent, not cleaned
		s.ServeHTTP(rec, req)
		if rec.Code != tc.status || rec.Header().Get("Allow") != tc.allow || rec.Header().Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s %s: %d Allow %q %s, want %d Allow %q", tc.method, tc.path, rec.Code, rec.Header().Get("Allow"), rec.Header().Get("Content-Type"), tc.status, tc.allow)
		}
	}
}

// testSecret signs the requests of the transport tests (see
// newBoundServer).
var testSecret = []byte(strings.Repeat("s", wire.MinSecretLen))

// serveHTTP serves h with server.NewHTTPServer and cfg on a loopback
// listener wrapped by wrap (if not nil), and returns its base URL. The
// server is shut down when the test ends, which returns once every
// connection has ended: net/http keeps a connection it refused for a while
// (half a second after a 431 over HTTP/1.1, a second after a GOAWAY over
// HTTP/2), and Close would leave those goroutines running past the test.
func serveHTTP(t *testing.T, h http.Handler, cfg server.HTTPConfig, wrap func(net.Listener) net.Listener) string {
	t.Helper()
	hs, err := server.NewHTTPServer(h, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if wrap != nil {
		ln = wrap(ln)
	}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	t.Cleanup(func() {
		if err := hs.Shutdown(context.Background()); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if err := <-served; err != http.ErrServerClosed {
			t.Errorf("Serve: %v", err)
		}
	})
	return "http://" + ln.Addr().String()
}

// transport returns a client transport speaking HTTP/1.1 only, or HTTP/2
// with prior knowledge (h2c) only.
func transport(t *testing.T, h2c bool) *http.Transport {
	var p http.Protocols
	p.SetHTTP1(!h2c)
	p.SetUnencryptedHTTP2(h2c)
	tr := &http.Transport{Protocols: &p}
	t.Cleanup(tr.CloseIdleConnections)
	return tr
}

// signedRPC returns a POST of body to the RPC endpoint of base, signed
// with testSecret.
func signedRPC(t *testing.T, base string, body io.Reader, signed []byte) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+wire.PathRPC, body)
	if err != nil {
		t.Fatal(err)
	}
	ts := time.Now().Unix()
	req.Header.Set(wire.HeaderTimestamp, strconv.FormatInt(ts, 10))
	req.Header.Set(wire.HeaderSignature, wire.Sign(testSecret, ts, http.MethodPost, wire.PathRPC, signed))
	return req
}

const incrBody = `{"operationId":"op","family":"default","steps":[{"partition":"p","commands":[{"op":"kv.incr","key":"n","delta":1,"ttlMs":60000}]}]}`

// TestServesHTTP1AndH2C sends an RPC over HTTP/1.1 and over HTTP/2 with
// prior knowledge to one server: it answers each in its own protocol.
func TestServesHTTP1AndH2C(t *testing.T) {
	base := serveHTTP(t, newBoundServer(t), server.DefaultHTTPConfig(), nil)
	for _, h2c := range []bool{false, true} {
		resp, err := transport(t, h2c).RoundTrip(signedRPC(t, base, strings.NewReader(incrBody), []byte(incrBody)))
		if err != nil {
			t.Fatalf("h2c %v: %v", h2c, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		want := 1
		if h2c {
			want = 2
		}
		if resp.StatusCode != http.StatusOK || resp.ProtoMajor != want {
			t.Errorf("h2c %v: answer %d over %s, want 200 over HTTP/%d: %s", h2c, resp.StatusCode, resp.Proto, want, body)
		}
	}
}

// TestServesHTTP2OverTLS checks that the server still negotiates HTTP/2
// over TLS.
func TestServesHTTP2OverTLS(t *testing.T) {
	hs, err := server.NewHTTPServer(newBoundServer(t), server.DefaultHTTPConfig())
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewUnstartedServer(hs.Handler)
	ts.Config = hs
	ts.EnableHTTP2 = true
	ts.StartTLS()
	defer ts.Close()
	resp, err := ts.Client().Do(signedRPC(t, ts.URL, strings.NewReader(incrBody), []byte(incrBody)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.ProtoMajor != 2 {
		t.Errorf("answer %d over %s, want 200 over HTTP/2", resp.StatusCode, resp.Proto)
	}
}

// closeNotifyingListener signals on closed when a connection it accepted
// fails a read (the peer closed it) after counting what was read.
type closeNotifyingListener struct {
	net.Listener
	counts *socketCounts
	closed chan struct{}
	once   sync.Once
}

func (l *closeNotifyingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &notifyingConn{Conn: c, l: l}, nil
}

type notifyingConn struct {
	net.Conn
	l *closeNotifyingListener
}

func (c *notifyingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.l.counts.read.Add(int64(n))
	if err != nil {
		c.l.once.Do(func() { close(c.l.closed) })
	}
	return n, err
}

// TestRPCBodyBoundOverHTTP2 streams a 100 MB body over HTTP/2 with prior
// knowledge, without and with a declared length, and checks that the
// refusal comes while the client is still sending, that the server took
// off the socket no more than the stream's flow-control window and the
// window update the handler's read of the bound plus one byte gave back,
// and that the next request is answered. (Whether Go's client sends it
// over the same connection or dials another is its own choice, made by
// its timing; TestRefusedStreamKeepsTheConnection holds the server to
// keeping the connection.)
func TestRPCBodyBoundOverHTTP2(t *testing.T) {
	for _, declared := range []bool{false, true} {
		name := "streamed"
		if declared {
			name = "declared length"
		}
		t.Run(name, func(t *testing.T) {
			counts := &socketCounts{}
			ln := &closeNotifyingListener{counts: counts, closed: make(chan struct{})}
			base := serveHTTP(t, newBoundServer(t), server.DefaultHTTPConfig(), func(l net.Listener) net.Listener {
				ln.Listener = l
				return ln
			})
			tr := transport(t, true)

			body := &countingBody{left: hugeBody}
			req := signedRPC(t, base, body, nil)
			if declared {
				req.ContentLength = hugeBody
			}
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusRequestEntityTooLarge || resp.ProtoMajor != 2 {
				t.Fatalf("answer %d over %s, want 413 over HTTP/2", resp.StatusCode, resp.Proto)
			}
			if got := body.read.Load(); got >= hugeBody {
				t.Errorf("the client sent the whole body (%d bytes) before the refusal", got)
			}

			// The next request is answered.
			resp, err = tr.RoundTrip(signedRPC(t, base, strings.NewReader(incrBody), []byte(incrBody)))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Errorf("the request after the refusal: answer %d", resp.StatusCode)
			}

			tr.CloseIdleConnections()
			<-ln.closed
			// The preface, settings and frame headers, two requests' headers
			// and the small body.
			const slack = 8 << 10
			if max := server.MaxStreamWindow + wire.MaxBody + 1 + slack; counts.read.Load() > int64(max) {
				t.Errorf("the server read %d bytes off the socket, want at most %d", counts.read.Load(), max)
			}
		})
	}
}

// TestHeaderBoundOverHTTP1 pins the header bound the documentation states
// for HTTP/1.1: Go's server reads past MaxHeaderBytes (its 4 KiB of slack
// and its 4 KiB read buffer) before it refuses a request, so headers under
// 16 KiB are served and a request line and headers over 24 KiB are always
// answered 431, without running the handler.
func TestHeaderBoundOverHTTP1(t *testing.T) {
	var ran atomic.Int64
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { ran.Add(1) })
	cfg := server.DefaultHTTPConfig()
	base := serveHTTP(t, h, cfg, nil)
	send := func(padding int) int {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, base+"/", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Padding", strings.Repeat("x", padding))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if status := send(cfg.MaxHeaderBytes - 512); status != http.StatusOK {
		t.Errorf("headers just under the bound: %d, want 200", status)
	}
	if status := send(cfg.MaxHeaderBytes + 8<<10 + 1); status != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("headers past the bound and Go's read-ahead: %d, want 431", status)
	}
	if n := ran.Load(); n != 1 {
		t.Errorf("the handler ran %d times, want once (for the request under the bound)", n)
	}
}

// TestHeaderBoundOverHTTP2 sends HTTP/2 requests whose header lists are
// over the server's header bound, with a raw framer (Go's own client
// refuses to send them): one a little over, which is answered 431, and one
// far over, for which the server closes the connection without decoding
// it all. The handler never runs.
func TestHeaderBoundOverHTTP2(t *testing.T) {
	var ran atomic.Bool
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { ran.Store(true) })
	cfg := server.DefaultHTTPConfig()
	base := serveHTTP(t, h, cfg, nil)

	if status, closed := rawHTTP2Request(t, base, cfg.MaxHeaderBytes+1<<10); closed || status != "431" {
		t.Errorf("a little over the bound: status %q, connection closed %v; want 431", status, closed)
	}
	if status, closed := rawHTTP2Request(t, base, 4*cfg.MaxHeaderBytes); !closed {
		t.Errorf("far over the bound: status %q, want the connection closed", status)
	}
	if ran.Load() {
		t.Error("the handler ran")
	}
}

// dialHTTP2 opens an HTTP/2 connection to base with prior knowledge, closed
// when the test ends: the client preface and an empty SETTINGS frame are
// sent.
func dialHTTP2(t *testing.T, base string) *http2.Framer {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(conn, conn)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	return fr
}

// rawHTTP2Request opens an HTTP/2 connection to base with prior knowledge,
// sends a GET with n bytes of padding headers, and returns the answer's
// status, or whether the server closed the connection instead.
func rawHTTP2Request(t *testing.T, base string, n int) (status string, closed bool) {
	t.Helper()
	fr := dialHTTP2(t, base)
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	fields := []hpack.HeaderField{
		{Name: ":method", Value: http.MethodGet}, {Name: ":scheme", Value: "http"},
		{Name: ":authority", Value: "sluice"}, {Name: ":path", Value: wire.PathPing},
	}
	// Fields of 4 KiB: the server refuses a single field over the bound
	// as an encoding error, closing the connection.
	for i := 0; n > 0; i++ {
		v := strings.Repeat("x", min(n, 4<<10))
		fields = append(fields, hpack.HeaderField{Name: fmt.Sprintf("x-padding-%d", i), Value: v})
		n -= len(v)
	}
	for _, f := range fields {
		if err := enc.WriteField(f); err != nil {
			t.Fatal(err)
		}
	}
	// The block goes in frames of at most the protocol's initial maximum
	// frame size.
	const frameSize = 16 << 10
	frag := block.Bytes()
	first := frag[:min(len(frag), frameSize)]
	frag = frag[len(first):]
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: first, EndStream: true, EndHeaders: len(frag) == 0}); err != nil {
		t.Fatal(err)
	}
	for len(frag) > 0 {
		n := min(len(frag), frameSize)
		if err := fr.WriteContinuation(1, n == len(frag), frag[:n]); err != nil {
			return "", true // the server has closed the connection
		}
		frag = frag[n:]
	}

	dec := hpack.NewDecoder(4096, nil)
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return "", true
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				if err := fr.WriteSettingsAck(); err != nil {
					return "", true
				}
			}
		case *http2.GoAwayFrame:
			return "", true
		case *http2.HeadersFrame:
			if f.StreamID != 1 {
				continue
			}
			fields, err := dec.DecodeFull(f.HeaderBlockFragment())
			if err != nil {
				t.Fatal(err)
			}
			for _, hf := range fields {
				if hf.Name == ":status" {
					return hf.Value, false
				}
			}
			t.Fatal("an answer without a status")
		}
	}
}

// TestReadTimeoutPerRequest starts a request whose body never ends, over
// HTTP/1.1 and over HTTP/2, and checks that the server gives up on it
// after its read timeout, answering 401 or dropping the request: the
// client, which would otherwise wait for its own deadline, hears from the
// server first.
func TestReadTimeoutPerRequest(t *testing.T) {
	cfg := server.DefaultHTTPConfig()
	cfg.ReadTimeout = 100 * time.Millisecond
	base := serveHTTP(t, newBoundServer(t), cfg, nil)
	for _, h2c := range []bool{false, true} {
		t.Run(fmt.Sprintf("h2c %v", h2c), func(t *testing.T) {
			pr, pw := io.Pipe()
			defer pw.Close()
			go io.WriteString(pw, `{"operationId":`) // then nothing more
			// A failure bound only: far beyond the read timeout.
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			req := signedRPC(t, base, pr, nil).WithContext(ctx)
			resp, err := transport(t, h2c).RoundTrip(req)
			if ctx.Err() != nil {
				t.Fatal("the server kept waiting for the body")
			}
			if err != nil {
				return // the server dropped the request
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("answer %d, want 401 (the body could not be read, so it was not authenticated)", resp.StatusCode)
			}
		})
	}
}

// TestRefusedStreamKeepsTheConnection sends, over one HTTP/2 connection
// with prior knowledge, an RPC whose body runs past the bound (three
// frames of 16 KiB, within the stream's flow-control window, without its
// end), then a valid RPC on the next stream of the same connection: the
// first is answered 413, the second 200, and the server sends no GOAWAY.
// A server that dropped the connection to refuse one stream would fail
// every other request sharing it.
func TestRefusedStreamKeepsTheConnection(t *testing.T) {
	base := serveHTTP(t, newBoundServer(t), server.DefaultHTTPConfig(), nil)
	fr := dialHTTP2(t, base)
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	headers := func(id uint32, signed []byte) {
		t.Helper()
		block.Reset()
		ts := time.Now().Unix()
		for _, f := range []hpack.HeaderField{
			{Name: ":method", Value: http.MethodPost}, {Name: ":scheme", Value: "http"},
			{Name: ":authority", Value: "sluice"}, {Name: ":path", Value: wire.PathRPC},
			{Name: strings.ToLower(wire.HeaderTimestamp), Value: strconv.FormatInt(ts, 10)},
			{Name: strings.ToLower(wire.HeaderSignature), Value: wire.Sign(testSecret, ts, http.MethodPost, wire.PathRPC, signed)},
		} {
			if err := enc.WriteField(f); err != nil {
				t.Fatal(err)
			}
		}
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block.Bytes(), EndHeaders: true}); err != nil {
			t.Fatal(err)
		}
	}

	headers(1, nil)
	chunk := bytes.Repeat([]byte("x"), 16<<10)
	for range 3 {
		if err := fr.WriteData(1, false, chunk); err != nil {
			t.Fatal(err)
		}
	}
	dec := hpack.NewDecoder(4096, nil)
	// status reads frames until stream id's answer, and returns its status.
	status := func(id uint32) string {
		t.Helper()
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				t.Fatalf("waiting for stream %d's answer: %v (the server closed the connection)", id, err)
			}
			switch f := f.(type) {
			case *http2.SettingsFrame:
				if !f.IsAck() {
					if err := fr.WriteSettingsAck(); err != nil {
						t.Fatal(err)
					}
				}
			case *http2.GoAwayFrame:
				t.Fatalf("waiting for stream %d's answer: GOAWAY (%v)", id, f.ErrCode)
			case *http2.HeadersFrame:
				fields, err := dec.DecodeFull(f.HeaderBlockFragment())
				if err != nil {
					t.Fatal(err)
				}
				if f.StreamID != id {
					continue
				}
				for _, hf := range fields {
					if hf.Name == ":status" {
						return hf.Value
					}
				}
				t.Fatal("an answer without a status")
			}
		}
	}
	if got := status(1); got != "413" {
		t.Fatalf("a body past the bound: status %s, want 413", got)
	}

	headers(3, []byte(incrBody))
	if err := fr.WriteData(3, true, []byte(incrBody)); err != nil {
		t.Fatalf("the next request on the connection: %v", err)
	}
	if got := status(3); got != "200" {
		t.Fatalf("the next request on the connection: status %s, want 200", got)
	}
}

// TestRefusalBeforeTheBodyOnTheWire streams a 100 MB chunked body to each
// endpoint that answers before reading its body — a signed endpoint
// without signature headers, an operator or limits endpoint without the
// token, no endpoint at all, a GET — and counts the bytes the server
// took off the socket before it answered: the request head and one buffer
// of read-ahead, never the 256 KiB net/http drains from a body the handler
// left unread when the connection is to be kept.
func TestRefusalBeforeTheBodyOnTheWire(t *testing.T) {
	for _, tc := range []struct {
		name, method, path, headers string
		status                      int
	}{
		{"rpc unsigned", http.MethodPost, wire.PathRPC, "", http.StatusUnauthorized},
		{"rpc without signature", http.MethodPost, wire.PathRPC, wire.HeaderTimestamp + ": 1767225600\r\n", http.StatusUnauthorized},
		{"envelope unsigned", http.MethodPost, wire.PathRPCs, "", http.StatusUnauthorized},
		{"stop without token", http.MethodPost, wire.PathStop, "", http.StatusUnauthorized},
		{"stop with a wrong token", http.MethodPost, wire.PathStop, "Authorization: Bearer wrong\r\n", http.StatusUnauthorized},
		{"limiter without token", http.MethodPut, wire.PathLimiters + "/billing", "", http.StatusUnauthorized},
		{"policy without token", http.MethodPut, wire.PathPolicies + "/login", "", http.StatusUnauthorized},
		{"limiters wrong method", http.MethodPost, wire.PathLimiters, "", http.StatusMethodNotAllowed},
		{"ping wrong method", http.MethodPost, wire.PathPing, "", http.StatusMethodNotAllowed},
		{"no such endpoint", http.MethodPost, "/v1/nothing", "", http.StatusNotFound},
		{"state, which reads no body", http.MethodGet, wire.PathState, "Authorization: Bearer " + strings.Repeat("o", wire.MinSecretLen) + "\r\n", http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hs, counts := startCounted(t)
			resp := streamChunked(t, hs.Listener.Addr().String(),
				fmt.Sprintf("%s %s HTTP/1.1\r\nHost: sluice\r\nTransfer-Encoding: chunked\r\n%s\r\n", tc.method, tc.path, tc.headers))
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, tc.status)
			}
			if !resp.Close {
				t.Error("the refusal keeps the connection open; want Connection: close")
			}
			const slack = 8 << 10 // request head, chunk framing, one bufio buffer
			if got := counts.readBeforeWrite.Load(); got > slack {
				t.Errorf("the server read %d bytes off the socket before answering, want at most %d", got, slack)
			}
		})
	}
}

// streamChunked sends head to addr, then up to 100 MB of chunked body
// until the server answers, and returns the answer.
func streamChunked(t *testing.T, addr, head string) *http.Response {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
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
	return resp
}

// TestReadBodyKeepsTheConnection sends a chunked body that the handler
// reads whole, signed and within the bound, and checks that the answer
// keeps the HTTP/1.1 connection: only a body left unread closes it.
func TestReadBodyKeepsTheConnection(t *testing.T) {
	s := newBoundServer(t)
	body := []byte(`{"operationId":"op-1","family":"default","steps":[{"partition":"p","commands":[{"op":"kv.get","key":"k"}]}]}`)
	ts := time.Now().Unix()
	req := httptest.NewRequest(http.MethodPost, wire.PathRPC, io.NopCloser(bytes.NewReader(body)))
	req.ContentLength = -1
	req.Header.Set(wire.HeaderTimestamp, strconv.FormatInt(ts, 10))
	req.Header.Set(wire.HeaderSignature, wire.Sign([]byte(strings.Repeat("s", wire.MinSecretLen)), ts, http.MethodPost, wire.PathRPC, body))
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d, want 200; body %s", rec.Code, rec.Body)
	}
	if got := rec.Header().Get("Connection"); got != "" {
		t.Errorf("Connection %q, want none", got)
	}
}

// startCounted starts the bound server on a listener that counts what each
// connection reads and writes; the server is closed with the test.
func startCounted(t *testing.T) (*httptest.Server, *socketCounts) {
	t.Helper()
	counts := &socketCounts{}
	counts.readBeforeWrite.Store(-1)
	hs := httptest.NewUnstartedServer(newBoundServer(t))
	hs.Listener = countingListener{hs.Listener, counts}
	hs.Start()
	t.Cleanup(hs.Close)
	return hs, counts
}
