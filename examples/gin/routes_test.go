package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/httplimit"
)

// downStore fails every batch.
type downStore struct{ engine.Store }

func (downStore) Apply(context.Context, *engine.Batch, *engine.StepResult) error {
	return engine.ErrUnavailable
}

// A request whose quota cannot be checked is answered 503 by the stage and
// the rest of the gin chain never runs.
func TestMiddlewareAbortsOnUnavailable(t *testing.T) {
	gin.SetMode(gin.TestMode)
	cfg := httplimit.DefaultConfig()
	cfg.Routes = []string{"/login"}
	cfg.Prefix = "login"
	cfg.Quota.Limit = 1
	cfg.Store = downStore{}
	lim, err := httplimit.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ran := 0
	r := gin.New()
	r.Use(Middleware(lim.Handler), func(c *gin.Context) { ran++ })
	r.POST("/login", func(c *gin.Context) { ran++ })
	rec := send(r, http.MethodPost, "/login")
	if rec.Code != http.StatusServiceUnavailable || ran != 0 {
		t.Fatalf("unavailable store: %d, %d later handlers ran; want 503 and none", rec.Code, ran)
	}
	if ct := rec.Header().Get("Content-Type"); ct == "" {
		t.Fatal("503 lost its Content-Type")
	}
}

// gin's redirects cost nothing, and the spellings gin serves as the
// route cost the route's quota.
func TestMiddlewareRedirectsAndRewrites(t *testing.T) {
	gin.SetMode(gin.TestMode)
	lim, store := newLimiter(t, 2)
	r := newRouter(lim)
	r.RedirectFixedPath = true
	r.RemoveExtraSlash = true

	// RedirectTrailingSlash and RedirectFixedPath answer before any
	// handler: the client pays when it follows the redirect.
	for _, p := range []string{"/login/", "/LOGIN"} {
		if rec := send(r, http.MethodPost, p); rec.Code != http.StatusTemporaryRedirect || rec.Header().Get("Location") != "/login" {
			t.Fatalf("POST %s: %d to %q, want 307 to /login", p, rec.Code, rec.Header().Get("Location"))
		}
	}
	if n := store.applies.Load(); n != 0 {
		t.Fatalf("%d store calls for redirects, want 0", n)
	}
	// RemoveExtraSlash serves "//login" as "/login".
	for i, want := range []int{http.StatusOK, http.StatusOK, http.StatusTooManyRequests} {
		if rec := send(r, http.MethodPost, "//login"); rec.Code != want {
			t.Fatalf("POST //login %d: %d, want %d", i, rec.Code, want)
		}
	}
}

// The stage keys clients by the socket peer, whatever X-Forwarded-For
// says: gin trusts that header from every peer unless SetTrustedProxies
// says otherwise, and its ClientIP is not what the stage counts by.
func TestMiddlewareIgnoresUntrustedForwardedFor(t *testing.T) {
	gin.SetMode(gin.TestMode)
	lim, _ := newLimiter(t, 1)
	r := newRouter(lim)
	for i, want := range []int{http.StatusOK, http.StatusTooManyRequests} {
		req := httptest.NewRequest(http.MethodPost, "/login", nil)
		req.RemoteAddr = "203.0.113.7:52100"
		req.Header.Set("X-Forwarded-For", []string{"198.51.100.1", "198.51.100.2"}[i])
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, req)
		if rec.Code != want {
			t.Fatalf("login %d with a new X-Forwarded-For: %d, want %d", i, rec.Code, want)
		}
	}
}

// With UseRawPath (or UseEscapedPath) and RemoveExtraSlash, gin cleans the
// escaped path and routes "/a%2Fb/../login" to the login route, though
// its decoded path cleans to "/a/login": the stage counts it against the
// login quota all the same.
func TestMiddlewareEscapedPathsCostTheRoutesQuota(t *testing.T) {
	gin.SetMode(gin.TestMode)
	for _, escaped := range []bool{false, true} {
		lim, _ := newLimiter(t, 2)
		r := newRouter(lim)
		r.UseRawPath, r.UseEscapedPath = !escaped, escaped
		r.RemoveExtraSlash = true
		for i, want := range []int{http.StatusOK, http.StatusOK, http.StatusTooManyRequests} {
			if rec := send(r, http.MethodPost, "/a%2Fb/../login"); rec.Code != want {
				t.Fatalf("UseEscapedPath %v: POST /a%%2Fb/../login %d: %d, want %d", escaped, i, rec.Code, want)
			}
		}
	}
}
