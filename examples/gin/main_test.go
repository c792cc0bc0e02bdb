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

func TestMiddleware(t *testing.T) {
	gin.SetMode(gin.TestMode)
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
	cfg.Quota.Limit = 2
	cfg.Store = store
	lim, err := httplimit.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := newRouter(lim)
	// A gin middleware after the stage must not run for a rejected request.
	var after atomic.Int64
	r.Use(func(c *gin.Context) { after.Add(1) })
	r.POST("/after", func(c *gin.Context) {})

	send := func(method, path string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, path, nil)
		req.RemoteAddr = "203.0.113.7:52100"
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, req)
		return rec
	}

	for i := range 2 {
		rec := send(http.MethodPost, "/login")
		if rec.Code != http.StatusOK || rec.Body.String() != `{"ok":true}` {
			t.Fatalf("login %d: %d %s", i, rec.Code, rec.Body)
		}
		if rec.Header().Get("RateLimit-Policy") != `"default";q=2;w=60` {
			t.Fatalf("login %d: RateLimit-Policy %q", i, rec.Header().Get("RateLimit-Policy"))
		}
	}
	rec := send(http.MethodPost, "/login")
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
	if rec := send(http.MethodGet, "/healthz"); rec.Code != http.StatusNoContent || rec.Header().Get("RateLimit") != "" {
		t.Fatalf("healthz: %d %v", rec.Code, rec.Header())
	}
	if rec := send(http.MethodPost, "/after"); rec.Code != http.StatusOK || after.Load() != 1 {
		t.Fatalf("unselected route: %d, later middleware ran %d times", rec.Code, after.Load())
	}
	if n := store.applies.Load(); n != 3 {
		t.Fatalf("%d store calls after unselected requests, want 3", n)
	}
}
