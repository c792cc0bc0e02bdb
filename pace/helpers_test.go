package pace_test

import (
	"context"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/pace"
	"github.com/sluicehq/sluice/store/memstore"
)

// Inside a synctest bubble the clock starts at 2000-01-01 00:00:00 UTC and
// moves only when every goroutine of the bubble is blocked; a memory store
// on the system clock reads that fake time.

// newStore returns a memory store on the (bubble's) system clock.
func newStore(t *testing.T) *memstore.Store {
	t.Helper()
	s, err := memstore.New(memstore.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// configure configures name in reg with cfg, failing the test on error.
func configure(t *testing.T, reg *pace.Registry, name string, cfg pace.Config) {
	t.Helper()
	if err := reg.Configure(context.Background(), name, cfg); err != nil {
		t.Fatal(err)
	}
}

// config returns a valid configuration of limit calls per window, without
// a start tolerance: in a bubble whose store answers at once a call starts
// at its slot exactly, so the tests of pacing see the log's exact windows.
// The start tolerance has tests of its own (starttolerance_test.go).
func config(limit int, window time.Duration) pace.Config {
	cfg := pace.DefaultConfig()
	cfg.Limit, cfg.Window, cfg.StartTolerance = limit, window, 0
	return cfg
}

// since returns the bubble's time elapsed since start.
func since(start time.Time) time.Duration { return time.Since(start) }

// starts records the instants at which fns started.
type starts struct {
	mu sync.Mutex
	at []time.Duration
}

func (s *starts) add(d time.Duration) {
	s.mu.Lock()
	s.at = append(s.at, d)
	s.mu.Unlock()
}

func (s *starts) sorted() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := slices.Clone(s.at)
	slices.Sort(out)
	return out
}

// maxInWindow returns the most starts in any half-open window [x, x+w).
func maxInWindow(at []time.Duration, w time.Duration) int {
	most := 0
	for i, x := range at {
		n := 0
		for _, y := range at[i:] {
			if y < x+w {
				n++
			}
		}
		most = max(most, n)
	}
	return most
}

// response returns an HTTP response with the given status and header
// fields (name, value pairs).
func response(status int, fields ...string) *http.Response {
	h := http.Header{}
	for i := 0; i+1 < len(fields); i += 2 {
		h.Set(fields[i], fields[i+1])
	}
	return &http.Response{StatusCode: status, Header: h, Body: &trackedBody{Reader: strings.NewReader("body")}}
}

// trackedBody is a response body that remembers being closed.
type trackedBody struct {
	io.Reader
	mu     sync.Mutex
	closed bool
}

func (b *trackedBody) Close() error {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	return nil
}

func (b *trackedBody) isClosed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.closed
}

// faultStore wraps a store, failing batches on demand with
// engine.ErrUnavailable: every batch while down, the next failNext batches,
// and batches matching fail. With lose set, a failing batch is applied
// first and only its answer is lost.
type faultStore struct {
	engine.Store
	mu       sync.Mutex
	down     bool
	failNext int
	lose     bool
	fail     func(*engine.Batch) bool
}

func (f *faultStore) Apply(ctx context.Context, b *engine.Batch, out *engine.StepResult) error {
	f.mu.Lock()
	fail := f.down || f.failNext > 0 || (f.fail != nil && f.fail(b))
	if f.failNext > 0 {
		f.failNext--
	}
	lose := f.lose
	f.mu.Unlock()
	if !fail {
		return f.Store.Apply(ctx, b, out)
	}
	if lose {
		if err := f.Store.Apply(ctx, b, out); err != nil {
			return err
		}
	}
	return engine.ErrUnavailable
}

func (f *faultStore) set(fn func(f *faultStore)) {
	f.mu.Lock()
	fn(f)
	f.mu.Unlock()
}

// hasOp reports whether a batch holds a command of op.
func hasOp(b *engine.Batch, op engine.Op) bool {
	return slices.ContainsFunc(b.Commands, func(c engine.Command) bool { return c.Op == op })
}

// ok returns a function returning v, counting its calls.
func ok[T any](v T, calls *int) func(context.Context) (T, error) {
	return func(context.Context) (T, error) {
		*calls++
		return v, nil
	}
}

// reconfigure patches the configuration of name, failing the test on error.
func reconfigure(t *testing.T, reg *pace.Registry, name string, patch func(*pace.Config)) {
	t.Helper()
	if _, err := reg.Reconfigure(context.Background(), name, patch); err != nil {
		t.Fatal(err)
	}
}
