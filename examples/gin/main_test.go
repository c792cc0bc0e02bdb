package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/store/memstore"
)

// stoppedClock reads one instant forever.
type stoppedClock struct{ t time.Time }

func (c stoppedClock) Now() time.Time { return c.t }

// countingStore counts the batches that reach the store.
type countingStore struct {
	engine.Store
	applies atomic.Int64
}

func (s *countingStore) Apply(ctx context.Context, b *engine.Batch, out *engine.StepResult) error {
	s.applies.Add(1)
	return s.Store.Apply(ctx, b, out)
}

// newLimiter returns a stage allowing limit logins per client per minute,
// over a memory store whose clock is stopped 20 seconds into a minute, and
// that store.
func newLimiter(t *testing.T, limit int64) (*httplimit.Limiter, *countingStore) {
	t.Helper()
	mcfg := memstore.DefaultConfig()
	mcfg.Clock = stoppedClock{time.Date(2026, 1, 1, 0, 0, 20, 0, time.UTC)}
	mem, err := memstore.New(mcfg)
	if err != nil {
		t.Fatal(err)
	}
	store := &countingStore{Store: mem}

	cfg := httplimit.DefaultConfig()
	cfg.Routes = []string{"/login"}
	cfg.Prefix = "login"
	cfg.Quota.Limit = limit
	cfg.Store = store
	lim, err := httplimit.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return lim, store
}

// send serves one request from a fixed client address through h.
func send(h http.Handler, method, path string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, nil)
	req.RemoteAddr = "203.0.113.7:52100"
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// The application's login route admits its quota with the RateLimit
// fields, then answers 429 with Retry-After to the window's end; the
// unlimited route passes through without touching the store.
func TestMiddleware(t *testing.T) {
	gin.SetMode(gin.TestMode)
	lim, store := newLimiter(t, 2)
	r := newRouter(lim)

	for i := range 2 {
		rec := send(r, http.MethodPost, "/login")
		if rec.Code != http.StatusOK || rec.Body.String() != `{"ok":true}` {
			t.Fatalf("login %d: %d %s", i, rec.Code, rec.Body)
		}
		if rec.Header().Get("RateLimit-Policy") != `"default";q=2;w=60` {
			t.Fatalf("login %d: RateLimit-Policy %q", i, rec.Header().Get("RateLimit-Policy"))
		}
	}
	rec := send(r, http.MethodPost, "/login")
	if rec.Code != http.StatusTooManyRequests || rec.Body.String() != httplimit.RejectionBody {
		t.Fatalf("third login: %d %s, want 429 %s", rec.Code, rec.Body, httplimit.RejectionBody)
	}
	if ra := rec.Header().Get("Retry-After"); ra != "40" {
		t.Fatalf("Retry-After %q, want 40", ra)
	}
	if rl := rec.Header().Get("RateLimit"); rl != `"default";r=0;t=40` {
		t.Fatalf("RateLimit %q", rl)
	}
	if n := store.applies.Load(); n != 3 {
		t.Fatalf("%d store calls for 3 logins", n)
	}

	// Unselected routes pass through without store I/O.
	if rec := send(r, http.MethodGet, "/healthz"); rec.Code != http.StatusNoContent || rec.Header().Get("RateLimit") != "" {
		t.Fatalf("healthz: %d %v", rec.Code, rec.Header())
	}
	if n := store.applies.Load(); n != 3 {
		t.Fatalf("%d store calls after unselected requests, want 3", n)
	}
}

// The gin chain after the adapter runs once for an admitted request and
// for an unselected route, and not at all for a rejected one: a middleware
// and a handler registered behind the adapter on the limited route would
// run, and answer after the 429, if the adapter did not abort the chain.
func TestMiddlewareAbortsTheChain(t *testing.T) {
	gin.SetMode(gin.TestMode)
	lim, _ := newLimiter(t, 1)
	var later, handled atomic.Int64
	r := gin.New()
	r.Use(Middleware(lim.Handler), func(c *gin.Context) { later.Add(1) })
	r.POST("/login", func(c *gin.Context) {
		handled.Add(1)
		c.String(http.StatusOK, "handled")
	})
	r.GET("/healthz", func(c *gin.Context) { c.Status(http.StatusNoContent) })

	if rec := send(r, http.MethodPost, "/login"); rec.Code != http.StatusOK || rec.Body.String() != "handled" {
		t.Fatalf("admitted login: %d %s", rec.Code, rec.Body)
	}
	if later.Load() != 1 || handled.Load() != 1 {
		t.Fatalf("admitted login: later middleware ran %d times, handler %d; want 1 and 1", later.Load(), handled.Load())
	}

	rec := send(r, http.MethodPost, "/login")
	if later.Load() != 1 || handled.Load() != 1 {
		t.Fatalf("rejected login: later middleware ran %d times, handler %d; want 1 and 1 (from the admitted login)", later.Load(), handled.Load())
	}
	if rec.Code != http.StatusTooManyRequests || rec.Body.String() != httplimit.RejectionBody {
		t.Fatalf("rejected login: %d %s, want 429 %s", rec.Code, rec.Body, httplimit.RejectionBody)
	}

	if rec := send(r, http.MethodGet, "/healthz"); rec.Code != http.StatusNoContent || later.Load() != 2 {
		t.Fatalf("unselected route: %d, later middleware ran %d times in all, want 2", rec.Code, later.Load())
	}
}
