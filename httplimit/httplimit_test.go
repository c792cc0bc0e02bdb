package httplimit_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dchest/siphash"
	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/clientip"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/logtest"
)

// A host rotating its interface id inside one /64 draws one quota and
// occupies one key, however many addresses it uses.
func TestIPv6RotationInsideOneNetworkSharesOneQuota(t *testing.T) {
	const limit, requests = 7, 10_000
	mem, _ := newMem(t, 100)
	h, ran := stage(t, config(mem, limit, "/device/*"))

	network := netip.MustParseAddr("2001:db8:5:6::").As16()
	rng := rand.New(rand.NewPCG(1, 2))
	allowed := 0
	for range requests {
		a := network
		for i := 8; i < 16; i++ {
			a[i] = byte(rng.Uint32())
		}
		remote := netip.AddrPortFrom(netip.AddrFrom16(a), 50000).String()
		switch code := serve(h, http.MethodPost, "/device/poll", remote).Code; code {
		case http.StatusOK:
			allowed++
		case http.StatusTooManyRequests:
		default:
			t.Fatalf("request from %s answered %d", remote, code)
		}
	}
	if allowed != limit || ran.Load() != limit {
		t.Fatalf("admitted %d (handler ran %d times), want %d", allowed, ran.Load(), limit)
	}
	if n := mem.Len(); n != 1 {
		t.Fatalf("store holds %d keys, want 1", n)
	}

	// A host in the neighbouring /64 has a quota of its own.
	if code := serve(h, http.MethodPost, "/device/poll", "[2001:db8:5:7::1]:50000").Code; code != http.StatusOK {
		t.Fatalf("neighbouring network answered %d, want 200", code)
	}
}

// Unselected paths never reach the store, whatever the method; selected
// ones reach it exactly once per request.
func TestOnlySelectedPathsTouchTheStore(t *testing.T) {
	mem, _ := newMem(t, 1000)
	store := &countingStore{Store: mem}
	h, ran := stage(t, config(store, 1_000, "/x/*", "/device/start", "/api/"))

	methods := []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodOptions, http.MethodPatch}
	cases := []struct {
		path     string
		selected bool
	}{
		{"/x", true},
		{"/x/", true},
		{"/x/a", true},
		{"/x/a/b/c", true},
		{"/xs", false},
		{"/xs/a", false},
		{"/x-y", false},
		{"/X", false},
		{"/", false},
		{"/y/x", false},
		{"/device/start", true},
		{"/device/start/", false},
		{"/device/starts", false},
		{"/device", false},
		{"/device/poll", false},
		{"/api/", true},
		{"/api", false},
		{"/api/v1", false},
	}
	for _, c := range cases {
		for _, m := range methods {
			before, beforeRan := store.applies.Load(), ran.Load()
			rec := serve(h, m, c.path, "198.51.100.4:1234")
			calls := store.applies.Load() - before
			switch {
			case c.selected && calls != 1:
				t.Errorf("%s %s: %d store calls, want 1", m, c.path, calls)
			case !c.selected && calls != 0:
				t.Errorf("%s %s: %d store calls, want 0", m, c.path, calls)
			}
			if ran.Load()-beforeRan != 1 || rec.Code != http.StatusOK {
				t.Errorf("%s %s: answered %d without running the handler", m, c.path, rec.Code)
			}
			_, hasFields := rec.Result().Header[http.CanonicalHeaderKey(httplimit.FieldRateLimit)]
			if hasFields != c.selected {
				t.Errorf("%s %s: RateLimit field present = %v, want %v", m, c.path, hasFields, c.selected)
			}
		}
	}
}

// A path a router may route as a selected one is selected too: repeated
// slashes and dot segments are resolved, as path-cleaning routers resolve
// them, and the empty path is the root. The path as sent still counts, so
// that a router reading the path as sent is covered as well; a trailing
// slash stays significant.
func TestUncleanPathsAreSelected(t *testing.T) {
	mem, _ := newMem(t, 1000)
	store := &countingStore{Store: mem}
	h, _ := stage(t, config(store, 1_000, "/", "/x/*", "/device/start", "/api/"))
	cases := []struct {
		target   string
		selected bool
	}{
		{"http://example.com", true}, // the empty path
		{"/device//start", true},
		{"//device/start", true},
		{"/device/./start", true},
		{"/device/start/.", true},
		{"/device/%2E/start", true},
		{"/device/poll/../start", true},
		{"/y/../device/start", true},
		{"/y/%2e%2e/device/start", true},
		{"/device/../../device/start", true},
		{"/device/start/x/..", true},
		{"/xs/../x", true},
		{"/x//a", true},
		{"/x/a/../../../y", true}, // the path as sent is under /x
		{"/api//", true},
		{"/api/.", false}, // "/api", as net/http's ServeMux cleans it
		{"/device//start/", false},
		{"/device/start/./", false},
		{"/device/.start", false},
		{"/device/start..", false},
		{"/xs//a", false},
		{"/y/./z", false},
		{"/z/../y", false},
	}
	for _, c := range cases {
		before := store.applies.Load()
		req := httptest.NewRequest(http.MethodGet, c.target, nil)
		req.RemoteAddr = "198.51.100.4:1234"
		h.ServeHTTP(httptest.NewRecorder(), req)
		if calls := store.applies.Load() - before; calls != 0 != c.selected || calls > 1 {
			t.Errorf("%s (path %q): %d store calls, selected %v", c.target, req.URL.Path, calls, c.selected)
		}
	}
}

// Behind chi's CleanPath, which routes by the cleaned path and leaves
// URL.Path as sent, and for the empty path, which chi routes as "/" of
// itself, the protected handlers never run past the quota. chi routes by
// the escaped path when there is one (URL.RawPath), and CleanPath cleans
// that: "/a%2Fb/../device/start" reaches the handler of "/device/start",
// though its decoded path cleans to "/a/device/start".
func TestCleaningRouterCannotBypassTheQuota(t *testing.T) {
	for _, c := range []struct {
		name    string
		clean   bool
		method  string
		route   string
		targets []string
	}{
		{"CleanPath", true, http.MethodPost, "/device/start", []string{"/device/start", "/device//start", "/device/./start", "/x/../device/start", "//device/start"}},
		{"CleanPath escaped slash", true, http.MethodPost, "/device/start", []string{"/device/start", "/a%2Fb/../device/start", "/a%2fb/c%2Fd/../../device/start", "/a%2Fb/../device/start"}},
		{"root", false, http.MethodGet, "/", []string{"http://example.com/", "http://example.com", "http://example.com", "http://example.com"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			mem, _ := newMem(t, 100)
			lim, err := httplimit.New(config(mem, 2, c.route))
			if err != nil {
				t.Fatal(err)
			}
			var ran int
			r := chi.NewRouter()
			if c.clean {
				r.Use(middleware.CleanPath)
			}
			r.Use(lim.Handler)
			r.MethodFunc(c.method, c.route, func(w http.ResponseWriter, r *http.Request) { ran++ })
			for _, target := range c.targets {
				req := httptest.NewRequest(c.method, target, nil)
				req.RemoteAddr = "192.0.2.7:1"
				r.ServeHTTP(httptest.NewRecorder(), req)
			}
			if ran != 2 {
				t.Errorf("the handler ran %d times for %q, want the limit of 2", ran, c.targets)
			}
		})
	}
}

// chi's CleanPath cleans with path.Clean, which drops a final slash:
// "/device/start/" and "/device/start//" reach the handler of
// "/device/start". Listed with its trailing-slash spelling, as the
// package documentation asks behind such a router, the route is counted
// however the request spells it.
func TestCleanPathDropsTheFinalSlash(t *testing.T) {
	mem, _ := newMem(t, 100)
	lim, err := httplimit.New(config(mem, 2, "/device/start", "/device/start/"))
	if err != nil {
		t.Fatal(err)
	}
	var ran int
	r := chi.NewRouter()
	r.Use(middleware.CleanPath)
	r.Use(lim.Handler)
	r.Post("/device/start", func(w http.ResponseWriter, r *http.Request) { ran++ })
	for _, target := range []string{"/device/start/", "/device/start//", "/device/start/./", "/device//start/", "/a%2Fb/../device/start/", "/device/start"} {
		req := httptest.NewRequest(http.MethodPost, target, nil)
		req.RemoteAddr = "192.0.2.7:1"
		r.ServeHTTP(httptest.NewRecorder(), req)
	}
	if ran != 2 {
		t.Errorf("the handler ran %d times, want the limit of 2", ran)
	}
}

// "/*" selects every path.
func TestEveryPathRoute(t *testing.T) {
	mem, _ := newMem(t, 100)
	store := &countingStore{Store: mem}
	h, _ := stage(t, config(store, 100, "/*"))
	for _, p := range []string{"/", "/a", "/a/b/"} {
		serve(h, http.MethodGet, p, "192.0.2.1:1")
	}
	if n := store.applies.Load(); n != 3 {
		t.Fatalf("%d store calls, want 3", n)
	}
}

// A rejection is 429 with the JSON body, Retry-After until the window's end,
// and no call to the protected handler; a rejected request charges
// nothing, and the next window admits again.
func TestRejection(t *testing.T) {
	mem, clock := newMem(t, 100)
	h, ran := stage(t, config(mem, 2, "/login"))
	clock.Set(epoch.Add(15*time.Second + 200*time.Millisecond))
	for range 2 {
		if code := serve(h, http.MethodPost, "/login", "192.0.2.9:1").Code; code != http.StatusOK {
			t.Fatalf("allowed request answered %d", code)
		}
	}
	for range 3 {
		rec := serve(h, http.MethodPost, "/login", "192.0.2.9:1")
		if rec.Code != http.StatusTooManyRequests {
			t.Fatalf("third request answered %d, want 429", rec.Code)
		}
		var body map[string]string
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || len(body) != 1 || body["error"] != "RATE_LIMITED" {
			t.Fatalf("body %q (%v), want {\"error\":\"RATE_LIMITED\"}", rec.Body, err)
		}
		if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
			t.Fatalf("Content-Type %q", ct)
		}
		// 44.8 s to the end of the minute, rounded up.
		if ra := rec.Header().Get("Retry-After"); ra != "45" {
			t.Fatalf("Retry-After %q, want 45", ra)
		}
	}
	if ran.Load() != 2 {
		t.Fatalf("handler ran %d times, want 2", ran.Load())
	}
	clock.Set(epoch.Add(time.Minute))
	if code := serve(h, http.MethodPost, "/login", "192.0.2.9:1").Code; code != http.StatusOK {
		t.Fatalf("next window answered %d, want 200", code)
	}
}

// Retry-After is never 0: a rejection in the last millisecond of a window
// still says 1.
func TestRetryAfterAtLeastOne(t *testing.T) {
	mem, clock := newMem(t, 100)
	h, _ := stage(t, config(mem, 1, "/login"))
	clock.Set(epoch.Add(time.Minute - time.Millisecond))
	serve(h, http.MethodPost, "/login", "192.0.2.9:1")
	rec := serve(h, http.MethodPost, "/login", "192.0.2.9:1")
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "1" {
		t.Fatalf("answered %d with Retry-After %q, want 429 and 1", rec.Code, rec.Header().Get("Retry-After"))
	}
}

// A store failure or a full store never runs the protected route: the
// default answer is 503 with a problem document, and OnError receives the
// store's error to branch on.
func TestStoreFailureNeverRunsTheRoute(t *testing.T) {
	for _, cause := range []error{engine.ErrUnavailable, engine.ErrCapacity, engine.ErrClosed, errors.New("disk on fire")} {
		t.Run(cause.Error(), func(t *testing.T) {
			store := &failingStore{err: fmt.Errorf("wrapped: %w", cause)}
			h, ran := stage(t, config(store, 10, "/login"))
			rec := serve(h, http.MethodPost, "/login", "192.0.2.1:1")
			if rec.Code != http.StatusServiceUnavailable || ran.Load() != 0 {
				t.Fatalf("answered %d, handler ran %d times; want 503 and 0", rec.Code, ran.Load())
			}
			if ct := rec.Header().Get("Content-Type"); ct != "application/problem+json" {
				t.Fatalf("Content-Type %q", ct)
			}
			var problem struct {
				Status int    `json:"status"`
				Detail string `json:"detail"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &problem); err != nil || problem.Status != 503 || !strings.Contains(problem.Detail, "rate limit could not be checked") {
				t.Fatalf("body %s (%v)", rec.Body, err)
			}
			if strings.Contains(rec.Body.String(), "fire") {
				t.Fatalf("body reveals the cause: %s", rec.Body)
			}

			// A custom handler sees the cause; the route still does not run.
			cfg := config(store, 10, "/login")
			var seen error
			cfg.OnError = func(w http.ResponseWriter, r *http.Request, err error) {
				seen = err
				w.WriteHeader(http.StatusTeapot)
			}
			h, ran = stage(t, cfg)
			if code := serve(h, http.MethodPost, "/login", "192.0.2.1:1").Code; code != http.StatusTeapot || ran.Load() != 0 {
				t.Fatalf("answered %d, handler ran %d times", code, ran.Load())
			}
			if !errors.Is(seen, cause) {
				t.Fatalf("OnError got %v, want it to wrap %v", seen, cause)
			}
		})
	}
}

// At the store's cap a new client is refused (503, never an allow), while
// every client already held keeps its quota; once windows expire, the
// swept keys make room again.
func TestFullStoreRefusesNewClientsAndKeepsExistingQuotas(t *testing.T) {
	const maxKeys, limit = 4, 3
	mem, clock := newMem(t, maxKeys)
	cfg := config(mem, limit, "/login")
	var capacityErrors int
	cfg.OnError = func(w http.ResponseWriter, r *http.Request, err error) {
		if errors.Is(err, engine.ErrCapacity) {
			capacityErrors++
		}
		httplimit.WriteUnavailable(w, r, err)
	}
	h, ran := stage(t, cfg)
	client := func(i int) string { return fmt.Sprintf("192.0.2.%d:1000", i+1) }

	for i := range maxKeys {
		if code := serve(h, http.MethodPost, "/login", client(i)).Code; code != http.StatusOK {
			t.Fatalf("client %d answered %d", i, code)
		}
	}
	newcomer := "198.51.100.1:1000"
	for range 3 {
		if code := serve(h, http.MethodPost, "/login", newcomer).Code; code != http.StatusServiceUnavailable {
			t.Fatalf("new client at capacity answered %d, want 503", code)
		}
	}
	if capacityErrors != 3 {
		t.Fatalf("OnError saw %d engine.ErrCapacity, want 3", capacityErrors)
	}
	// Existing clients spend the rest of their quota, then are limited,
	// never refused for capacity.
	for i := range maxKeys {
		for n := 1; n < limit; n++ {
			if code := serve(h, http.MethodPost, "/login", client(i)).Code; code != http.StatusOK {
				t.Fatalf("client %d request %d answered %d, want 200", i, n+1, code)
			}
		}
		if code := serve(h, http.MethodPost, "/login", client(i)).Code; code != http.StatusTooManyRequests {
			t.Fatalf("client %d over its limit answered %d, want 429", i, code)
		}
	}
	if got := ran.Load(); got != maxKeys*limit {
		t.Fatalf("handler ran %d times, want %d", got, maxKeys*limit)
	}
	if mem.Len() != maxKeys {
		t.Fatalf("store holds %d keys, want %d", mem.Len(), maxKeys)
	}

	clock.Set(epoch.Add(time.Minute))
	if code := serve(h, http.MethodPost, "/login", newcomer).Code; code != http.StatusOK {
		t.Fatalf("after the windows expired the new client answered %d, want 200", code)
	}
}

// Two stages on one store, one nested in the other, count independently:
// each has its own routes, limit and prefix.
func TestStagesComposeIndependently(t *testing.T) {
	mem, _ := newMem(t, 100)
	outerCfg := config(mem, 5, "/api/*")
	outerCfg.Prefix = "api"
	innerCfg := config(mem, 2, "/api/login")
	innerCfg.Prefix = "login"
	outer, err := httplimit.New(outerCfg)
	if err != nil {
		t.Fatal(err)
	}
	inner, err := httplimit.New(innerCfg)
	if err != nil {
		t.Fatal(err)
	}
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
	h := outer.Handler(inner.Handler(ok))

	const c = "192.0.2.50:1"
	want := []struct {
		path string
		code int
	}{
		{"/api/login", 200},
		{"/api/login", 200},
		{"/api/login", 429}, // the login stage's limit of 2; the api stage counted it (3 of 5)
		{"/api/items", 200}, // 4 of 5
		{"/api/items", 200}, // 5 of 5
		{"/api/items", 429}, // the api stage's limit
		{"/health", 200},    // neither stage
	}
	for i, w := range want {
		if code := serve(h, http.MethodGet, w.path, c).Code; code != w.code {
			t.Fatalf("request %d to %s answered %d, want %d", i, w.path, code, w.code)
		}
	}
	if mem.Len() != 2 {
		t.Fatalf("store holds %d keys, want one per stage", mem.Len())
	}
}

// The store sees the stage's prefix and a hash, never the client's
// address; the same client under another prefix or pepper is another
// partition.
func TestKeysAreHashedUnderThePrefix(t *testing.T) {
	mem, _ := newMem(t, 100)
	store := &countingStore{Store: mem}
	partitionOf := func(prefix, pepper string) string {
		cfg := config(store, 10, "/login")
		cfg.Prefix, cfg.Pepper = prefix, pepper
		h, _ := stage(t, cfg)
		before := len(store.partitions())
		serve(h, http.MethodPost, "/login", "203.0.113.77:5000")
		return store.partitions()[before]
	}
	const pepper = "0123456789abcdef0123456789abcdef"
	a := partitionOf("login", "")
	b := partitionOf("login", "")
	c := partitionOf("signup", "")
	d := partitionOf("login", pepper)
	if a != b {
		t.Fatalf("one client, one stage: partitions %q and %q", a, b)
	}
	if !strings.HasPrefix(a, "login:") || !strings.HasPrefix(c, "signup:") {
		t.Fatalf("partitions %q, %q do not start with their prefix", a, c)
	}
	if strings.TrimPrefix(a, "login:") == strings.TrimPrefix(c, "signup:") || a == d {
		t.Fatalf("prefix or pepper did not change the hash: %q %q %q", a, c, d)
	}
	for _, name := range store.partitions() {
		if strings.Contains(name, "203.0.113.77") || strings.Contains(name, "203-0-113") {
			t.Fatalf("raw address reached the store: %q", name)
		}
	}
}

// Partition names are a stable function of the prefix, the pepper and the
// client's bucket: every process of a fleet, and every release, names a
// client's quota alike, so a rolling upgrade neither splits nor resets it.
// The names are pinned, and computed again here from the documented
// formula; a change to them is a breaking change of the stored layout
// (the last was decision 0074's).
func TestPartitionNamesAreStable(t *testing.T) {
	const pepper = "0123456789abcdef0123456789abcdef"
	for _, tc := range []struct{ prefix, pepper, remote, want string }{
		{"login", pepper, "203.0.113.77:5000", "login:ef8c641c4ab06ed6f9f37b28d1b04969"},
		{"login", "", "203.0.113.77:5000", "login:5244ae66deb1ae0431fc6b767b0f7390"},
		{"api", pepper, "[2001:db8:1:2:aaaa::5]:443", "api:b13666cc75e066d453618ae090621f0a"},
	} {
		if got := documentedName(tc.prefix, tc.pepper, bucketOf(t, tc.remote)); got != tc.want {
			t.Fatalf("the documented formula names %s %q, pinned %q", tc.remote, got, tc.want)
		}
		mem, _ := newMem(t, 100)
		store := &countingStore{Store: mem}
		cfg := config(store, 10, "/q")
		cfg.Prefix, cfg.Pepper = tc.prefix, tc.pepper
		h, _ := stage(t, cfg)
		for range 2 { // the second request may take another path to its name
			serve(h, http.MethodGet, "/q", tc.remote)
		}
		names := store.partitions()
		for _, i := range []int{0, len(names) / 2} {
			if names[i] != tc.want {
				t.Errorf("%s, pepper %q, %s: partition %q, want %q", tc.prefix, tc.pepper, tc.remote, names[i], tc.want)
			}
		}
	}
}

// documentedName computes a partition name as the package documents it:
//
//	prefix ":" hex(SipHash-2-4-128(k, key))
//	k = HMAC-SHA256(pepper, "sluice/httplimit/v2" 0 prefix)[:16]
//
// the 128-bit SipHash's two halves and the key's two words little-endian.
func documentedName(prefix, pepper, key string) string {
	mac := hmac.New(sha256.New, []byte(pepper))
	mac.Write([]byte("sluice/httplimit/v2\x00" + prefix))
	k := mac.Sum(nil)
	h0, h1 := siphash.Hash128(binary.LittleEndian.Uint64(k[:8]), binary.LittleEndian.Uint64(k[8:16]), []byte(key))
	return prefix + ":" + hex.EncodeToString(binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64(nil, h0), h1))
}

// bucketOf is the default key of a request from remote: its address,
// IPv6 grouped by /64.
func bucketOf(t *testing.T, remote string) string {
	t.Helper()
	r, err := clientip.New(clientip.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodGet, "/q", nil)
	req.RemoteAddr = remote
	return string(r.AppendKey(nil, req))
}

// A custom key replaces the address; it is hashed too.
func TestCustomKey(t *testing.T) {
	mem, _ := newMem(t, 100)
	store := &countingStore{Store: mem}
	cfg := config(store, 1, "/export")
	cfg.Key = func(r *http.Request) string { return r.Header.Get("X-Api-Key") }
	h, _ := stage(t, cfg)
	send := func(key, remote string) int {
		req := httptest.NewRequest(http.MethodGet, "/export", nil)
		req.RemoteAddr = remote
		req.Header.Set("X-Api-Key", key)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	if send("key-a", "192.0.2.1:1") != 200 || send("key-a", "192.0.2.2:1") != 429 || send("key-b", "192.0.2.1:1") != 200 {
		t.Fatal("the custom key did not decide the quota")
	}
	for _, name := range store.partitions() {
		if strings.Contains(name, "key-a") {
			t.Fatalf("raw key reached the store: %q", name)
		}
	}
}

// Forwarded addresses count only through a trusted proxy.
func TestTrustedProxy(t *testing.T) {
	mem, _ := newMem(t, 100)
	cfg := config(mem, 1, "/login")
	trust, err := clientip.TrustCIDRs("10.0.0.0/8")
	if err != nil {
		t.Fatal(err)
	}
	cfg.ClientIP.TrustProxy = trust
	h, _ := stage(t, cfg)
	send := func(remote, xff string) int {
		req := httptest.NewRequest(http.MethodPost, "/login", nil)
		req.RemoteAddr = remote
		req.Header.Set("X-Forwarded-For", xff)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	// Two clients behind the proxy: one quota each.
	if send("10.0.0.1:1", "192.0.2.1") != 200 || send("10.0.0.1:1", "192.0.2.2") != 200 {
		t.Fatal("clients behind the trusted proxy shared a quota")
	}
	if send("10.0.0.1:1", "192.0.2.1") != 429 {
		t.Fatal("a forwarded client escaped its quota")
	}
	// An untrusted peer cannot pick a fresh key with the header.
	if send("198.51.100.9:1", "192.0.2.77") != 200 || send("198.51.100.9:1", "192.0.2.78") != 429 {
		t.Fatal("an untrusted peer chose its key through X-Forwarded-For")
	}
}

// On a TLS listener the client is the socket peer too: requests from the
// test's client, each over a connection of its own and each naming another
// client in X-Forwarded-For, draw one quota, the loopback peer's, since no
// proxy is trusted.
func TestTLSListenerKeysByThePeer(t *testing.T) {
	const limit = 3
	mem, _ := newMem(t, 100)
	lim, err := httplimit.New(config(mem, limit, "/login"))
	if err != nil {
		t.Fatal(err)
	}
	type admitted struct {
		remote string
		tls    bool
	}
	var mu sync.Mutex
	var seen []admitted // the requests that reached the route
	h := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, admitted{r.RemoteAddr, r.TLS != nil})
		mu.Unlock()
	}))
	srv := httptest.NewTLSServer(h)
	defer srv.Close()
	transport := srv.Client().Transport.(*http.Transport).Clone()
	transport.DisableKeepAlives = true
	client := &http.Client{Transport: transport}

	for i, want := range []int{200, 200, 200, 429, 429} {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+"/login", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Forwarded-For", fmt.Sprintf("198.51.100.%d", i+1))
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("request %d answered %d, want %d", i, resp.StatusCode, want)
		}
	}

	mu.Lock()
	admittedTLS := slices.Clone(seen)
	mu.Unlock()
	if len(admittedTLS) != limit {
		t.Fatalf("%d requests reached the route, want %d", len(admittedTLS), limit)
	}
	var peer netip.Addr
	for i, a := range admittedTLS {
		ap, err := netip.ParseAddrPort(a.remote)
		if err != nil || !a.tls || !ap.Addr().IsLoopback() || i > 0 && ap.Addr() != peer {
			t.Fatalf("admitted requests %v, want TLS from one loopback address", admittedTLS)
		}
		peer = ap.Addr()
	}
	// The quota spent is the peer's: another request from the peer's
	// address is refused, and one from elsewhere admitted.
	if code := serve(h, http.MethodPost, "/login", netip.AddrPortFrom(peer, 1).String()).Code; code != http.StatusTooManyRequests {
		t.Fatalf("the peer's address answered %d, want 429", code)
	}
	if code := serve(h, http.MethodPost, "/login", "198.51.100.1:1").Code; code != http.StatusOK {
		t.Fatalf("an address named in X-Forwarded-For answered %d, want 200", code)
	}
}

// A Policy decides each request's quota; differently named quotas count
// apart, and a failing or invalid policy never runs the route.
func TestPolicy(t *testing.T) {
	mem, _ := newMem(t, 100)
	cfg := config(mem, 0, "/api/*")
	cfg.Quota = httplimit.Quota{}
	cfg.Policy = httplimit.PolicyFunc(func(r *http.Request) (httplimit.Quota, error) {
		switch r.Header.Get("X-Plan") {
		case "pro":
			return httplimit.Quota{Name: "pro", Limit: 3, Window: time.Hour}, nil
		case "free":
			return httplimit.Quota{Name: "free", Limit: 1, Window: time.Minute}, nil
		case "broken":
			return httplimit.Quota{Name: "broken", Limit: 0, Window: time.Minute}, nil
		}
		return httplimit.Quota{}, errors.New("no plan")
	})
	var errs []error
	cfg.OnError = func(w http.ResponseWriter, r *http.Request, err error) {
		errs = append(errs, err)
		httplimit.WriteUnavailable(w, r, err)
	}
	h, ran := stage(t, cfg)
	send := func(plan string) (int, string) {
		req := httptest.NewRequest(http.MethodGet, "/api/q", nil)
		req.RemoteAddr = "192.0.2.1:1"
		req.Header.Set("X-Plan", plan)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code, rec.Header().Get(httplimit.FieldPolicy)
	}
	for i, want := range []int{200, 200, 200, 429} {
		if code, policy := send("pro"); code != want || policy != `"pro";q=3;w=3600` {
			t.Fatalf("pro request %d: %d %q", i, code, policy)
		}
	}
	if code, policy := send("free"); code != 200 || policy != `"free";q=1;w=60` {
		t.Fatalf("free request: %d %q", code, policy)
	}
	before := ran.Load()
	for _, plan := range []string{"broken", "none"} {
		if code, _ := send(plan); code != http.StatusServiceUnavailable {
			t.Fatalf("plan %q answered %d, want 503", plan, code)
		}
	}
	if ran.Load() != before || len(errs) != 2 || !errors.Is(errs[0], httplimit.ErrInvalidConfig) {
		t.Fatalf("handler ran %d more times; errors %v", ran.Load()-before, errs)
	}
}

// Every kind of window runs behind the stage and reports consistent
// fields.
func TestWindowKinds(t *testing.T) {
	for _, kind := range []algo.Kind{algo.KindFixed, algo.KindSliding, algo.KindLog, algo.KindGCRA} {
		t.Run(kind.String(), func(t *testing.T) {
			mem, _ := newMem(t, 100)
			cfg := config(mem, 3, "/q")
			cfg.Quota.Kind = kind
			h, ran := stage(t, cfg)
			for range 10 {
				rec := serve(h, http.MethodGet, "/q", "192.0.2.1:1")
				if rec.Code == http.StatusTooManyRequests && rec.Header().Get("Retry-After") == "" {
					t.Fatal("rejection without Retry-After")
				}
			}
			if ran.Load() != 3 {
				t.Fatalf("admitted %d of 10, want 3", ran.Load())
			}
		})
	}
}

// The stage logs the start of a run of failures once and its end once,
// without the client's address.
func TestFailureLogging(t *testing.T) {
	var buf bytes.Buffer
	store := &switchStore{}
	mem, _ := newMem(t, 100)
	store.ok = mem
	cfg := config(store, 100, "/login")
	cfg.Logger = slog.New(slog.NewTextHandler(&buf, nil))
	h, _ := stage(t, cfg)
	store.err = engine.ErrUnavailable
	for range 5 {
		serve(h, http.MethodPost, "/login", "203.0.113.5:1")
	}
	store.err = nil
	for range 5 {
		serve(h, http.MethodPost, "/login", "203.0.113.5:1")
	}
	logs := buf.String()
	if n := strings.Count(logs, "level=WARN"); n != 1 {
		t.Fatalf("%d warnings, want 1:\n%s", n, logs)
	}
	if n := strings.Count(logs, "level=INFO"); n != 1 {
		t.Fatalf("%d notices, want 1:\n%s", n, logs)
	}
	if strings.Contains(logs, "203.0.113.5") {
		t.Fatalf("log holds the client's address:\n%s", logs)
	}
}

// switchStore fails with err while it is set, and otherwise runs ok.
type switchStore struct {
	ok  engine.Store
	err error
}

func (s *switchStore) Apply(ctx context.Context, b *engine.Batch, out *engine.StepResult) error {
	if s.err != nil {
		return s.err
	}
	return s.ok.Apply(ctx, b, out)
}

func (s *switchStore) Close() error { return nil }

// A cancelled request is not counted as a store failure in the logs, and
// does not run the route.
func TestCancelledRequest(t *testing.T) {
	var buf bytes.Buffer
	mem, _ := newMem(t, 100)
	cfg := config(mem, 10, "/login")
	cfg.Logger = slog.New(slog.NewTextHandler(&buf, nil))
	h, ran := stage(t, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/login", nil)
	req.RemoteAddr = "192.0.2.1:1"
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if ran.Load() != 0 || rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("cancelled request answered %d, ran %d", rec.Code, ran.Load())
	}
	if buf.Len() != 0 {
		t.Fatalf("cancellation logged: %s", buf.String())
	}
}

// The default store holds DefaultMaxKeys clients; the next one is refused,
// never admitted uncounted. The log window keeps every record for the
// window's full length after its request, so no record can expire during
// the test whatever the wall clock reads.
func TestDefaultStoreIsCapped(t *testing.T) {
	cfg := config(nil, 1, "/login")
	cfg.Quota.Kind = algo.KindLog
	cfg.Quota.Window = httplimit.MaxWindow
	h, ran := stage(t, cfg)
	for i := range httplimit.DefaultMaxKeys {
		remote := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), 1).String()
		if code := serve(h, http.MethodPost, "/login", remote).Code; code != http.StatusOK {
			t.Fatalf("client %d answered %d", i, code)
		}
	}
	if code := serve(h, http.MethodPost, "/login", "192.0.2.1:1").Code; code != http.StatusServiceUnavailable {
		t.Fatalf("client %d answered %d, want 503", httplimit.DefaultMaxKeys+1, code)
	}
	if ran.Load() != httplimit.DefaultMaxKeys {
		t.Fatalf("handler ran %d times", ran.Load())
	}
}

// Requests without a usable peer address share one quota rather than
// escaping it.
func TestMissingPeerSharesOneQuota(t *testing.T) {
	mem, _ := newMem(t, 100)
	h, _ := stage(t, config(mem, 1, "/login"))
	if code := serve(h, http.MethodPost, "/login", "").Code; code != http.StatusOK {
		t.Fatalf("first request without a peer answered %d", code)
	}
	if code := serve(h, http.MethodPost, "/login", "not an address").Code; code != http.StatusTooManyRequests {
		t.Fatalf("second request without a peer answered %d, want 429", code)
	}
}

// The warning about requests without a usable peer goes to the stage's
// Logger, once however many such requests come, and names the shared
// bucket, never the raw address; a ClientIP.Logger of its own takes it
// instead.
func TestMissingPeerWarnsThroughTheLogger(t *testing.T) {
	remotes := []string{"", "192.0.2.1:1", "not an address", "", "0.0.0.0:1", "[::]:1", "secret-peer-value"}
	send := func(t *testing.T, cfg httplimit.Config) {
		h, _ := stage(t, cfg)
		for _, remote := range remotes {
			serve(h, http.MethodPost, "/login", remote)
		}
	}

	t.Run("Logger", func(t *testing.T) {
		mem, _ := newMem(t, 100)
		cfg := config(mem, 100, "/login")
		logs := &logtest.Recorder{}
		cfg.Logger = slog.New(logs)
		send(t, cfg)
		recs := logs.Records()
		if len(recs) != 1 {
			t.Fatalf("%d records, want the one warning: %v", len(recs), recs)
		}
		rec := recs[0]
		if rec.Level != slog.LevelWarn || !strings.HasPrefix(rec.Message, "clientip: ") {
			t.Fatalf("logged %v %q, want the clientip warning", rec.Level, rec.Message)
		}
		attrs := map[string]string{}
		rec.Attrs(func(a slog.Attr) bool {
			attrs[a.Key] = a.Value.String()
			return true
		})
		if len(attrs) != 1 || attrs["bucket"] != clientip.Unknown {
			t.Fatalf("attributes %v, want bucket=%s alone", attrs, clientip.Unknown)
		}
		if strings.Contains(rec.Message, "secret-peer-value") {
			t.Fatalf("the warning logs a raw address: %q", rec.Message)
		}
	})

	t.Run("ClientIP.Logger", func(t *testing.T) {
		mem, _ := newMem(t, 100)
		cfg := config(mem, 100, "/login")
		stageLogs, ipLogs := &logtest.Recorder{}, &logtest.Recorder{}
		cfg.Logger = slog.New(stageLogs)
		cfg.ClientIP.Logger = slog.New(ipLogs)
		send(t, cfg)
		if n, m := len(ipLogs.Records()), len(stageLogs.Records()); n != 1 || m != 0 {
			t.Fatalf("%d records through ClientIP.Logger and %d through Logger, want 1 and 0", n, m)
		}
	})
}

// validatingStore fails every batch that Batch.Validate rejects, as
// Engine.Apply would have refused to send it.
type validatingStore struct{ engine.Store }

func (s validatingStore) Apply(ctx context.Context, b *engine.Batch, out *engine.StepResult) error {
	if err := b.Validate(); err != nil {
		return fmt.Errorf("the stage sent an invalid batch: %w", err)
	}
	return s.Store.Apply(ctx, b, out)
}

// The stage hands its batches to the store directly, without Engine.Apply's
// validation of every request: they must be valid by construction, for the
// longest prefix and quota name, every kind of window, and any key.
func TestCompiledBatchesAreValid(t *testing.T) {
	longPrefix := strings.Repeat("é", httplimit.MaxPrefixLen/2) // 256 bytes
	longName := strings.Repeat(`"`, httplimit.MaxQuotaNameLen)
	for _, kind := range []algo.Kind{algo.KindFixed, algo.KindSliding, algo.KindLog, algo.KindGCRA} {
		for _, prefix := range []string{"p", longPrefix} {
			mem, _ := newMem(t, 100)
			cfg := config(validatingStore{mem}, 3, "/*")
			cfg.Prefix = prefix
			cfg.Quota.Name, cfg.Quota.Kind = longName, kind
			var failure error
			cfg.OnError = func(w http.ResponseWriter, r *http.Request, err error) { failure = err }
			h, _ := stage(t, cfg)
			for _, remote := range []string{"192.0.2.1:1", "[2001:db8::1]:1", ""} {
				serve(h, http.MethodGet, "/", remote)
			}
			keyed := cfg
			keyed.Key = func(r *http.Request) string { return strings.Repeat("\xff", 10_000) }
			h, _ = stage(t, keyed)
			serve(h, http.MethodGet, "/", "192.0.2.1:1")
			if failure != nil {
				t.Fatalf("kind %v, prefix of %d bytes: %v", kind, len(prefix), failure)
			}
		}
	}
}
