package server_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/iotest"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/server"
	"github.com/sluicehq/sluice/store/memstore"
	"github.com/sluicehq/sluice/wire"
)

// fenceStore counts the batches reaching the stop fence's partition, and
// holds the next one of them when armed, until released.
type fenceStore struct {
	engine.Store
	batches atomic.Int64

	mu      sync.Mutex
	arm     bool
	held    chan struct{} // closed when a held batch arrives
	release chan struct{}
}

var fencePartition = engine.ReservedPartition("control")

func (s *fenceStore) Apply(ctx context.Context, b *engine.Batch, out *engine.StepResult) error {
	if b.Partition == fencePartition {
		s.batches.Add(1)
		s.mu.Lock()
		hold := s.arm
		s.arm = false
		s.mu.Unlock()
		if hold {
			close(s.held)
			<-s.release
		}
	}
	return s.Store.Apply(ctx, b, out)
}

// fenceHarness returns a server over a fenceStore on memstore whose copy
// of the fence is fresh for refresh, and the store.
func fenceHarness(t *testing.T, refresh time.Duration) (*fenceStore, *admHarness) {
	t.Helper()
	mem, err := memstore.New(memstore.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mem.Close() })
	st := &fenceStore{Store: mem}
	cfg := server.DefaultConfig()
	cfg.Secrets, cfg.OperatorToken = []string{admSecret}, admToken
	cfg.FenceRefresh = refresh
	return st, &admHarness{t: t, srv: server.New(engine.New(st), cfg)}
}

// holdNext arms the store to hold the next batch on the fence's partition.
func (s *fenceStore) holdNext() {
	s.mu.Lock()
	s.arm, s.held, s.release = true, make(chan struct{}), make(chan struct{})
	s.mu.Unlock()
}

// TestFenceWriteHoldsUpNoRPC holds an operator stop in the store while it
// writes the fence: RPCs meanwhile are answered from the server's fresh
// copy of the fence instead of waiting for the write, and they read the
// store's fence no more than once per refresh interval. Once the stop is
// acknowledged, every RPC is refused.
func TestFenceWriteHoldsUpNoRPC(t *testing.T) {
	st, h := fenceHarness(t, time.Hour) // the copy stays fresh for the whole test

	for i := range 10 {
		if rec := h.rpc(get(admission.DefaultFamily, "k")); rec.Code != http.StatusOK {
			t.Fatalf("RPC %d: %d %s", i, rec.Code, rec.Body)
		}
	}
	if n := st.batches.Load(); n != 1 {
		t.Fatalf("10 RPCs read the fence %d times, want once", n)
	}

	st.holdNext()
	stopped := make(chan *httptest.ResponseRecorder)
	go func() { stopped <- h.operator(http.MethodPost, wire.PathStop, `{"reason":"drill"}`) }()
	<-st.held // the stop is being written

	answered := make(chan *httptest.ResponseRecorder, 1)
	go func() { answered <- h.rpc(get(admission.DefaultFamily, "k")) }()
	var during *httptest.ResponseRecorder
	select {
	case during = <-answered:
	case <-time.After(10 * time.Second): // a failure bound, not a timing claim
	}
	close(st.release)
	if rec := <-stopped; rec.Code != http.StatusOK {
		t.Fatalf("stop: %d %s", rec.Code, rec.Body)
	}
	switch {
	case during == nil:
		<-answered
		t.Error("an RPC waited for the operator's write of the fence")
	case during.Code != http.StatusOK:
		t.Errorf("an RPC during the fence write: %d %s, want 200 from the fresh copy", during.Code, during.Body)
	}
	if rec := h.rpc(get(admission.DefaultFamily, "k")); code(t, rec) != wire.CodeStopped {
		t.Errorf("an RPC after the stop was acknowledged: %d %s, want guard_stopped", rec.Code, rec.Body)
	}
}

// TestOperatorBodyRefusals: an operator body over 4 KiB answers 413, one
// that cannot be read 400 invalid, not 413, and malformed JSON 400
// invalid; none of them stops the server.
func TestOperatorBodyRefusals(t *testing.T) {
	h := newAdmHarness(t, func(*admission.Config) {})
	send := func(body io.Reader) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, wire.PathStop, body)
		req.Header.Set("Authorization", "Bearer "+admToken)
		rec := httptest.NewRecorder()
		h.srv.ServeHTTP(rec, req)
		return rec
	}
	for _, tc := range []struct {
		name   string
		body   io.Reader
		status int
	}{
		{"over 4 KiB", strings.NewReader(`{"reason":"` + strings.Repeat("x", 5<<10) + `"}`), http.StatusRequestEntityTooLarge},
		{"unreadable", iotest.ErrReader(errors.New("connection reset")), http.StatusBadRequest},
		{"malformed", strings.NewReader(`{"reason":`), http.StatusBadRequest},
		{"member in another case", strings.NewReader(`{"Family":"default"}`), http.StatusBadRequest},
		{"member twice", strings.NewReader(`{"family":"default","family":""}`), http.StatusBadRequest},
	} {
		if rec := send(tc.body); rec.Code != tc.status {
			t.Errorf("%s: %d %s, want %d", tc.name, rec.Code, rec.Body, tc.status)
		}
	}
	if st := h.state(); st.Stopped {
		t.Error("a refused operator body stopped the server")
	}
}

// TestFenceReadWaitsNoLongerThanItsCaller holds the store's read of the
// fence: a request arriving meanwhile, whose client has gone away (its
// context ended), is answered at once rather than queued behind the read,
// so that requests do not pile up behind a store that hangs; the held read,
// once released, still answers its own request.
func TestFenceReadWaitsNoLongerThanItsCaller(t *testing.T) {
	st, h := fenceHarness(t, 0) // every RPC reads the fence from the store

	st.holdNext()
	first := make(chan int, 1)
	go func() { first <- h.rpc(get(admission.DefaultFamily, "k")).Code }()
	<-st.held // the first RPC's read of the fence is in the store

	gone, cancel := context.WithCancel(context.Background())
	cancel()
	rec := h.rpcContext(gone, get(admission.DefaultFamily, "k")) // with a lock that ignores the context, this waits for the release
	if rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("a request whose client went away, during a held fence read: %d %s, want 503", rec.Code, rec.Body)
	}

	close(st.release)
	if code := <-first; code != http.StatusOK {
		t.Fatalf("the RPC whose fence read was held: %d, want 200", code)
	}
}
