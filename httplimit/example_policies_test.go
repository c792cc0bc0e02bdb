package httplimit_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/httplimit"
)

// Route limits kept in the store rather than in the code: an operator
// changes them with Set, from any process sharing the store, and every
// stage enforcing the policy follows within its refresh interval, with no
// restart. (Here the operator is this process, which enforces its own
// change at once.)
func ExamplePolicies() {
	ctx := context.Background()
	store := exampleStore() // in a fleet: the client of a Sluice server
	pols, err := httplimit.NewPolicies(httplimit.PoliciesConfig{Store: store})
	if err != nil {
		log.Fatal(err)
	}
	if err := pols.Set(ctx, "login", httplimit.Quota{Limit: 1, Window: time.Minute}); err != nil {
		log.Fatal(err)
	}

	login, err := pols.Policy("login")
	if err != nil {
		log.Fatal(err)
	}
	cfg := httplimit.DefaultConfig()
	cfg.Routes = []string{"/login"}
	cfg.Prefix = "login"
	cfg.Store = store
	cfg.Policy = login
	lim, err := httplimit.New(cfg)
	if err != nil {
		log.Fatal(err)
	}
	h := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))

	send(h, "POST", "/login")
	send(h, "POST", "/login")
	if err := pols.Set(ctx, "login", httplimit.Quota{Limit: 3, Window: time.Minute}); err != nil {
		log.Fatal(err)
	}
	send(h, "POST", "/login")
	names, err := pols.List(ctx)
	fmt.Println(names, err)
	// Output:
	// POST /login: 200 RateLimit: "login";r=0;t=45
	// POST /login: 429 RateLimit: "login";r=0;t=45 Retry-After: 45 {"error":"RATE_LIMITED"}
	// POST /login: 200 RateLimit: "login";r=1;t=45
	// [login] <nil>
}

// Without a fallback, a policy missing from the store refuses every
// request (503). A fallback keeps the route open at a rate of your
// choosing until the policy is set.
func ExampleWithFallback() {
	store := exampleStore()
	pols, err := httplimit.NewPolicies(httplimit.PoliciesConfig{Store: store})
	if err != nil {
		log.Fatal(err)
	}
	strict, err := pols.Policy("export")
	if err != nil {
		log.Fatal(err)
	}
	lenient, err := pols.Policy("export", httplimit.WithFallback(httplimit.Quota{Limit: 10, Window: time.Hour}))
	if err != nil {
		log.Fatal(err)
	}
	for _, pol := range []httplimit.Policy{strict, lenient} {
		cfg := httplimit.DefaultConfig()
		cfg.Routes = []string{"/export"}
		cfg.Prefix = "export"
		cfg.Store = store
		cfg.Policy = pol
		lim, err := httplimit.New(cfg)
		if err != nil {
			log.Fatal(err)
		}
		send(lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})), "GET", "/export")
	}
	// Output:
	// GET /export: 503
	// GET /export: 200 RateLimit: "export";r=9;t=3585
}
