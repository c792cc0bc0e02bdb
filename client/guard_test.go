package client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/testclock"
	"github.com/sluicehq/sluice/wire"
)

// newGuard returns a guard over c failing in mode on its own clock, which
// starts with the store's.
func newGuard(t *testing.T, c *client.Client, mode client.FailMode) (*client.Guard, *testclock.Clock) {
	t.Helper()
	clock := testclock.At(start)
	cfg := client.DefaultGuardConfig()
	cfg.FailMode, cfg.Clock = mode, clock
	g, err := client.NewGuard(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return g, clock
}

// offClient returns a client that is off by configuration.
func offClient() *client.Client {
	cfg := client.DefaultConfig()
	cfg.Off = true
	return client.New(cfg)
}

func TestGuardDenialCache(t *testing.T) {
	h := newHarness(t)
	g, clock := newGuard(t, h.client(), client.FailClosed)
	w := fixed("per-second", 2, 1000)
	hit := func(partition string, cost int64, ws ...engine.Window) client.Decision {
		t.Helper()
		d, err := g.Hit(ctxT(t), partition, cost, ws...)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	for i := range 2 {
		if d := hit("alice", 1, w); !d.Allowed || d.Origin != client.OriginServer {
			t.Fatalf("hit %d: %+v, want allowed by the server", i, d)
		}
	}
	d := hit("alice", 1, w)
	if d.Allowed || d.Origin != client.OriginServer || d.RetryAfter != time.Second {
		t.Fatalf("third hit: %+v, want denied by the server until the reset", d)
	}
	if got := h.rpcs.Load(); got != 3 {
		t.Fatalf("%d RPCs, want 3", got)
	}

	// Repeats are answered from memory, counting down to the reset, for
	// any cost at least the denied one.
	clock.Advance(400 * time.Millisecond)
	for _, cost := range []int64{1, 2, 1} {
		d := hit("alice", cost, w)
		if d.Allowed || d.Origin != client.OriginCache || d.RetryAfter != 600*time.Millisecond {
			t.Fatalf("cached repeat at cost %d: %+v", cost, d)
		}
	}
	if got := h.rpcs.Load(); got != 3 {
		t.Fatalf("%d RPCs after cached denials, want still 3", got)
	}
	if g.Stats().Denials != 1 {
		t.Fatalf("stats %+v", g.Stats())
	}
	// Another partition, or other limits on the same one, ask the server.
	if d := hit("bob", 1, w); !d.Allowed || d.Origin != client.OriginServer {
		t.Fatalf("other partition: %+v", d)
	}
	if d := hit("alice", 1, fixed("per-second", 3, 1000)); !d.Allowed || d.Origin != client.OriginServer {
		t.Fatalf("other limit: %+v", d)
	}
	if got := h.rpcs.Load(); got != 5 {
		t.Fatalf("%d RPCs, want 5", got)
	}

	// At the reset the cached denial expires and the server decides again.
	clock.Advance(600 * time.Millisecond)
	h.clock.Advance(time.Second)
	if d := hit("alice", 1, w); !d.Allowed || d.Origin != client.OriginServer {
		t.Fatalf("at the reset: %+v, want allowed by the server", d)
	}
	if got := h.rpcs.Load(); got != 6 {
		t.Fatalf("%d RPCs, want 6: the expired denial must ask the server", got)
	}
}

func TestGuardFailClosed(t *testing.T) {
	h := newHarness(t)
	g, _ := newGuard(t, h.client(), client.FailClosed)
	h.down.Store(true)
	d, err := g.Hit(ctxT(t), "alice", 1, fixed("w", 5, 1000))
	if err != nil {
		t.Fatal(err)
	}
	if d.Allowed || d.Origin != client.OriginFailClosed || d.RetryAfter != 30*time.Second {
		t.Fatalf("%+v, want refused with 30 s", d)
	}
	if !errors.Is(d.Err, client.ErrUnavailable) || !errors.Is(d.Err, wire.ErrUnavailable) {
		t.Fatalf("cause %v, want ErrUnavailable wrapping the server's answer", d.Err)
	}
	rec := httptest.NewRecorder()
	d.Reject(rec)
	if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") != "30" {
		t.Fatalf("answer %d Retry-After %q, want 503 and 30", rec.Code, rec.Header().Get("Retry-After"))
	}
	if got := h.rpcs.Load(); got != 1 {
		t.Fatalf("%d RPCs, want 1: a failure is not retried", got)
	}
}

func TestGuardFailOpen(t *testing.T) {
	g, _ := newGuard(t, offClient(), client.FailOpen)
	for range 3 {
		d, err := g.Hit(ctxT(t), "alice", 1, fixed("w", 1, 1000))
		if err != nil {
			t.Fatal(err)
		}
		if !d.Allowed || d.Origin != client.OriginFailOpen || !errors.Is(d.Err, client.ErrUnavailable) {
			t.Fatalf("%+v, want allowed by the open fail mode", d)
		}
	}
	if s := g.Stats(); s.Counters != 0 || s.Denials != 0 {
		t.Fatalf("fail open keeps no state: %+v", s)
	}
}

func TestGuardDegraded(t *testing.T) {
	h := newHarness(t)
	g, clock := newGuard(t, h.client(), client.Degraded)
	w := fixed("per-second", 2, 1000)
	hit := func(ws ...engine.Window) client.Decision {
		t.Helper()
		d, err := g.Hit(ctxT(t), "alice", 1, ws...)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	// Healthy traffic spends the server's window and seeds nothing here.
	for range 2 {
		if d := hit(w); !d.Allowed || d.Origin != client.OriginServer {
			t.Fatalf("healthy: %+v", d)
		}
	}
	if g.Stats().Counters != 0 {
		t.Fatal("healthy traffic seeded the degraded counters")
	}
	// While the server is down the same window applies in memory, from zero.
	h.down.Store(true)
	clock.Advance(250 * time.Millisecond)
	for i, want := range []struct {
		allowed   bool
		remaining int64
	}{{true, 1}, {true, 0}, {false, 0}} {
		d := hit(w)
		if d.Allowed != want.allowed || d.Remaining != want.remaining || d.Origin != client.OriginDegraded || !errors.Is(d.Err, client.ErrUnavailable) {
			t.Fatalf("degraded hit %d: %+v, want %+v", i, d, want)
		}
		if !d.Allowed && d.RetryAfter != 750*time.Millisecond {
			t.Fatalf("degraded denial retry %v, want the fixed window's reset in 750ms", d.RetryAfter)
		}
	}
	if g.Stats().Denials != 0 {
		t.Fatal("a degraded denial entered the denial cache")
	}
	// The next fixed window starts afresh.
	clock.Advance(750 * time.Millisecond)
	if d := hit(w); !d.Allowed || d.Origin != client.OriginDegraded {
		t.Fatalf("next window: %+v", d)
	}
	// All or nothing across windows: a denial charges no window.
	one, five := fixed("one", 1, 60_000), fixed("five", 5, 60_000)
	if d := hit(one, five); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("first two-window hit: %+v", d)
	}
	if d := hit(one, five); d.Allowed || d.Remaining != 0 {
		t.Fatalf("second two-window hit: %+v, want denied by one", d)
	}
	for i := range 4 {
		if d := hit(five); !d.Allowed || d.Remaining != int64(3-i) {
			t.Fatalf("five alone, hit %d: %+v: the denied hit must not have charged five", i, d)
		}
	}
	if d := hit(five); d.Allowed {
		t.Fatalf("five exhausted: %+v", d)
	}
	// Back up: the server decides again (its window still holds 2 of 2).
	h.down.Store(false)
	if d := hit(w); d.Allowed || d.Origin != client.OriginServer || d.Err != nil {
		t.Fatalf("recovered: %+v, want the server's denial", d)
	}
}

func TestGuardOnOffClientUsesNoNetwork(t *testing.T) {
	g, _ := newGuard(t, offClient(), client.Degraded)
	d, err := g.Hit(ctxT(t), "alice", 1, fixed("w", 1, 1000))
	if err != nil || !d.Allowed || d.Origin != client.OriginDegraded || !strings.Contains(d.Err.Error(), "client off") {
		t.Fatalf("%+v, %v", d, err)
	}
}

func TestGuardErrorsThatAreNotUnavailability(t *testing.T) {
	h := newHarness(t)
	g, _ := newGuard(t, h.client(), client.FailOpen)
	if _, err := g.Hit(ctxT(t), "alice", 2, fixed("w", 1, 1000)); !errors.Is(err, engine.ErrInvalid) {
		t.Fatalf("cost over the limit: %v, want ErrInvalid", err)
	}
	if _, err := g.Hit(ctxT(t), "alice", 1); !errors.Is(err, engine.ErrInvalid) {
		t.Fatalf("no window: %v, want ErrInvalid", err)
	}
	if h.rpcs.Load() != 0 {
		t.Fatal("an invalid hit was sent")
	}
	if _, err := g.Hit(ctxT(t), "alice", 1, fixed("w", 5, 1000)); err != nil {
		t.Fatal(err)
	}
	d, err := g.Hit(ctxT(t), "alice", 1, engine.Window{Key: "w", Kind: algo.KindSliding, Limit: 5, WindowMs: 1000})
	if !errors.Is(err, engine.ErrWrongType) || d.Allowed {
		t.Fatalf("another kind on the same key: %+v, %v: want ErrWrongType, not the open fail mode", d, err)
	}
	if _, err := client.NewGuard(nil, client.DefaultGuardConfig()); !errors.Is(err, engine.ErrInvalid) {
		t.Fatalf("nil client: %v", err)
	}
	if _, err := client.NewGuard(h.client(), client.GuardConfig{FailMode: 9}); !errors.Is(err, engine.ErrInvalid) {
		t.Fatalf("unknown fail mode: %v", err)
	}
}

func TestGuardDegradedCountersBounded(t *testing.T) {
	g, _ := newGuard(t, offClient(), client.Degraded)
	w := fixed("w", 1, 60_000)
	hit := func(i int) client.Decision {
		d, err := g.Hit(ctxT(t), fmt.Sprint("p", i), 1, w)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	for i := range client.MaxEntries + 1 {
		if d := hit(i); !d.Allowed {
			t.Fatalf("partition %d: %+v", i, d)
		}
	}
	if got := g.Stats().Counters; got != client.MaxEntries {
		t.Fatalf("%d counters, want the bound %d", got, client.MaxEntries)
	}
	if d := hit(client.MaxEntries); d.Allowed {
		t.Fatal("the newest counter was lost")
	}
	if d := hit(0); !d.Allowed {
		t.Fatal("the oldest counter was not the one evicted")
	}
	if got := g.Stats().Counters; got != client.MaxEntries {
		t.Fatalf("%d counters, want the bound %d", got, client.MaxEntries)
	}
}

func TestGuardDenialCacheBounded(t *testing.T) {
	// Ten thousand RPCs: the real server is called in process, without
	// sockets, to keep the test fast under the race detector.
	h := newHarness(t)
	g, _ := newGuard(t, h.inProcessClient(), client.FailClosed)
	ctx := ctxT(t)
	full := fixed("full", 1, 60_000)
	if d, err := g.Hit(ctx, "p", 1, full); err != nil || !d.Allowed {
		t.Fatalf("%+v, %v", d, err)
	}
	// Each hit names the exhausted window and a fresh one: denied (charging
	// nothing), and cached under its own windows.
	deny := func(i int) client.Decision {
		d, err := g.Hit(ctx, "p", 1, full, fixed(fmt.Sprint("k", i), 1, 60_000))
		if err != nil {
			t.Error(err)
		}
		if d.Allowed {
			t.Errorf("hit %d allowed", i)
		}
		return d
	}
	// Denial 0 is cached first, so it is the oldest.
	for i := range client.MaxEntries + 1 {
		if d := deny(i); d.Origin != client.OriginServer {
			t.Fatalf("first denial %d from %v", i, d.Origin)
		}
	}
	if got := g.Stats().Denials; got != client.MaxEntries {
		t.Fatalf("%d cached denials, want the bound %d", got, client.MaxEntries)
	}
	before := h.rpcs.Load()
	if d := deny(client.MaxEntries); d.Origin != client.OriginCache {
		t.Fatalf("newest denial answered by %v, want the cache", d.Origin)
	}
	if d := deny(0); d.Origin != client.OriginServer {
		t.Fatalf("oldest denial answered by %v, want the server (evicted)", d.Origin)
	}
	if got := h.rpcs.Load() - before; got != 1 {
		t.Fatalf("%d RPCs, want 1 (for the evicted denial only)", got)
	}
}

func TestGuardLogsOutageOnce(t *testing.T) {
	h := newHarness(t)
	var logs bytes.Buffer
	cfg := client.DefaultGuardConfig()
	cfg.FailMode = client.FailOpen
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	g, err := client.NewGuard(h.client().WithFamily("proxy"), cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.down.Store(true)
	for range 3 {
		g.Hit(ctxT(t), "p", 1, fixed("w", 100, 1000))
	}
	h.down.Store(false)
	for range 2 {
		g.Hit(ctxT(t), "p", 1, fixed("w", 100, 1000))
	}
	out := logs.String()
	if strings.Count(out, "level=WARN") != 1 || strings.Count(out, "available again") != 1 || !strings.Contains(out, "family=proxy") {
		t.Fatalf("logs:\n%s\nwant one warning and one recovery notice", out)
	}
}

func TestDecisionReject(t *testing.T) {
	cases := []struct {
		d      client.Decision
		status int
		retry  string
	}{
		{client.Decision{Allowed: true}, http.StatusOK, ""},
		{client.Decision{RetryAfter: 1200 * time.Millisecond}, http.StatusTooManyRequests, "2"},
		{client.Decision{RetryAfter: 3 * time.Second, Origin: client.OriginCache}, http.StatusTooManyRequests, "3"},
		{client.Decision{RetryAfter: time.Millisecond, Origin: client.OriginDegraded}, http.StatusTooManyRequests, "1"},
		{client.Decision{Origin: client.OriginFailClosed, RetryAfter: client.FailClosedRetryAfter}, http.StatusServiceUnavailable, "30"},
	}
	for _, tc := range cases {
		rec := httptest.NewRecorder()
		tc.d.Reject(rec)
		if rec.Code != tc.status || rec.Header().Get("Retry-After") != tc.retry {
			t.Errorf("%+v: %d Retry-After %q, want %d %q", tc.d, rec.Code, rec.Header().Get("Retry-After"), tc.status, tc.retry)
		}
		if tc.status != http.StatusOK && rec.Header().Get("Content-Type") != "application/problem+json" {
			t.Errorf("%+v: content type %q", tc.d, rec.Header().Get("Content-Type"))
		}
	}
}

func TestFailModeText(t *testing.T) {
	for _, m := range []client.FailMode{client.FailClosed, client.FailOpen, client.Degraded} {
		b, err := m.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		var back client.FailMode
		if err := back.UnmarshalText(b); err != nil || back != m {
			t.Fatalf("%v round-trips to %v, %v", m, back, err)
		}
	}
	if _, err := client.ParseFailMode("Closed"); err == nil {
		t.Fatal("ParseFailMode accepted a wrong-case name")
	}
	if _, err := client.FailMode(7).MarshalText(); err == nil {
		t.Fatal("an unknown mode marshalled")
	}
	if client.FailMode(0) != client.FailClosed {
		t.Fatal("the zero fail mode must be closed")
	}
}

// TestGuardDenialCacheClockStepsBack steps the Guard's clock back after a
// denial was cached: the cached denial must not outlast the delay the
// server gave by the size of the step. It is dropped, and the server
// decides again.
func TestGuardDenialCacheClockStepsBack(t *testing.T) {
	h, clock, hit := perSecondAfterOneHit(t)
	if d := hit(); d.Allowed || d.Origin != client.OriginServer || d.RetryAfter != time.Second {
		t.Fatalf("second hit: %+v, want the server's denial for 1s", d)
	}
	clock.Advance(-time.Hour)
	d := hit()
	if d.RetryAfter > time.Second {
		t.Fatalf("after the clock stepped back an hour: %+v, retry after longer than the server's 1s", d)
	}
	if d.Allowed || d.Origin != client.OriginServer {
		t.Fatalf("after the clock stepped back: %+v, want the server's denial", d)
	}
	// The server's window resets; the Guard's clock, an hour behind, must
	// not hold the key denied meanwhile.
	h.clock.Advance(time.Second)
	clock.Advance(time.Second)
	if d := hit(); !d.Allowed || d.Origin != client.OriginServer {
		t.Fatalf("after the server's reset: %+v, want allowed by the server", d)
	}
}

// TestGuardCallerGivesUp ends the caller's context before the call and
// while it is in flight to a healthy server: the caller gave up, and the
// server is not unavailable. Hit returns the error, never an admission by
// the fail mode, charges no degraded counter and logs no outage.
func TestGuardCallerGivesUp(t *testing.T) {
	for _, mode := range []client.FailMode{client.FailOpen, client.Degraded, client.FailClosed} {
		t.Run(mode.String(), func(t *testing.T) {
			h := newHarness(t)
			var logs bytes.Buffer
			cfg := client.DefaultGuardConfig()
			cfg.FailMode = mode
			cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			g, err := client.NewGuard(h.client(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			w := fixed("w", 1, 60_000)
			check := func(what string, d client.Decision, err error) {
				t.Helper()
				if d.Allowed || !errors.Is(err, client.ErrUnavailable) || !errors.Is(err, context.Canceled) {
					t.Fatalf("%s: %+v, %v; want no decision and ErrUnavailable wrapping context.Canceled", what, d, err)
				}
			}
			ctx, cancel := context.WithCancel(ctxT(t))
			cancel()
			d, err := g.Hit(ctx, "alice", 1, w)
			check("cancelled before the call", d, err)

			seen := make(chan struct{})
			h.before = func(w http.ResponseWriter, r *http.Request) bool {
				close(seen)
				<-r.Context().Done()
				return true
			}
			ctx, cancel = context.WithCancel(ctxT(t))
			go func() { <-seen; cancel() }()
			d, err = g.Hit(ctx, "alice", 1, w)
			check("cancelled in flight", d, err)

			if n := g.Stats().Counters; n != 0 {
				t.Errorf("%d degraded counters charged by callers that gave up", n)
			}
			if logs.Len() != 0 {
				t.Errorf("logs:\n%s\nwant no outage logged", logs.String())
			}
			// The window is whole: the server answers the next caller.
			h.before = nil
			if d, err := g.Hit(ctxT(t), "alice", 1, w); err != nil || !d.Allowed || d.Origin != client.OriginServer {
				t.Fatalf("next caller: %+v, %v; want allowed by the server", d, err)
			}
		})
	}
}

// TestGuardDenialCacheCountsFromTheSend lets the Guard's clock run while
// the denying answer travels: the server's delay runs from its decision,
// which is no earlier than the send, so the cached denial ends the delay
// after the send, not after the answer arrived. At that instant, with the
// server's window reset, the next hit asks the server and is admitted.
func TestGuardDenialCacheCountsFromTheSend(t *testing.T) {
	h, clock, hit := perSecondAfterOneHit(t)
	// The denial takes 400ms to come back.
	h.before = func(http.ResponseWriter, *http.Request) bool {
		clock.Advance(400 * time.Millisecond)
		return false
	}
	if d := hit(); d.Allowed || d.Origin != client.OriginServer || d.RetryAfter != time.Second {
		t.Fatalf("second hit: %+v, want the server's denial for 1s", d)
	}
	h.before = nil
	if d := hit(); d.Allowed || d.Origin != client.OriginCache || d.RetryAfter != 600*time.Millisecond {
		t.Fatalf("repeat as the answer arrives: %+v, want cached for what is left of the 1s since the send", d)
	}
	// One second after the send, the server's window has reset.
	clock.Advance(600 * time.Millisecond)
	h.clock.Advance(time.Second)
	if d := hit(); !d.Allowed || d.Origin != client.OriginServer {
		t.Fatalf("a second after the send: %+v, want allowed by the server", d)
	}
}

// perSecondAfterOneHit returns a closed Guard's harness and clock and a
// hitter of a window of one hit per second whose first hit is made and
// admitted: the next is denied by the server.
func perSecondAfterOneHit(t *testing.T) (*harness, *testclock.Clock, func() client.Decision) {
	t.Helper()
	h := newHarness(t)
	g, clock := newGuard(t, h.client(), client.FailClosed)
	hit := hitter(t, g, fixed("per-second", 1, 1000))
	if d := hit(); !d.Allowed {
		t.Fatalf("first hit: %+v", d)
	}
	return h, clock, hit
}

// hitter returns a function making alice's hit of cost 1 on w through g,
// failing the test on an error.
func hitter(t *testing.T, g *client.Guard, w engine.Window) func() client.Decision {
	return func() client.Decision {
		t.Helper()
		d, err := g.Hit(ctxT(t), "alice", 1, w)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
}
