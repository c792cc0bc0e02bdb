// Package httpbench builds Sluice's route-quota stage (package httplimit) and
// its peers, github.com/go-chi/httprate and github.com/ulule/limiter/v3, as
// net/http middleware configured alike: one quota per client address, one
// window, every limiter in memory. Its benchmarks measure each stage's
// overhead per request around the same trivial handler; its test checks that
// each one admits up to its limit and then denies.
package httpbench

import (
	"net"
	"net/http"
	"time"

	"github.com/go-chi/httprate"
	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/store/memstore"
	"github.com/ulule/limiter/v3"
	"github.com/ulule/limiter/v3/drivers/middleware/stdlib"
	"github.com/ulule/limiter/v3/drivers/store/memory"
)

// Window is every limiter's window: long enough that no benchmark crosses a
// boundary in practice.
const Window = time.Hour

// Middleware wraps a handler in a rate-limiting stage.
type Middleware func(http.Handler) http.Handler

// Stage is a named constructor of a stage admitting limit requests per
// client address and Window.
type Stage struct {
	Name string
	New  func(limit int64) (Middleware, error)
}

// Stages lists the limiters compared, Sluice first.
var Stages = []Stage{
	{"httplimit", Httplimit},
	{"httprate", Httprate},
	{"ulule", Ulule},
}

// pepper keys httplimit's hash of client addresses, as a deployment should.
const pepper = "httpbench-pepper-0123456789abcdef"

// Httplimit returns Sluice's stage over a memory store of its own (the
// store a shared deployment would replace by a server, diskstore or Redis),
// selecting every path, with a fixed, epoch-aligned window, the draft-11
// RateLimit-Policy and RateLimit fields, the client address resolved by
// package clientip (socket peer, no proxy trusted, IPv6 grouped by /64),
// and the address hashed with HMAC-SHA256 under a pepper.
func Httplimit(limit int64) (Middleware, error) {
	mcfg := memstore.DefaultConfig()
	mem, err := memstore.New(mcfg)
	if err != nil {
		return nil, err
	}
	cfg := httplimit.DefaultConfig()
	cfg.Routes = []string{"/*"}
	cfg.Prefix = "bench"
	cfg.Quota.Limit = limit
	cfg.Quota.Window = Window
	cfg.Quota.Kind = algo.KindFixed
	cfg.Store = mem
	cfg.Pepper = pepper
	lim, err := httplimit.New(cfg)
	if err != nil {
		return nil, err
	}
	return lim.Handler, nil
}

// Httprate returns go-chi/httprate's stage with its local (in-process)
// counter, keyed by the socket peer's address canonicalised as its own
// KeyByIP does (IPv6 by /64), with its default X-RateLimit-* headers.
func Httprate(limit int64) (Middleware, error) {
	return httprate.LimitBy(int(limit), Window, func(r *http.Request) (string, error) {
		ip, _, err := net.SplitHostPort(r.RemoteAddr)
		if err != nil {
			ip = r.RemoteAddr
		}
		return httprate.CanonicalizeIP(ip), nil
	}), nil
}

// Ulule returns ulule/limiter's net/http stage over its memory store, keyed
// by its default key getter (the socket peer; forwarded headers not
// trusted), with its default X-RateLimit-* headers.
func Ulule(limit int64) (Middleware, error) {
	lim := limiter.New(memory.NewStore(), limiter.Rate{Period: Window, Limit: limit})
	return stdlib.NewMiddleware(lim).Handler, nil
}

// Plain is the protected handler of every benchmark: it writes nothing, so
// the answer is an empty 200.
var Plain http.Handler = http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
