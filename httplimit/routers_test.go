package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	"github.com/sluicehq/sluice/httplimit"
)

// routerLimiter returns a stage admitting one request per client.
func routerLimiter(t *testing.T, routes ...string) *httplimit.Limiter {
	t.Helper()
	cfg := httplimit.DefaultConfig()
	cfg.Routes = routes
	cfg.Prefix = "login"
	cfg.Quota.Limit = 1
	cfg.Store = exampleStore()
	lim, err := httplimit.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return lim
}

// status serves one request from a fixed client and returns its status.
func status(h http.Handler, method, path string) int {
	req := httptest.NewRequest(method, path, nil)
	req.RemoteAddr = "203.0.113.7:52100"
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Code
}

// A stage attached to one chi route with With, as in the chi example,
// counts that route inside a sub-router too, where the route's pattern is
// relative to the mount point and the request's path is not.
func TestChiWithInSubRouter(t *testing.T) {
	lim := routerLimiter(t, "/*")
	r := chi.NewRouter()
	r.Route("/api", func(r chi.Router) {
		r.With(lim.Handler).Post("/login", func(w http.ResponseWriter, r *http.Request) {})
		r.Get("/status", func(w http.ResponseWriter, r *http.Request) {})
	})
	for i, want := range []int{http.StatusOK, http.StatusTooManyRequests} {
		if got := status(r, http.MethodPost, "/api/login"); got != want {
			t.Fatalf("login %d: %d, want %d", i, got, want)
		}
	}
	if got := status(r, http.MethodGet, "/api/status"); got != http.StatusOK {
		t.Fatalf("unguarded route: %d, want 200", got)
	}
}

// Installed with Use, as in the echo example, the stage runs after echo's
// Pre middleware, so it counts the path echo routes: "/login/" that
// RemoveTrailingSlash rewrites to "/login" spends the same quota.
func TestEchoUseSeesPreRewrites(t *testing.T) {
	lim := routerLimiter(t, "/login")
	e := echo.New()
	e.Pre(middleware.RemoveTrailingSlash())
	e.Use(echo.WrapMiddleware(lim.Handler))
	e.POST("/login", func(c echo.Context) error { return c.NoContent(http.StatusNoContent) })
	if got := status(e, http.MethodPost, "/login"); got != http.StatusNoContent {
		t.Fatalf("login: %d, want 204", got)
	}
	if got := status(e, http.MethodPost, "/login/"); got != http.StatusTooManyRequests {
		t.Fatalf("login/: %d, want 429", got)
	}
}
