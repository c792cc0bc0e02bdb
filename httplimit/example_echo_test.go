package httplimit_test

import (
	"log"

	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/httplimit"
)

// With echo, echo.WrapMiddleware turns a Limiter's Handler into echo
// middleware. The stage selects its own routes, so it can sit on the whole
// server.
func ExampleLimiter_Handler_echo() {
	cfg := httplimit.DefaultConfig()
	cfg.Routes = []string{"/login"}
	cfg.Prefix = "login"
	cfg.Quota.Limit = 1
	cfg.Store = exampleStore()
	lim, err := httplimit.New(cfg)
	if err != nil {
		log.Fatal(err)
	}

	e := echo.New()
	e.Use(echo.WrapMiddleware(lim.Handler))
	e.POST("/login", func(c echo.Context) error { return c.NoContent(204) })
	e.GET("/", func(c echo.Context) error { return c.NoContent(204) })

	send(e, "POST", "/login")
	send(e, "POST", "/login")
	send(e, "GET", "/")
	// Output:
	// POST /login: 204 RateLimit: "default";r=0;t=45
	// POST /login: 429 RateLimit: "default";r=0;t=45 Retry-After: 45 {"error":"RATE_LIMITED"}
	// GET /: 204
}
