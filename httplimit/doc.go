/*
Package httplimit protects HTTP routes with a per-client quota: a middleware
stage, func(http.Handler) http.Handler, that counts each request to the
routes it selects against its client's allowance in a shared store, and
answers 429 Too Many Requests once the allowance is spent.

	cfg := httplimit.DefaultConfig()
	cfg.Routes = []string{"/device/start", "/device/poll"}
	cfg.Prefix = "device-flow"
	cfg.Quota.Limit = 10 // per client per epoch-aligned minute
	cfg.Store = store    // shared by every instance; nil: this process alone
	lim, err := httplimit.New(cfg)
	if err != nil {
		return err
	}
	mux.Handle("/", lim.Handler(app))

[Limiter.Handler] has the type every Go router takes as middleware:
net/http handlers wrap it directly, chi takes it in Use and With, echo
through echo.WrapMiddleware, and gin through a few lines of adapter (see
examples/gin in the repository). Install logging, CORS and the like before
the stage so that they see its rejections too.

# Routes

[Config.Routes] selects the paths a stage limits. "/login" selects that
path for every method; "/device/*" selects "/device" and everything under
it, and never "/devices". A request is matched by its decoded URL.Path,
and by that path as net/http's ServeMux cleans it, the path a router that
cleans paths routes it by: "//login", "/x/../login" and "/login/." count
as "/login", and the empty path as "/". A request sent with escapes is
matched by its escaped path (URL.RawPath) cleaned, then decoded, too, the
path chi's CleanPath (and gin's RemoveExtraSlash with UseRawPath) routes
it by: "/a%2Fb/../login" counts as "/login". A trailing slash stays
significant: "/login/" is another path. A router that drops it routes
"/login/" to the handler of "/login" (chi's CleanPath, which cleans with
path.Clean, and chi's StripSlashes, both leaving URL.Path as sent): behind
one, list "/login/" too. A request to any other path
passes straight through and costs no store I/O. All selected paths share
one quota per client: protect two routes with separate quotas by
installing two stages.

Routes are full request paths, wherever the stage is installed: in a
sub-router, route group or mount ("/api"), list "/api/login", not the
pattern relative to it. net/http's StripPrefix is the exception: it
rewrites URL.Path, so a stage it wraps sees, and must list, the path it
leaves ("/login" inside StripPrefix("/api", ...)). A stage attached to one route only (chi's With, a
route's own middleware in echo or gin) is best given "/*": it then counts
whatever the router serves through that route, "/login/" that chi's
StripSlashes routes there included.

Stages compose independently. Each has its own routes, quota and
[Config.Prefix], the namespace of its counters in the store; stages
sharing a store must have different prefixes, and every instance of one
stage (every replica of the service) the same one.

# Clients

By default a request's client is its address, resolved by package
clientip: the socket peer, or the X-Forwarded-For hop the trusted proxies
of [Config.ClientIP] vouch for; IPv6 clients grouped by /64, so that a host
rotating through its network's addresses draws one quota. Requests with no
usable peer (missing, unparsable, or unspecified: 0.0.0.0, ::) share the
clientip.Unknown bucket. [Config.Key] replaces the
address with any identity (an API key, a user id), used verbatim.

Keys never reach the store raw, whatever the store. A partition is the
prefix, a colon and the hex of a 128-bit SipHash-2-4 of the key, keyed
with 128 bits derived from [Config.Pepper] and the prefix (HMAC-SHA256,
once, in [New]), computed in the stage before any store sees the request.
Set a pepper wherever the store outlives the process or others can read it
(the embedded store, Redis): an unkeyed hash of an IPv4 address is reversed
by trying them all. Through the client package the name is hashed once
more, with the fleet's pepper, before it leaves the process, so a Sluice
server never sees even the stage's hash. The names depend on nothing but
the prefix, the pepper and the key: every process of a fleet names a
client's quota alike. A release that changes them says so; the quotas then
count afresh once, when the fleet moves to it (the last change: decision
0074).

# Quotas

A [Quota] admits Limit requests per Window for each client. The default
window is fixed and epoch-aligned: every client's one-minute window ends at
the top of a minute, and up to twice the limit can pass in the moments
around a boundary; the sliding, log and gcra kinds of package algo smooth
that burst. The store's clock is the only clock: windows and every delay
the stage reports come from it, never from the caller's clock, so a fleet
of instances needs no clock synchronisation.

A [Policy] chooses each request's quota instead of [Config.Quota], for
limits that depend on the request or live outside the code.

# Limits configured in the store

[Policies] keeps named quotas in a store, so that operators change route
limits without a deploy. [Policies.Set] writes one; a stage whose
[Config.Policy] is [Policies.Policy] enforces it, and enforces a change
within [PoliciesConfig.Refresh] (10 s by default) in every process sharing
the store, with no restart:

	pols, err := httplimit.NewPolicies(httplimit.PoliciesConfig{Store: store})
	login, err := pols.Policy("login")
	cfg.Policy = login

	pols.Set(ctx, "login", httplimit.Quota{Limit: 5, Window: time.Minute}) // from anywhere

The routes stay in the code, beside the handlers they protect; the limits
move to the store. A stage reads its policy on the first request after the
previous read expired, one read at a time: nothing runs while no request
comes. A missing policy, or one that cannot be read, never lets the route
run: the request goes to [Config.OnError] (503 by default), unless the
policy has a fallback quota ([WithFallback]). The records live in the
partition [PolicyPartition], under the keys [PolicyKeyPrefix] and
[PolicyIndexPrefix] describe; over a Sluice server they are written and read
through the client package like any other record.

Over a Sluice server, operators configure policies as they configure
paced-call limiters: in the "routes" section of a limits file, applied with
"sluice limits apply", or through the server's /v1/policies endpoints
(client.Policies), which write these records through the fleet's pepper
(see docs/operations.md, "Route quota policies").

# Answers

An allowed request runs the protected handler. A rejected one is answered
429 with the JSON body {"error":"RATE_LIMITED"} and Retry-After: the
seconds, rounded up and at least 1, until the same request would be
admitted; for a fixed window, the window's end. Both carry the
RateLimit-Policy and RateLimit fields of
draft-ietf-httpapi-ratelimit-headers-11 ([HeadersIETF]) and, if asked for,
the X-RateLimit-* dialect ([HeadersX]).

A request whose quota could not be checked never runs the protected
handler: the store failed or timed out, refused a new key because it is
full (engine.ErrCapacity), or the Policy failed. [Config.OnError] answers
it, 503 with a problem document by default ([WriteUnavailable]). A full
store thus refuses new clients while every client it already holds keeps
its quota; it never admits a request it could not count.

# Metrics

With [Config.Registerer] set, a stage counts the requests on its routes in
the Prometheus counter sluice_httplimit_requests_total, labelled by the
stage's prefix and the outcome: allowed (the handler ran), limited
(answered 429) or error (answered by OnError). Stages sharing a registry
share the counter, each under its prefix; no label carries a client's key
or address. Counting costs an atomic addition per request.

# Stores

Any engine.Store will do. The default, when [Config.Store] is nil, is a
memory store of the Limiter's own: capped at [DefaultMaxKeys] keys (one per
client and quota), refusing new keys at the cap without evicting a live
quota, removing expired keys lazily in batches of at most 32
(memstore.SweepBatch), with no timers to stop. It is right for one process, tests and development; separate
processes, and separate Limiters, count separately. A fleet shares a
Sluice server (the client package is a store), Redis, or the embedded
store behind one server.

Every engine.Store applies a batch as one atomic step, with no other batch
on the partition interleaved; atomicity is part of the Store contract, not
a feature some stores lack. A stage reads and charges a client's quota in
one batch, one Apply per request, never a read followed by a
compare-and-set: requests that race are never retried, so there is no
retry budget to set and no conservative 429 when retries run out, and each
request is admitted or rejected by the count it saw. A store that fails
sends the request to [Config.OnError], 503 by default, and never to the
route. No store is refused at construction for want of a compare-and-set:
every engine.Store is atomic.
*/
package httplimit
