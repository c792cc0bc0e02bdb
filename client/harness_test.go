package client_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/testclock"
	"github.com/sluicehq/sluice/server"
	"github.com/sluicehq/sluice/store/memstore"
	"github.com/sluicehq/sluice/wire"
)

const (
	testSecret = "test-signing-secret-0123456789abcdef"
	testPepper = "test-key-pepper-0123456789abcdefghij"
	testToken  = "test-operator-token-0123456789abcdef"
)

// start is the store clock's first reading: the start of a second, so fixed
// windows of a second begin with the test.
const start = int64(1_700_000_000_000)

// harness is a real Sluice server over memstore behind an httptest server,
// with a recording store and a counting, switchable front.
type harness struct {
	t      testing.TB
	srv    *httptest.Server
	rpc    *server.Server
	store  *recordingStore
	clock  *testclock.Clock // the store's clock
	rpcs   atomic.Int64     // POST /v1/rpc requests that reached the front
	proto  atomic.Int64     // the HTTP major version of the last of them
	down   atomic.Bool      // answer 503 without reaching the server
	mu     sync.Mutex
	bodies [][]byte
	// before, if set, runs on every request before the server does.
	before func(w http.ResponseWriter, r *http.Request) (handled bool)
}

func newHarness(t testing.TB) *harness {
	t.Helper()
	clock := testclock.At(start)
	cfg := memstore.DefaultConfig()
	cfg.Clock = clock
	mem, err := memstore.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, clock: clock, store: &recordingStore{Store: mem}}
	scfg := server.DefaultConfig()
	scfg.Secrets = []string{testSecret}
	scfg.OperatorToken = testToken
	h.rpc = server.New(engine.New(h.store), scfg)
	h.srv = startHTTPServer(t, http.HandlerFunc(h.serve))
	return h
}

// startHTTPServer serves h on a loopback port as sluice serve does, with
// server.NewHTTPServer: HTTP/1.1 and HTTP/2 with prior knowledge.
func startHTTPServer(t testing.TB, h http.Handler) *httptest.Server {
	t.Helper()
	hs, err := server.NewHTTPServer(h, server.DefaultHTTPConfig())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.Config = hs
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

func (h *harness) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == wire.PathRPC {
		h.rpcs.Add(1)
		h.proto.Store(int64(r.ProtoMajor))
		body, _ := io.ReadAll(r.Body)
		h.mu.Lock()
		h.bodies = append(h.bodies, body)
		h.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	if h.before != nil && h.before(w, r) {
		return
	}
	if h.down.Load() {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, `{"type":"about:blank","title":"Service Unavailable","status":503,"code":"guard_unavailable","reason":"store unavailable"}`)
		return
	}
	h.rpc.ServeHTTP(w, r)
}

// config returns a valid client configuration for the harness.
func (h *harness) config() client.Config {
	cfg := client.DefaultConfig()
	cfg.URL = h.srv.URL
	cfg.Secret = testSecret
	cfg.Pepper = testPepper
	return cfg
}

// client returns a client of the harness, closed with the test.
func (h *harness) client() *client.Client {
	c := client.New(h.config())
	if err := c.Err(); err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { c.Close() })
	return c
}

// inProcessClient returns a client of the harness whose requests reach the
// server's handler in process, through an httptest.ResponseRecorder rather
// than a socket.
func (h *harness) inProcessClient() *client.Client {
	cfg := h.config()
	cfg.HTTPClient = &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		rec := httptest.NewRecorder()
		h.serve(rec, r)
		return rec.Result(), nil
	})}
	c := client.New(cfg)
	if err := c.Err(); err != nil {
		h.t.Fatal(err)
	}
	return c
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// sent returns every RPC body the front received.
func (h *harness) sent() [][]byte {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([][]byte(nil), h.bodies...)
}

// operator calls an operator endpoint.
func (h *harness) operator(path string) {
	h.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, h.srv.URL+path, nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := h.srv.Client().Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		h.t.Fatalf("%s: %s", path, resp.Status)
	}
}

// recordingStore records every partition name and key that reaches the
// server's store from a caller (the server's own reserved partitions, such
// as the stop fence, are not callers' data).
type recordingStore struct {
	engine.Store
	mu    sync.Mutex
	names []string
}

func (s *recordingStore) Apply(ctx context.Context, b *engine.Batch, out *engine.StepResult) error {
	if strings.HasPrefix(b.Partition, "\x00") {
		return s.Store.Apply(ctx, b, out)
	}
	s.mu.Lock()
	s.names = append(s.names, b.Partition)
	for _, c := range b.Commands {
		for _, k := range []string{c.Key, c.Receipt} {
			if k != "" {
				s.names = append(s.names, k)
			}
		}
		for _, w := range c.Windows {
			s.names = append(s.names, w.Key)
		}
		for _, bu := range c.Budgets {
			s.names = append(s.names, bu.Key)
		}
	}
	s.mu.Unlock()
	return s.Store.Apply(ctx, b, out)
}

func (s *recordingStore) recorded() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.names...)
}

// fixed returns a fixed window.
func fixed(key string, limit, windowMs int64) engine.Window {
	return engine.Window{Key: key, Kind: algo.KindFixed, Limit: limit, WindowMs: windowMs}
}

// scripted returns an httptest server answering every request with status,
// content type and body, and counting the requests.
func scripted(t *testing.T, status int, contentType, body string) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	srv := startHTTPServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		if contentType != "" {
			w.Header().Set("Content-Type", contentType)
		}
		if status == http.StatusFound {
			w.Header().Set("Location", "/elsewhere")
		}
		w.WriteHeader(status)
		io.WriteString(w, body)
	}))
	return srv, &n
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}
