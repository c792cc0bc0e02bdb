// Command gin serves a gin application whose login route is protected by a
// Sluice route quota.
//
// A stage of package httplimit is net/http middleware, of type
// func(http.Handler) http.Handler; Middleware below adapts it to a
// gin.HandlerFunc in a few lines. The example lives in a module of its own
// so that gin never becomes a dependency of Sluice.
//
//	go run . -addr 127.0.0.1:8080
//	curl -i -X POST http://127.0.0.1:8080/login
package main

import (
	"errors"
	"flag"
	"log"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/sluice/httplimit"
)

// Middleware adapts a net/http middleware stage, such as
// httplimit.Limiter.Handler, to gin. The rest of the gin chain runs inside
// the stage, so it runs only when the stage lets the request through; when
// the stage answers itself (429, or 503 when the quota could not be
// checked) the chain is aborted.
//
// The stage keys clients by its own resolver (httplimit.Config.ClientIP),
// never by gin's ClientIP: behind a proxy, give ClientIP.TrustProxy the
// networks given to gin's SetTrustedProxies, or every client behind the
// proxy shares the proxy's quota.
func Middleware(stage func(http.Handler) http.Handler) gin.HandlerFunc {
	return func(c *gin.Context) {
		passed := false
		stage(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			passed = true
			c.Request = r
			c.Next()
		})).ServeHTTP(c.Writer, c.Request)
		if !passed {
			c.Abort()
		}
	}
}

// newRouter returns the application: POST /login limited by lim, GET
// /healthz not.
func newRouter(lim *httplimit.Limiter) *gin.Engine {
	r := gin.New()
	r.Use(gin.Recovery(), Middleware(lim.Handler))
	r.POST("/login", func(c *gin.Context) { c.JSON(http.StatusOK, gin.H{"ok": true}) })
	r.GET("/healthz", func(c *gin.Context) { c.Status(http.StatusNoContent) })
	return r
}

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "listen address")
	flag.Parse()

	cfg := httplimit.DefaultConfig()
	cfg.Routes = []string{"/login"}
	cfg.Prefix = "login"
	cfg.Quota.Limit = 5 // per client address per minute
	lim, err := httplimit.New(cfg)
	if err != nil {
		log.Fatal(err)
	}

	gin.SetMode(gin.ReleaseMode)
	srv := &http.Server{
		Addr:              *addr,
		Handler:           newRouter(lim),
		ReadHeaderTimeout: 5 * time.Second,
	}
	log.Printf("listening on %s", *addr)
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Fatal(err)
	}
}
