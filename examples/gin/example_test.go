package main

import (
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/store/memstore"
)

// With gin, Middleware adapts a Limiter's Handler to a gin.HandlerFunc. The
// stage selects its own routes, so it can sit on the whole engine: the
// login route allows one request per client per minute, and the health
// check is not limited. The store's clock is stopped 15 seconds into a
// minute, so that the delays printed are the same whenever the example
// runs; a service leaves Config.Store nil, or passes the store its fleet
// shares.
func ExampleMiddleware() {
	mcfg := memstore.DefaultConfig()
	mcfg.Clock = stoppedClock{time.Date(2026, 1, 1, 0, 0, 15, 0, time.UTC)}
	store, err := memstore.New(mcfg)
	if err != nil {
		log.Fatal(err)
	}

	cfg := httplimit.DefaultConfig()
	cfg.Routes = []string{"/login"}
	cfg.Prefix = "login"
	cfg.Quota.Limit = 1
	cfg.Store = store
	lim, err := httplimit.New(cfg)
	if err != nil {
		log.Fatal(err)
	}

	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.Use(Middleware(lim.Handler))
	r.POST("/login", func(c *gin.Context) { c.JSON(http.StatusOK, gin.H{"ok": true}) })
	r.GET("/healthz", func(c *gin.Context) { c.Status(http.StatusNoContent) })

	for _, call := range []struct{ method, path string }{
		{"POST", "/login"},
		{"POST", "/login"},
		{"GET", "/healthz"},
	} {
		req := httptest.NewRequest(call.method, call.path, nil)
		req.RemoteAddr = "203.0.113.7:52100"
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, req)
		fmt.Printf("%s %s: %d", call.method, call.path, rec.Code)
		if v := rec.Header().Get("RateLimit"); v != "" {
			fmt.Printf(" RateLimit: %s", v)
		}
		if v := rec.Header().Get("Retry-After"); v != "" {
			fmt.Printf(" Retry-After: %s", v)
		}
		if rec.Body.Len() > 0 {
			fmt.Printf(" %s", rec.Body)
		}
		fmt.Println()
	}
	// Output:
	// POST /login: 200 RateLimit: "default";r=0;t=45 {"ok":true}
	// POST /login: 429 RateLimit: "default";r=0;t=45 Retry-After: 45 {"error":"RATE_LIMITED"}
	// GET /healthz: 204
}
