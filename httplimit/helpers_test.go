package httplimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/testclock"
	"github.com/sluicehq/sluice/store/memstore"
)

// epoch is the store clock's first reading in every test: the top of a
// minute, so that fixed windows of whole minutes begin with the test.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// tb is what the helpers need of a *testing.T or a *rapid.T.
type tb interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
}

// newMem returns a memory store capped at maxKeys on a controlled clock
// reading epoch.
func newMem(t tb, maxKeys int) (*memstore.Store, *testclock.Clock) {
	t.Helper()
	clock := testclock.New(epoch)
	cfg := memstore.DefaultConfig()
	cfg.MaxKeys = maxKeys
	cfg.Clock = clock
	mem, err := memstore.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return mem, clock
}

// config returns a valid configuration limiting routes to limit requests
// per minute on store.
func config(store engine.Store, limit int64, routes ...string) httplimit.Config {
	cfg := httplimit.DefaultConfig()
	cfg.Routes = routes
	cfg.Prefix = "test"
	cfg.Quota.Limit = limit
	cfg.Store = store
	return cfg
}

// stage builds the stage of cfg around a handler counting its calls.
func stage(t tb, cfg httplimit.Config) (http.Handler, *atomic.Int64) {
	t.Helper()
	lim, err := httplimit.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var ran atomic.Int64
	return lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ran.Add(1)
		w.WriteHeader(http.StatusOK)
	})), &ran
}

// serve sends one request from remote (a RemoteAddr) through h.
func serve(h http.Handler, method, path, remote string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, nil)
	req.RemoteAddr = remote
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// countingStore counts the batches that reach a store and records their
// partitions and keys.
type countingStore struct {
	engine.Store
	applies atomic.Int64
	mu      sync.Mutex
	names   []string // partitions and command keys, in order
}

func (s *countingStore) Apply(ctx context.Context, b *engine.Batch, out *engine.StepResult) error {
	s.applies.Add(1)
	s.mu.Lock()
	s.names = append(s.names, b.Partition)
	for _, c := range b.Commands {
		s.names = append(s.names, c.Key)
		for _, w := range c.Windows {
			s.names = append(s.names, w.Key)
		}
	}
	s.mu.Unlock()
	return s.Store.Apply(ctx, b, out)
}

func (s *countingStore) partitions() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.names...)
}

// failingStore fails every batch with err.
type failingStore struct {
	err   error
	calls atomic.Int64
}

func (s *failingStore) Apply(context.Context, *engine.Batch, *engine.StepResult) error {
	s.calls.Add(1)
	return s.err
}

func (s *failingStore) Close() error { return nil }
