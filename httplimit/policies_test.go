package httplimit_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/testclock"
)

// newPolicies returns the policies of store, refreshed every refresh by
// clock.
func newPolicies(t tb, store engine.Store, clock engine.Clock, refresh time.Duration) *httplimit.Policies {
	t.Helper()
	cfg := httplimit.DefaultPoliciesConfig()
	cfg.Store, cfg.Clock, cfg.Refresh = store, clock, refresh
	pols, err := httplimit.NewPolicies(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return pols
}

// policyStage builds a stage on /login enforcing the stored policy name.
func policyStage(t tb, store engine.Store, pols *httplimit.Policies, name string, opts ...httplimit.PolicyOption) (http.Handler, *atomic.Int64, *[]error) {
	t.Helper()
	pol, err := pols.Policy(name, opts...)
	if err != nil {
		t.Fatal(err)
	}
	cfg := config(store, 0, "/login")
	cfg.Quota = httplimit.Quota{}
	cfg.Policy = pol
	var mu sync.Mutex
	errs := new([]error)
	cfg.OnError = func(w http.ResponseWriter, r *http.Request, err error) {
		mu.Lock()
		*errs = append(*errs, err)
		mu.Unlock()
		httplimit.WriteUnavailable(w, r, err)
	}
	h, ran := stage(t, cfg)
	return h, ran, errs
}

// codes sends n requests of one client to /login and returns their
// statuses.
func codes(h http.Handler, n int) []int {
	var got []int
	for range n {
		got = append(got, serve(h, http.MethodPost, "/login", "203.0.113.9:1").Code)
	}
	return got
}

func statuses(want ...int) []int { return want }

func TestPoliciesConfigValidate(t *testing.T) {
	mem, _ := newMem(t, 10)
	for name, tc := range map[string]struct {
		mutate func(*httplimit.PoliciesConfig)
		ok     bool
	}{
		"default with a store": {func(c *httplimit.PoliciesConfig) { c.Store = mem }, true},
		"zero refresh":         {func(c *httplimit.PoliciesConfig) { c.Store, c.Refresh = mem, 0 }, true},
		"no store":             {func(c *httplimit.PoliciesConfig) {}, false},
		"refresh too short":    {func(c *httplimit.PoliciesConfig) { c.Store, c.Refresh = mem, time.Millisecond }, false},
		"refresh too long":     {func(c *httplimit.PoliciesConfig) { c.Store, c.Refresh = mem, 2*time.Hour }, false},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := httplimit.DefaultPoliciesConfig()
			tc.mutate(&cfg)
			err := cfg.Validate()
			if (err == nil) != tc.ok {
				t.Fatalf("Validate() = %v, want ok %v", err, tc.ok)
			}
			if err != nil && !errors.Is(err, httplimit.ErrInvalidConfig) {
				t.Fatalf("%v does not wrap ErrInvalidConfig", err)
			}
		})
	}
}

// Set, Get, List and Delete keep the policies in the store, where another
// Policies (another process) finds them.
func TestPoliciesSetGetListDelete(t *testing.T) {
	ctx := context.Background()
	mem, clock := newMem(t, 100)
	a := newPolicies(t, mem, clock, time.Second)
	b := newPolicies(t, mem, clock, time.Second)

	login := httplimit.Quota{Limit: 5, Window: time.Minute}
	search := httplimit.Quota{Name: "search-v2", Limit: 100, Window: time.Hour, Kind: algo.KindGCRA}
	for name, q := range map[string]httplimit.Quota{"login": login, "search": search} {
		if err := a.Set(ctx, name, q); err != nil {
			t.Fatal(err)
		}
	}
	got, err := b.Get(ctx, "login")
	if err != nil {
		t.Fatal(err)
	}
	if want := (httplimit.Quota{Name: "login", Limit: 5, Window: time.Minute, Kind: algo.KindFixed}); got != want {
		t.Fatalf("Get(login) = %+v, want %+v", got, want)
	}
	if got, err := b.Get(ctx, "search"); err != nil || got != search {
		t.Fatalf("Get(search) = %+v, %v; want %+v", got, err, search)
	}
	if names, err := b.List(ctx); err != nil || !slices.Equal(names, []string{"login", "search"}) {
		t.Fatalf("List = %q, %v", names, err)
	}

	// Replacing keeps one entry in the index.
	if err := b.Set(ctx, "login", httplimit.Quota{Limit: 7, Window: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if got, _ := a.Get(ctx, "login"); got.Limit != 7 {
		t.Fatalf("after replacing, Get(login).Limit = %d, want 7", got.Limit)
	}
	if names, _ := a.List(ctx); !slices.Equal(names, []string{"login", "search"}) {
		t.Fatalf("after replacing, List = %q", names)
	}

	if err := a.Delete(ctx, "login"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Get(ctx, "login"); !errors.Is(err, httplimit.ErrNoPolicy) {
		t.Fatalf("Get of a deleted policy: %v, want ErrNoPolicy", err)
	}
	if names, _ := b.List(ctx); !slices.Equal(names, []string{"search"}) {
		t.Fatalf("after Delete, List = %q", names)
	}
	if err := a.Delete(ctx, "login"); err != nil {
		t.Fatalf("deleting a missing policy: %v", err)
	}
	if err := a.Delete(ctx, "search"); err != nil {
		t.Fatal(err)
	}
	if names, _ := b.List(ctx); len(names) != 0 {
		t.Fatalf("after deleting all, List = %q", names)
	}
}

func TestPoliciesRejectInvalidInput(t *testing.T) {
	ctx := context.Background()
	mem, clock := newMem(t, 100)
	pols := newPolicies(t, mem, clock, time.Second)
	good := httplimit.Quota{Limit: 1, Window: time.Minute}
	for name, call := range map[string]func() error{
		"empty name":        func() error { return pols.Set(ctx, "", good) },
		"slash in name":     func() error { return pols.Set(ctx, "a/b", good) },
		"dot name":          func() error { return pols.Set(ctx, ".", good) },
		"dot-dot name":      func() error { return pols.Set(ctx, "..", good) },
		"long name":         func() error { return pols.Set(ctx, strings.Repeat("n", httplimit.MaxPolicyNameLen+1), good) },
		"no limit":          func() error { return pols.Set(ctx, "p", httplimit.Quota{Window: time.Minute}) },
		"fractional window": func() error { return pols.Set(ctx, "p", httplimit.Quota{Limit: 1, Window: 1500 * time.Millisecond}) },
		"get bad name":      func() error { _, err := pols.Get(ctx, "a b"); return err },
		"policy bad name":   func() error { _, err := pols.Policy("a b"); return err },
		"bad fallback": func() error {
			_, err := pols.Policy("p", httplimit.WithFallback(httplimit.Quota{Window: time.Minute}))
			return err
		},
	} {
		if err := call(); !errors.Is(err, httplimit.ErrInvalidConfig) {
			t.Errorf("%s: %v, want ErrInvalidConfig", name, err)
		}
	}
	if names, _ := pols.List(ctx); len(names) != 0 {
		t.Fatalf("rejected policies were stored: %q", names)
	}
}

// The heart of the policy stage: a change made in the store by another
// process is enforced within the refresh interval, with no restart, and
// the counts made under the old limit carry over.
func TestPolicyStageFollowsTheStore(t *testing.T) {
	ctx := context.Background()
	mem, clock := newMem(t, 100)
	operator := newPolicies(t, mem, clock, time.Second) // another process
	if err := operator.Set(ctx, "login", httplimit.Quota{Limit: 2, Window: time.Minute}); err != nil {
		t.Fatal(err)
	}
	pols := newPolicies(t, mem, clock, 10*time.Second)
	h, ran, _ := policyStage(t, mem, pols, "login")

	if got := codes(h, 3); !slices.Equal(got, statuses(200, 200, 429)) {
		t.Fatalf("limit 2: %v", got)
	}
	rec := serve(h, http.MethodPost, "/login", "203.0.113.9:1")
	if p := rec.Header().Get(httplimit.FieldPolicy); p != `"login";q=2;w=60` {
		t.Fatalf("RateLimit-Policy %q", p)
	}

	if err := operator.Set(ctx, "login", httplimit.Quota{Limit: 4, Window: time.Minute}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(9 * time.Second)
	if got := codes(h, 1); !slices.Equal(got, statuses(429)) {
		t.Fatalf("within the refresh interval the cached limit holds: %v", got)
	}
	clock.Advance(time.Second)
	// The two requests counted under the old limit still count.
	if got := codes(h, 3); !slices.Equal(got, statuses(200, 200, 429)) {
		t.Fatalf("limit 4 after the refresh: %v", got)
	}
	rec = serve(h, http.MethodPost, "/login", "203.0.113.9:1")
	if p := rec.Header().Get(httplimit.FieldPolicy); p != `"login";q=4;w=60` {
		t.Fatalf("RateLimit-Policy after the change %q", p)
	}
	if ran.Load() != 4 {
		t.Fatalf("handler ran %d times, want 4", ran.Load())
	}
}

// A missing policy never lets the route run: 503 through OnError, with an
// error wrapping ErrNoPolicy. The answer is remembered for the refresh
// interval; once the policy appears it is enforced.
func TestMissingPolicyRefuses(t *testing.T) {
	ctx := context.Background()
	mem, clock := newMem(t, 100)
	store := &countingStore{Store: mem}
	pols := newPolicies(t, store, clock, 10*time.Second)
	h, ran, errs := policyStage(t, store, pols, "login")

	if got := codes(h, 3); !slices.Equal(got, statuses(503, 503, 503)) {
		t.Fatalf("missing policy: %v", got)
	}
	if ran.Load() != 0 || len(*errs) != 3 || !errors.Is((*errs)[0], httplimit.ErrNoPolicy) {
		t.Fatalf("handler ran %d times; errors %v", ran.Load(), *errs)
	}
	if n := store.applies.Load(); n != 1 {
		t.Fatalf("%d batches for three requests, want 1 read of the policy", n)
	}

	other := newPolicies(t, mem, clock, time.Second)
	if err := other.Set(ctx, "login", httplimit.Quota{Limit: 1, Window: time.Minute}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(10 * time.Second)
	if got := codes(h, 2); !slices.Equal(got, statuses(200, 429)) {
		t.Fatalf("after the policy appeared: %v", got)
	}
}

// A deleted policy stops being enforced, and its stage refuses, within the
// refresh interval; the Policies that deleted it refuses at once.
func TestDeletedPolicyRefuses(t *testing.T) {
	ctx := context.Background()
	mem, clock := newMem(t, 100)
	pols := newPolicies(t, mem, clock, 10*time.Second)
	if err := pols.Set(ctx, "login", httplimit.Quota{Limit: 5, Window: time.Minute}); err != nil {
		t.Fatal(err)
	}
	h, _, _ := policyStage(t, mem, pols, "login")
	if got := codes(h, 1); !slices.Equal(got, statuses(200)) {
		t.Fatalf("before Delete: %v", got)
	}
	if err := pols.Delete(ctx, "login"); err != nil {
		t.Fatal(err)
	}
	if got := codes(h, 1); !slices.Equal(got, statuses(503)) {
		t.Fatalf("after Delete: %v", got)
	}
}

// A store failure while reading the policy never lets the route run; it is
// not remembered, so the first request after the store recovers reads the
// policy again and is served.
func TestPolicyStoreFailureRefuses(t *testing.T) {
	ctx := context.Background()
	mem, clock := newMem(t, 100)
	seed := newPolicies(t, mem, clock, time.Second)
	if err := seed.Set(ctx, "login", httplimit.Quota{Limit: 5, Window: time.Minute}); err != nil {
		t.Fatal(err)
	}
	store := &switchStore{ok: mem, err: engine.ErrUnavailable}
	pols := newPolicies(t, store, clock, 10*time.Second)
	h, ran, errs := policyStage(t, store, pols, "login")
	if got := codes(h, 2); !slices.Equal(got, statuses(503, 503)) {
		t.Fatalf("store failing: %v", got)
	}
	if ran.Load() != 0 || !errors.Is((*errs)[0], engine.ErrUnavailable) {
		t.Fatalf("handler ran %d times; errors %v", ran.Load(), *errs)
	}
	store.err = nil
	if got := codes(h, 1); !slices.Equal(got, statuses(200)) {
		t.Fatalf("store recovered, clock unmoved: %v", got)
	}
}

// A stored value that is not a valid quota refuses like a missing policy.
func TestCorruptPolicyRefuses(t *testing.T) {
	mem, clock := newMem(t, 100)
	var out engine.StepResult
	err := engine.New(mem).Apply(context.Background(), httplimit.PolicyPartition, &out,
		engine.Set(httplimit.PolicyKeyPrefix+"login", `{"limit":0,"windowMs":60000}`, engine.MaxTTLMs))
	if err != nil {
		t.Fatal(err)
	}
	pols := newPolicies(t, mem, clock, time.Second)
	h, _, errs := policyStage(t, mem, pols, "login")
	if got := codes(h, 1); !slices.Equal(got, statuses(503)) {
		t.Fatalf("corrupt policy: %v", got)
	}
	if !errors.Is((*errs)[0], engine.ErrCorrupt) {
		t.Fatalf("error %v, want ErrCorrupt", (*errs)[0])
	}
}

// With a fallback, a missing or unreadable policy counts requests against
// the fallback quota instead of refusing them, and the switch to the
// fallback and back is logged once each.
func TestPolicyFallback(t *testing.T) {
	ctx := context.Background()
	mem, clock := newMem(t, 100)
	var logs bytes.Buffer
	cfg := httplimit.DefaultPoliciesConfig()
	cfg.Store, cfg.Clock, cfg.Refresh = mem, clock, 10*time.Second
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	pols, err := httplimit.NewPolicies(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h, ran, errs := policyStage(t, mem, pols, "login", httplimit.WithFallback(httplimit.Quota{Limit: 2, Window: time.Minute}))

	if got := codes(h, 3); !slices.Equal(got, statuses(200, 200, 429)) {
		t.Fatalf("missing policy, fallback of 2: %v", got)
	}
	rec := serve(h, http.MethodPost, "/login", "203.0.113.9:1")
	if p := rec.Header().Get(httplimit.FieldPolicy); p != `"login";q=2;w=60` {
		t.Fatalf("fallback RateLimit-Policy %q", p)
	}
	// The fallback is named after the policy: the stored quota, once
	// there, goes on counting the same requests.
	if err := pols.Set(ctx, "login", httplimit.Quota{Limit: 3, Window: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if got := codes(h, 2); !slices.Equal(got, statuses(200, 429)) {
		t.Fatalf("stored limit of 3 after 2 counted: %v", got)
	}
	if ran.Load() != 3 || len(*errs) != 0 {
		t.Fatalf("handler ran %d times; errors %v", ran.Load(), *errs)
	}
	if n := strings.Count(logs.String(), "level=WARN"); n != 1 {
		t.Fatalf("%d warnings, want 1:\n%s", n, logs.String())
	}
	if n := strings.Count(logs.String(), "level=INFO"); n != 1 {
		t.Fatalf("%d notices, want 1:\n%s", n, logs.String())
	}
}

// A policy written through the store with the documented layout, as an
// operator command would write it without this package, is listed and
// enforced.
func TestPolicyLayoutIsTheDocumentedOne(t *testing.T) {
	mem, clock := newMem(t, 100)
	var out engine.StepResult
	// List reads every shard of the index, whichever holds a name.
	err := engine.New(mem).Apply(context.Background(), httplimit.PolicyPartition, &out,
		engine.Set(httplimit.PolicyKeyPrefix+"login", `{"limit":1,"windowMs":60000,"kind":"fixed"}`, engine.MaxTTLMs),
		engine.Set(httplimit.PolicyIndexPrefix+"3", "a-name\nlogin", engine.MaxTTLMs))
	if err != nil {
		t.Fatal(err)
	}
	pols := newPolicies(t, mem, clock, time.Second)
	if names, err := pols.List(context.Background()); err != nil || !slices.Equal(names, []string{"a-name", "login"}) {
		t.Fatalf("List = %q, %v", names, err)
	}
	h, _, _ := policyStage(t, mem, pols, "login")
	if got := codes(h, 2); !slices.Equal(got, statuses(200, 429)) {
		t.Fatalf("hand-written policy: %v", got)
	}
}

// Against a real server: an operator process changes the policy through
// its own client, and a service process enforcing it through another
// client follows within the refresh interval. Both clients hash every
// partition and key with the fleet's pepper, so they meet on the same
// records.
func TestPolicyStageFollowsAServer(t *testing.T) {
	ctx := context.Background()
	url := startServer(t)
	clock := testclock.New(epoch)
	operator := newPolicies(t, newClient(t, url), clock, time.Second)
	if err := operator.Set(ctx, "login", httplimit.Quota{Limit: 2, Window: time.Minute}); err != nil {
		t.Fatal(err)
	}
	service := newClient(t, url)
	pols := newPolicies(t, service, clock, 10*time.Second)
	h, ran, errs := policyStage(t, service, pols, "login")
	if got := codes(h, 3); !slices.Equal(got, statuses(200, 200, 429)) {
		t.Fatalf("limit 2: %v (errors %v)", got, *errs)
	}
	if err := operator.Set(ctx, "login", httplimit.Quota{Limit: 4, Window: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if got := codes(h, 1); !slices.Equal(got, statuses(429)) {
		t.Fatalf("before the refresh: %v", got)
	}
	clock.Advance(10 * time.Second)
	if got := codes(h, 3); !slices.Equal(got, statuses(200, 200, 429)) {
		t.Fatalf("limit 4 after the refresh: %v (errors %v)", got, *errs)
	}
	if names, err := pols.List(ctx); err != nil || !slices.Equal(names, []string{"login"}) {
		t.Fatalf("List through the server = %q, %v", names, err)
	}
	if err := operator.Delete(ctx, "login"); err != nil {
		t.Fatal(err)
	}
	clock.Advance(10 * time.Second)
	if got := codes(h, 1); !slices.Equal(got, statuses(503)) {
		t.Fatalf("after Delete: %v", got)
	}
	if ran.Load() != 4 {
		t.Fatalf("handler ran %d times, want 4", ran.Load())
	}
}

// gateStore counts the reads of a policy, and holds each one's answer until
// release is closed or the reading request's context ends.
type gateStore struct {
	engine.Store
	release chan struct{}
	reads   atomic.Int64
}

func (s *gateStore) Apply(ctx context.Context, b *engine.Batch, out *engine.StepResult) error {
	if b.Partition != httplimit.PolicyPartition || b.Commands[0].Op != engine.OpGet || !strings.HasPrefix(b.Commands[0].Key, httplimit.PolicyKeyPrefix) {
		return s.Store.Apply(ctx, b, out)
	}
	s.reads.Add(1)
	err := s.Store.Apply(ctx, b, out)
	select {
	case <-s.release:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Requests arriving while a policy is being read wait for that one read:
// however many there are, the store sees one read per policy and refresh.
func TestPolicyReadsAreSingleFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem, clock := newMem(t, 100)
		if err := newPolicies(t, mem, clock, time.Second).Set(context.Background(), "login", httplimit.Quota{Limit: 100, Window: time.Minute}); err != nil {
			t.Fatal(err)
		}
		gate := &gateStore{Store: mem, release: make(chan struct{})}
		pols := newPolicies(t, gate, clock, 10*time.Second)
		h, ran, _ := policyStage(t, gate, pols, "login")

		const requests = 20
		got := make([]int, requests)
		var wg sync.WaitGroup
		for i := range requests {
			wg.Go(func() { got[i] = serve(h, http.MethodPost, "/login", "203.0.113.9:1").Code })
		}
		synctest.Wait() // every request blocked: one reading, the others waiting for it
		if n := gate.reads.Load(); n != 1 {
			t.Fatalf("%d reads in flight, want 1", n)
		}
		close(gate.release)
		wg.Wait()
		if n := gate.reads.Load(); n != 1 || ran.Load() != requests {
			t.Fatalf("%d reads, handler ran %d times; want 1 and %d (statuses %v)", n, ran.Load(), requests, got)
		}
	})
}

// A request whose context ends while it reads the policy does not hand its
// cancellation to the requests waiting for the read: one of them reads
// again, and they are served.
func TestPolicyReaderCancelled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem, clock := newMem(t, 100)
		if err := newPolicies(t, mem, clock, time.Second).Set(context.Background(), "login", httplimit.Quota{Limit: 100, Window: time.Minute}); err != nil {
			t.Fatal(err)
		}
		gate := &gateStore{Store: mem, release: make(chan struct{})}
		pols := newPolicies(t, gate, clock, 10*time.Second)
		h, ran, _ := policyStage(t, gate, pols, "login")

		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		var leader int
		wg.Go(func() {
			req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/login", nil)
			req.RemoteAddr = "203.0.113.9:1"
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			leader = rec.Code
		})
		synctest.Wait() // the leader is reading
		const followers = 5
		got := make([]int, followers)
		for i := range followers {
			wg.Go(func() { got[i] = serve(h, http.MethodPost, "/login", "203.0.113.9:1").Code })
		}
		synctest.Wait()
		cancel()
		synctest.Wait() // a follower took over the read
		if n := gate.reads.Load(); n != 2 {
			t.Fatalf("%d reads after the reader left, want 2", n)
		}
		close(gate.release)
		wg.Wait()
		if leader != http.StatusServiceUnavailable || !slices.Equal(got, statuses(200, 200, 200, 200, 200)) || ran.Load() != followers {
			t.Fatalf("cancelled reader %d, followers %v, handler ran %d times", leader, got, ran.Load())
		}
	})
}

// A policy this process writes while it is reading the policy is not
// replaced by the older answer of that read.
func TestPolicyWrittenDuringARead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		mem, clock := newMem(t, 100)
		if err := newPolicies(t, mem, clock, time.Second).Set(ctx, "login", httplimit.Quota{Limit: 1, Window: time.Minute}); err != nil {
			t.Fatal(err)
		}
		gate := &gateStore{Store: mem, release: make(chan struct{})}
		pols := newPolicies(t, gate, clock, 10*time.Second)
		h, _, _ := policyStage(t, gate, pols, "login")

		var first int
		var wg sync.WaitGroup
		wg.Go(func() { first = serve(h, http.MethodPost, "/login", "203.0.113.9:1").Code })
		synctest.Wait() // the read holds the answer "limit 1"
		if err := pols.Set(ctx, "login", httplimit.Quota{Limit: 3, Window: time.Minute}); err != nil {
			t.Fatal(err)
		}
		close(gate.release)
		wg.Wait()
		if got := append([]int{first}, codes(h, 3)...); !slices.Equal(got, statuses(200, 200, 200, 429)) {
			t.Fatalf("limit 3 written during a read of limit 1: %v", got)
		}
	})
}

// Reading a policy renews its records' lifetime once they are a day old,
// so that a policy in use never expires.
func TestPolicyRecordsAreRenewed(t *testing.T) {
	ctx := context.Background()
	mem, clock := newMem(t, 100)
	pols := newPolicies(t, mem, clock, time.Second)
	if err := pols.Set(ctx, "login", httplimit.Quota{Limit: 100, Window: time.Minute}); err != nil {
		t.Fatal(err)
	}
	ttls := func() (policy, index int64) {
		t.Helper()
		var out engine.StepResult
		eng := engine.New(mem)
		var shards []engine.Command
		for i := range httplimit.PolicyIndexShards {
			shards = append(shards, engine.TTL(httplimit.PolicyIndexPrefix+strconv.Itoa(i)))
		}
		if err := eng.Apply(ctx, httplimit.PolicyPartition, &out, shards...); err != nil {
			t.Fatal(err)
		}
		for _, r := range out.Results {
			if r.Found {
				index = r.TTLMs
			}
		}
		if err := eng.Apply(ctx, httplimit.PolicyPartition, &out, engine.TTL(httplimit.PolicyKeyPrefix+"login")); err != nil {
			t.Fatal(err)
		}
		return out.Results[0].TTLMs, index
	}
	h, _, _ := policyStage(t, mem, pols, "login")
	clock.Advance(12 * time.Hour)
	codes(h, 1)
	if p, _ := ttls(); p != engine.MaxTTLMs-12*time.Hour.Milliseconds() {
		t.Fatalf("renewed after half a day: ttl %d ms", p)
	}
	clock.Advance(13 * time.Hour)
	codes(h, 1)
	if p, i := ttls(); p != engine.MaxTTLMs || i != engine.MaxTTLMs {
		t.Fatalf("after a day, policy ttl %d ms and index ttl %d ms, want %d", p, i, engine.MaxTTLMs)
	}
}

// A fixed window changed mid-bucket counts afresh once its bucket no
// longer begins where the old one did (docs/protocol.md, "Policies
// endpoints"): in the window of the change a client makes at most the new
// limit on top of what it made under the old window, and no more. A
// window whose bucket begins where the old one did keeps the count.
func TestPolicyWindowChangeCountsAfresh(t *testing.T) {
	ctx := context.Background()
	mem, clock := newMem(t, 100)
	pols := newPolicies(t, mem, clock, time.Second)
	set := func(w time.Duration) {
		t.Helper()
		if err := pols.Set(ctx, "login", httplimit.Quota{Limit: 2, Window: w}); err != nil {
			t.Fatal(err)
		}
	}
	set(10 * time.Second)
	h, ran, _ := policyStage(t, mem, pols, "login")

	// At 5 s the 10 s bucket [0, 10s) and the minute [0, 1m) begin
	// together: the count carries over.
	clock.Advance(5 * time.Second)
	if got := codes(h, 2); !slices.Equal(got, statuses(200, 200)) {
		t.Fatalf("limit 2 per 10 s: %v", got)
	}
	set(time.Minute)
	if got := codes(h, 1); !slices.Equal(got, statuses(429)) {
		t.Fatalf("limit 2 per minute, bucket begun where the old one did: %v", got)
	}

	// Back to 10 s at 15 s: the bucket [10s, 20s) begins after the minute's,
	// so it counts afresh, and holds the limit.
	set(10 * time.Second)
	clock.Advance(10 * time.Second)
	if got := codes(h, 3); !slices.Equal(got, statuses(200, 200, 429)) {
		t.Fatalf("limit 2 per 10 s after the change: %v", got)
	}
	if ran.Load() != 4 {
		t.Fatalf("handler ran %d times, want 4", ran.Load())
	}
}

// shortStore answers the reads of the policies' partition with fewer
// results than commands, and no error, as a faulty store might.
type shortStore struct{ engine.Store }

func (s shortStore) Apply(ctx context.Context, b *engine.Batch, out *engine.StepResult) error {
	if err := s.Store.Apply(ctx, b, out); err != nil || b.Partition != httplimit.PolicyPartition {
		return err
	}
	out.Results = out.Results[:len(out.Results)-1]
	return nil
}

// A store that answers a policy's read with fewer results than it was
// asked for is corrupt, as it is to a stage's own check: the request is
// refused through OnError with ErrCorrupt, and nothing panics.
func TestPolicyShortAnswerIsCorrupt(t *testing.T) {
	ctx := context.Background()
	mem, clock := newMem(t, 100)
	if err := newPolicies(t, mem, clock, time.Second).Set(ctx, "login", httplimit.Quota{Limit: 5, Window: time.Minute}); err != nil {
		t.Fatal(err)
	}
	short := shortStore{mem}
	pols := newPolicies(t, short, clock, time.Second)
	h, ran, errs := policyStage(t, short, pols, "login")
	var got []int
	func() {
		defer func() {
			if p := recover(); p != nil {
				t.Fatalf("a short answer panicked: %v", p)
			}
		}()
		got = codes(h, 1)
	}()
	if !slices.Equal(got, statuses(503)) || ran.Load() != 0 || !errors.Is((*errs)[0], engine.ErrCorrupt) {
		t.Fatalf("short answer: %v, handler ran %d times, errors %v; want 503, none, ErrCorrupt", got, ran.Load(), *errs)
	}
	for name, call := range map[string]func() error{
		"Get":    func() error { _, err := pols.Get(ctx, "login"); return err },
		"List":   func() error { _, err := pols.List(ctx); return err },
		"Set":    func() error { return pols.Set(ctx, "login", httplimit.Quota{Limit: 5, Window: time.Minute}) },
		"Delete": func() error { return pols.Delete(ctx, "login") },
	} {
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Errorf("%s on a short answer panicked: %v", name, p)
				}
			}()
			if err := call(); !errors.Is(err, engine.ErrCorrupt) {
				t.Errorf("%s on a short answer: %v, want ErrCorrupt", name, err)
			}
		}()
	}
}

// panicStore panics on the first read of a policy, as a store with a bug
// might, and answers every other batch.
type panicStore struct {
	engine.Store
	reads atomic.Int64
}

func (s *panicStore) Apply(ctx context.Context, b *engine.Batch, out *engine.StepResult) error {
	if b.Partition == httplimit.PolicyPartition && b.Commands[0].Op == engine.OpGet && s.reads.Add(1) == 1 {
		panic("store bug")
	}
	return s.Store.Apply(ctx, b, out)
}

// A read of a policy that panics fails the request that made it, as a
// cancelled one does, and no other: the next request reads the policy
// again rather than waiting for ever for the read that never ended.
func TestPolicyReadPanicHandsTheReadOn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem, clock := newMem(t, 100)
		if err := newPolicies(t, mem, clock, time.Second).Set(context.Background(), "login", httplimit.Quota{Limit: 100, Window: time.Minute}); err != nil {
			t.Fatal(err)
		}
		store := &panicStore{Store: mem}
		pols := newPolicies(t, store, clock, 10*time.Second)
		h, ran, _ := policyStage(t, store, pols, "login")

		panicked := func() (p any) {
			defer func() { p = recover() }()
			serve(h, http.MethodPost, "/login", "203.0.113.9:1")
			return nil
		}()
		if panicked == nil {
			t.Fatal("the first read did not panic")
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := make(chan struct{})
		var code int
		go func() {
			defer close(done)
			req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/login", nil)
			req.RemoteAddr = "203.0.113.9:1"
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			code = rec.Code
		}()
		synctest.Wait()
		select {
		case <-done:
		default:
			cancel()
			<-done
			t.Fatal("after a read that panicked, the next request waited for it until its context ended")
		}
		if code != http.StatusOK || ran.Load() != 1 || store.reads.Load() != 2 {
			t.Fatalf("next request %d, handler ran %d times, %d reads; want 200, 1, 2", code, ran.Load(), store.reads.Load())
		}
	})
}

// A stored window so long that it overflows a time.Duration is corrupt,
// rather than read as whatever the overflow leaves: 2^58 ms plus a minute
// is not a minute.
func TestPolicyOverflowingWindowIsCorrupt(t *testing.T) {
	mem, clock := newMem(t, 100)
	var out engine.StepResult
	err := engine.New(mem).Apply(context.Background(), httplimit.PolicyPartition, &out,
		engine.Set(httplimit.PolicyKeyPrefix+"login", fmt.Sprintf(`{"limit":10,"windowMs":%d,"kind":"fixed"}`, int64(1)<<58+60_000), engine.MaxTTLMs))
	if err != nil {
		t.Fatal(err)
	}
	pols := newPolicies(t, mem, clock, time.Second)
	if q, err := pols.Get(context.Background(), "login"); !errors.Is(err, engine.ErrCorrupt) {
		t.Fatalf("Get: %+v, %v; want ErrCorrupt", q, err)
	}
	h, ran, errs := policyStage(t, mem, pols, "login")
	if got := codes(h, 1); !slices.Equal(got, statuses(503)) || ran.Load() != 0 || !errors.Is((*errs)[0], engine.ErrCorrupt) {
		t.Fatalf("overflowing window: %v, handler ran %d times, errors %v; want 503, none, ErrCorrupt", got, ran.Load(), *errs)
	}
}
