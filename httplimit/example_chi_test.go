package httplimit_test

import (
	"log"
	"net/http"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"

	"github.com/sluicehq/sluice/httplimit"
)

// With chi, a Limiter's Handler is middleware as it is: here it guards one
// route through With, so it selects every path ("/*"): whatever chi routes
// to the handler is counted, "/login/" that StripSlashes routes there
// included, and the route may sit in a sub-router (Route, Mount) without
// restating its full path. Use installs it on a whole router or group;
// there it sees every request, and Routes must name full request paths,
// mount points included.
func ExampleLimiter_Handler_chi() {
	cfg := httplimit.DefaultConfig()
	cfg.Routes = []string{"/*"}
	cfg.Prefix = "login"
	cfg.Quota.Limit = 1
	cfg.Store = exampleStore()
	lim, err := httplimit.New(cfg)
	if err != nil {
		log.Fatal(err)
	}

	r := chi.NewRouter()
	r.Use(middleware.StripSlashes)
	r.With(lim.Handler).Post("/login", func(w http.ResponseWriter, r *http.Request) {})
	r.Get("/", func(w http.ResponseWriter, r *http.Request) {})

	send(r, "POST", "/login")
	send(r, "POST", "/login/")
	send(r, "GET", "/")
	// Output:
	// POST /login: 200 RateLimit: "default";r=0;t=45
	// POST /login/: 429 RateLimit: "default";r=0;t=45 Retry-After: 45 {"error":"RATE_LIMITED"}
	// GET /: 200
}
