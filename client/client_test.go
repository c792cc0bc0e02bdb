package client_test

import (
	"bytes"
	"context"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/server"
	"github.com/sluicehq/sluice/wire"
)

func TestHitAllowedThenDenied(t *testing.T) {
	h := newHarness(t)
	eng := engine.New(h.client())
	w := fixed("per-second", 2, 1000)
	steps := []struct {
		allowed   bool
		remaining int64
		retry     int64
	}{{true, 1, 0}, {true, 0, 0}, {false, 0, 1000}}
	var out engine.StepResult
	for i, want := range steps {
		if err := eng.Apply(ctxT(t), "user:alice", &out, engine.Hit(1, w)); err != nil {
			t.Fatalf("hit %d: %v", i, err)
		}
		r := out.Results[0]
		if r.Allowed != want.allowed || r.Remaining != want.remaining || r.RetryAfterMs != want.retry || out.Denied == want.allowed {
			t.Fatalf("hit %d: allowed %v remaining %d retry %d denied %v; want %+v", i, r.Allowed, r.Remaining, r.RetryAfterMs, out.Denied, want)
		}
	}
	if got := h.rpcs.Load(); got != 3 {
		t.Fatalf("%d RPCs for 3 hits, want one each", got)
	}
}

func TestReplaySafeRequestThroughEngine(t *testing.T) {
	h := newHarness(t)
	eng := engine.New(h.client())
	id := engine.NewOperationID()
	req := &engine.Request{OperationID: id, Steps: []engine.Step{
		{Partition: "acct:42", Commands: []engine.Command{engine.Incr("attempts", 1, 60_000)}},
		{Partition: "acct:43", Commands: []engine.Command{engine.Incr("attempts", 5, 60_000)}},
	}}
	first, err := eng.Do(ctxT(t), req)
	if err != nil {
		t.Fatal(err)
	}
	if first.Steps[0].Results[0].Int != 1 || first.Steps[1].Results[0].Int != 5 || first.Steps[0].Replayed {
		t.Fatalf("first run: %+v", first.Steps)
	}
	// The caller retries after an unknown outcome with the same id.
	again, err := eng.Do(ctxT(t), req)
	if err != nil {
		t.Fatal(err)
	}
	for i, st := range again.Steps {
		if !st.Replayed || st.Results[0].Int != first.Steps[i].Results[0].Int {
			t.Fatalf("retry step %d: %+v, want the recorded result replayed", i, st)
		}
	}
	var out engine.StepResult
	if err := eng.Apply(ctxT(t), "acct:42", &out, engine.Get("attempts")); err != nil {
		t.Fatal(err)
	}
	if out.Results[0].Value != "1" {
		t.Fatalf("counter %q after a replayed retry, want 1 (charged once)", out.Results[0].Value)
	}
	// The same id with other commands is a conflict, as on a local store.
	req.Steps[0].Commands[0].Delta = 2
	if _, err := eng.Do(ctxT(t), req); !errors.Is(err, engine.ErrOperationConflict) || errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("reused id with other commands: %v, want ErrOperationConflict", err)
	}
	if !errors.Is(func() error { _, err := eng.Do(ctxT(t), req); return err }(), wire.ErrConflict) {
		t.Fatal("conflict does not wrap the server's *wire.Error")
	}
}

func TestAnswerMatchesLocalStore(t *testing.T) {
	h := newHarness(t)
	eng := engine.New(h.client())
	// A sequential request skips the steps after a denial, over the wire too.
	req := &engine.Request{Steps: []engine.Step{
		{Partition: "p", Commands: []engine.Command{engine.SetIf("k", "v", 10_000, engine.SetXX)}},
		{Partition: "q", Commands: []engine.Command{engine.Set("k", "v", 10_000)}},
	}}
	resp, err := eng.Do(ctxT(t), req)
	if err != nil {
		t.Fatal(err)
	}
	if !resp.Steps[0].Denied || !resp.Steps[1].Skipped {
		t.Fatalf("steps %+v: want a denial then a skipped step", resp.Steps)
	}
}

func TestRawIdentifiersNeverLeave(t *testing.T) {
	h := newHarness(t)
	c := h.client()
	raw := []string{
		"alice@example.com", "203.0.113.9", "user-42",
		"win-alice", "kv-alice", "budget-src-alice", "budget-dst-alice", "receipt-alice", "gate-alice", "pace-alice",
	}
	view := c.WithFamily("password").WithFairness("203.0.113.9", "user-42")
	pace := engine.Pace{Key: "pace-alice", Limit: 10, WindowMs: 1000}
	req := &engine.Request{Mode: engine.All, Steps: []engine.Step{
		{Partition: "alice@example.com", Commands: []engine.Command{
			engine.Hit(1, fixed("win-alice", 5, 1000)),
			engine.Set("kv-alice", "some data", 10_000),
			engine.Incr("kv-alice-n", 1, 10_000),
			engine.Reserve("receipt-alice", 1,
				engine.Budget{Key: "budget-src-alice", Limit: 5, WindowMs: 60_000},
				engine.Budget{Key: "budget-dst-alice", Limit: 5, WindowMs: 60_000, Refundable: true}),
			engine.Acquire("gate-alice", "lease-1", 2, 10_000),
			pace.Take(1, 0),
		}},
		{Partition: "alice@example.com", Commands: []engine.Command{
			engine.Refund("receipt-alice"),
			engine.Release("gate-alice", "lease-1"),
			engine.Get("kv-alice"),
		}},
	}}
	resp, err := engine.New(view).Do(ctxT(t), req)
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Steps[1].Results; !got[0].Found || !got[1].Found || got[2].Value != "some data" {
		t.Fatalf("keys do not hash consistently across commands and steps: %+v", got)
	}

	hexHash := regexp.MustCompile(`^[0-9a-f]{64}$`)
	names := h.store.recorded()
	if len(names) == 0 {
		t.Fatal("nothing reached the store")
	}
	for _, n := range names {
		if !hexHash.MatchString(n) {
			t.Errorf("store saw %q, not a hash", n)
		}
	}
	seen := strings.Join(names, " ")
	for _, want := range []string{
		c.Hash(client.PurposePartition, "alice@example.com"),
		c.Hash(client.PurposeKey, "win-alice"),
		c.Hash(client.PurposeKey, "receipt-alice"),
		c.Hash(client.PurposeKey, "budget-dst-alice"),
		c.Hash(client.PurposeKey, "pace-alice"),
	} {
		if !strings.Contains(seen, want) {
			t.Errorf("store never saw hash %s", want)
		}
	}
	bodies := h.sent()
	for _, body := range bodies {
		for _, r := range raw {
			if bytes.Contains(body, []byte(r)) {
				t.Errorf("raw %q left the process in %s", r, body)
			}
		}
		for _, want := range []string{
			`"source":"` + c.Hash(client.PurposeSource, "203.0.113.9") + `"`,
			`"principal":"` + c.Hash(client.PurposePrincipal, "user-42") + `"`,
			`"family":"password"`,
			`"lease":"lease-1"`, // data travels as it is
		} {
			if !bytes.Contains(body, []byte(want)) {
				t.Errorf("body lacks %s: %s", want, body)
			}
		}
	}
}

func TestHashIsPurposeSeparatedAndKeyed(t *testing.T) {
	h := newHarness(t)
	c := h.client()
	if c.Hash(client.PurposeKey, "x") == c.Hash(client.PurposePartition, "x") {
		t.Fatal("equal hashes for two purposes")
	}
	other := h.config()
	other.Pepper = strings.Repeat("p", 40)
	if client.New(other).Hash(client.PurposeKey, "x") == c.Hash(client.PurposeKey, "x") {
		t.Fatal("the pepper does not key the hash")
	}
	if got := c.Hash(client.PurposeKey, "x"); got != c.Hash(client.PurposeKey, "x") || len(got) != 64 || strings.Trim(got, "0123456789abcdef") != "" {
		t.Fatalf("hash %q is not a stable 64-digit hex string", got)
	}
	// A pepper in the compact form names by 22 base64url characters, and
	// its prefix keys the hash like the rest of it.
	compact := h.config()
	compact.Pepper = client.CompactPrefix + testPepper
	cc := client.New(compact)
	defer cc.Close()
	if got := cc.Hash(client.PurposeKey, "x"); got != cc.Hash(client.PurposeKey, "x") || len(got) != 22 ||
		strings.Trim(got, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_") != "" {
		t.Fatalf("hash %q under a compact pepper is not a stable 22-character base64url string", got)
	}
	if p := client.NewPepper(); !strings.HasPrefix(p, client.CompactPrefix) || len(p) < wire.MinSecretLen {
		t.Fatalf("NewPepper = %q, want a pepper in the compact form", p)
	}
}

func TestBoundsRejectedBeforeSending(t *testing.T) {
	h := newHarness(t)
	c := h.client()
	hit := engine.Hit(1, fixed("w", 5, 1000))
	steps := func(n, per int) []engine.Step {
		s := make([]engine.Step, n)
		for i := range s {
			s[i].Partition = "p"
			for range per {
				s[i].Commands = append(s[i].Commands, hit)
			}
		}
		return s
	}
	big := strings.Repeat("x", engine.MaxValueBytes)
	var bigSteps []engine.Step // 16 values of 2 KiB: within every count, over the body bound
	for range 2 {
		var cmds []engine.Command
		for k := range 8 {
			cmds = append(cmds, engine.Set(string(rune('a'+k)), big, 10_000))
		}
		bigSteps = append(bigSteps, engine.Step{Partition: "p", Commands: cmds})
	}
	cases := map[string]*engine.Request{
		"17 steps":            {Steps: steps(17, 1)},
		"9 commands":          {Steps: steps(1, 9)},
		"33 commands":         {Steps: append(steps(4, 8), steps(1, 1)...)},
		"5 windows":           {Steps: []engine.Step{{Partition: "p", Commands: []engine.Command{engine.Hit(1, fixed("a", 1, 1), fixed("b", 1, 1), fixed("c", 1, 1), fixed("d", 1, 1), fixed("e", 1, 1))}}}},
		"2049-byte value":     {Steps: []engine.Step{{Partition: "p", Commands: []engine.Command{engine.Set("k", big+"x", 10_000)}}}},
		"ttl 0":               {Steps: []engine.Step{{Partition: "p", Commands: []engine.Command{engine.Set("k", "v", 0)}}}},
		"ttl 120 d + 1 s":     {Steps: []engine.Step{{Partition: "p", Commands: []engine.Command{engine.Set("k", "v", engine.MaxTTLMs+1000)}}}},
		"zero limit":          {Steps: []engine.Step{{Partition: "p", Commands: []engine.Command{engine.Hit(1, fixed("w", 0, 1000))}}}},
		"cost over limit":     {Steps: []engine.Step{{Partition: "p", Commands: []engine.Command{engine.Hit(6, fixed("w", 5, 1000))}}}},
		"overflowing cost":    {Steps: []engine.Step{{Partition: "p", Commands: []engine.Command{engine.Hit(math.MaxInt64, fixed("w", 5, 1000))}}}},
		"empty partition":     {Steps: []engine.Step{{Partition: "", Commands: []engine.Command{hit}}}},
		"513-byte key":        {Steps: []engine.Step{{Partition: "p", Commands: []engine.Command{engine.Get(strings.Repeat("k", 513))}}}},
		"body over 16 KiB":    {Steps: bigSteps},
		"no steps":            {},
		"unknown mode":        {Mode: "parallel", Steps: steps(1, 1)},
		"long operation id":   {OperationID: strings.Repeat("i", 129), Steps: steps(1, 1)},
		"stray field":         {Steps: []engine.Step{{Partition: "p", Commands: []engine.Command{{Op: engine.OpGet, Key: "k", Value: "v"}}}}},
		"unknown op":          {Steps: []engine.Step{{Partition: "p", Commands: []engine.Command{{Op: "kv.drop", Key: "k"}}}}},
		"duplicate window":    {Steps: []engine.Step{{Partition: "p", Commands: []engine.Command{engine.Hit(1, fixed("a", 1, 1), fixed("a", 1, 1))}}}},
		"reserved partition":  {Steps: []engine.Step{{Partition: "\x00control", Commands: []engine.Command{engine.Get("stop")}}}},
		"receipt w/o refunds": {Steps: []engine.Step{{Partition: "p", Commands: []engine.Command{engine.Reserve("r", 1, engine.Budget{Key: "b", Limit: 1, WindowMs: 1000})}}}},
	}
	for name, req := range cases {
		t.Run(name, func(t *testing.T) {
			if _, err := c.Do(ctxT(t), req); !errors.Is(err, engine.ErrInvalid) {
				t.Fatalf("Do: %v, want ErrInvalid", err)
			}
			if _, err := engine.New(c).Do(ctxT(t), req); !errors.Is(err, engine.ErrInvalid) {
				t.Fatalf("engine Do: %v, want ErrInvalid", err)
			}
		})
	}
	// At the bounds everything is sent.
	at := []*engine.Request{
		{Steps: steps(16, 2)},
		{Steps: steps(4, 8)},
		{Steps: []engine.Step{{Partition: "p", Commands: []engine.Command{engine.Set("k", big, engine.MaxTTLMs)}}}},
	}
	for i, req := range at {
		if _, err := c.Do(ctxT(t), req); err != nil {
			t.Fatalf("request %d at the bounds: %v", i, err)
		}
	}
	if got := h.rpcs.Load(); got != int64(len(at)) {
		t.Fatalf("the server saw %d requests, want %d: out-of-bounds requests must send nothing", got, len(at))
	}
}

func TestInvalidFamilyViewSendsNothing(t *testing.T) {
	h := newHarness(t)
	c := h.client()
	for _, fam := range []string{"", strings.Repeat("f", 65), "no spaces", "ünï"} {
		_, err := c.WithFamily(fam).Do(ctxT(t), &engine.Request{Steps: []engine.Step{{Partition: "p", Commands: []engine.Command{engine.Get("k")}}}})
		if !errors.Is(err, engine.ErrInvalid) {
			t.Fatalf("family %q: %v, want ErrInvalid", fam, err)
		}
	}
	if h.rpcs.Load() != 0 {
		t.Fatal("an invalid family view sent a request")
	}
	if got := c.WithFamily("proxy").WithFairness("::1", "").Family(); got != "proxy" {
		t.Fatalf("family %q after WithFairness, want proxy", got)
	}
	if c.Family() != client.DefaultFamily {
		t.Fatalf("WithFamily changed the parent: %q", c.Family())
	}
}

func TestNoRetries(t *testing.T) {
	cases := map[string]func(w http.ResponseWriter, r *http.Request){
		"503": func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusServiceUnavailable)
		},
		"connection dropped": func(w http.ResponseWriter, r *http.Request) {
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.Close()
			}
		},
		"401": func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusUnauthorized)
		},
	}
	for name, fail := range cases {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t)
			h.before = func(w http.ResponseWriter, r *http.Request) bool { fail(w, r); return true }
			c := h.client()
			var out engine.StepResult
			err := engine.New(c).Apply(ctxT(t), "p", &out, engine.Incr("n", 1, 10_000))
			if !errors.Is(err, client.ErrUnavailable) {
				t.Fatalf("%v, want ErrUnavailable", err)
			}
			if got := h.rpcs.Load(); got != 1 {
				t.Fatalf("the server saw %d requests, want exactly 1", got)
			}
		})
	}
}

func TestTimeoutOnBlockingServer(t *testing.T) {
	h := newHarness(t)
	release := make(chan struct{})
	seen := make(chan struct{}, 1)
	h.before = func(w http.ResponseWriter, r *http.Request) bool {
		seen <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
		}
		return true
	}
	t.Cleanup(func() { close(release) })
	cfg := h.config()
	cfg.Timeout = client.MinTimeout
	c := client.New(cfg)
	defer c.Close()
	_, err := c.Do(context.Background(), &engine.Request{Steps: []engine.Step{{Partition: "p", Commands: []engine.Command{engine.Get("k")}}}})
	if !errors.Is(err, client.ErrUnavailable) || !errors.Is(err, engine.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%v, want ErrUnavailable wrapping context.DeadlineExceeded", err)
	}
	select {
	case <-seen:
	default:
		t.Fatal("the server never saw the request")
	}
	if got := h.rpcs.Load(); got != 1 {
		t.Fatalf("the server saw %d requests, want 1", got)
	}
}

func TestCallerCancellationIsUnavailable(t *testing.T) {
	h := newHarness(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := h.client().Do(ctx, &engine.Request{Steps: []engine.Step{{Partition: "p", Commands: []engine.Command{engine.Get("k")}}}})
	if !errors.Is(err, client.ErrUnavailable) || !errors.Is(err, context.Canceled) {
		t.Fatalf("%v, want ErrUnavailable wrapping context.Canceled", err)
	}
	if h.rpcs.Load() != 0 {
		t.Fatal("a cancelled call was sent")
	}
}

func TestStatusMapping(t *testing.T) {
	problem := func(code wire.Code) string {
		return `{"type":"about:blank","title":"x","status":0,"code":"` + string(code) + `","reason":"because"}`
	}
	const pj = "application/problem+json"
	cases := []struct {
		name        string
		status      int
		ctype, body string
		want        error
		wire        error // the *wire.Error wrapped, if any
	}{
		{"400 invalid", 400, pj, problem(wire.CodeInvalid), engine.ErrInvalid, wire.ErrInvalid},
		{"400 wrong_type", 400, pj, problem(wire.CodeWrongType), engine.ErrWrongType, nil},
		{"400 overflow", 400, pj, problem(wire.CodeOverflow), engine.ErrOverflow, nil},
		{"400 not a problem", 400, "text/html", "<h1>Bad Request</h1>", client.ErrUnavailable, nil},
		{"401", 401, pj, problem(wire.CodeUnauthorized), client.ErrUnavailable, wire.ErrUnauthorized},
		{"404", 404, pj, problem(wire.CodeNotFound), client.ErrUnavailable, nil},
		{"409", 409, pj, problem(wire.CodeConflict), engine.ErrOperationConflict, wire.ErrConflict},
		{"409 not a problem", 409, "text/html", "<h1>Conflict</h1>", client.ErrUnavailable, nil},
		{"409 another code", 409, pj, problem(wire.CodeUnavailable), client.ErrUnavailable, wire.ErrUnavailable},
		{"413", 413, pj, problem(wire.CodeTooLarge), client.ErrUnavailable, wire.ErrTooLarge},
		{"429", 429, pj, problem(wire.CodeLimited), client.ErrUnavailable, wire.ErrLimited},
		{"500 plain", 500, "text/plain", "oops", client.ErrUnavailable, nil},
		{"502 html", 502, "text/html", "<h1>Bad Gateway</h1>", client.ErrUnavailable, nil},
		{"503 stopped", 503, pj, problem(wire.CodeStopped), client.ErrUnavailable, wire.ErrStopped},
		{"503 unavailable", 503, pj, problem(wire.CodeUnavailable), client.ErrUnavailable, wire.ErrUnavailable},
		{"302 redirect", 302, "", "", client.ErrUnavailable, nil},
		{"200 undecodable", 200, "application/json", "{not json", client.ErrUnavailable, nil},
		{"200 wrong shape", 200, "application/json", `{"steps":[]}`, client.ErrUnavailable, nil},
		{"200 short results", 200, "application/json", `{"steps":[{"results":[]}]}`, client.ErrUnavailable, nil},
		{"200 windows for a kv.get", 200, "application/json", `{"steps":[{"results":[{"allowed":true,"windows":[{"allowed":true,"remaining":1,"resetAt":1}]}]}]}`, client.ErrUnavailable, nil},
		{"200 over 1 MiB", 200, "application/json", `{"steps":[{"results":[{"allowed":true,"value":"` + strings.Repeat("x", 1<<20) + `"}]}]}`, client.ErrUnavailable, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv, n := scripted(t, tc.status, tc.ctype, tc.body)
			cfg := client.DefaultConfig()
			cfg.URL, cfg.Secret, cfg.Pepper = srv.URL, testSecret, testPepper
			c := client.New(cfg)
			defer c.Close()
			_, err := c.Do(ctxT(t), &engine.Request{Steps: []engine.Step{{Partition: "p", Commands: []engine.Command{engine.Get("k")}}}})
			if !errors.Is(err, tc.want) {
				t.Fatalf("%v, want %v", err, tc.want)
			}
			if tc.want != client.ErrUnavailable && errors.Is(err, client.ErrUnavailable) {
				t.Fatalf("%v is also ErrUnavailable", err)
			}
			if tc.wire != nil {
				var we *wire.Error
				if !errors.Is(err, tc.wire) || !errors.As(err, &we) || we.Status != tc.status || we.Reason != "because" {
					t.Fatalf("%v does not wrap the server's %v with status %d", err, tc.wire, tc.status)
				}
			}
			if got := n.Load(); got != 1 {
				t.Fatalf("the server saw %d requests, want 1 (no retry, no redirect followed)", got)
			}
		})
	}
}

func TestRealServerErrors(t *testing.T) {
	h := newHarness(t)
	c := h.client()
	eng := engine.New(c)
	var out engine.StepResult

	// 400 wrong_type: a counter incremented where a window lives.
	if err := eng.Apply(ctxT(t), "p", &out, engine.Hit(1, fixed("w", 5, 1000))); err != nil {
		t.Fatal(err)
	}
	if err := eng.Apply(ctxT(t), "p", &out, engine.Incr("w", 1, 10_000)); !errors.Is(err, engine.ErrWrongType) {
		t.Fatalf("incr on a window: %v, want ErrWrongType", err)
	}
	// 400 overflow.
	if err := eng.Apply(ctxT(t), "p", &out, engine.Incr("n", math.MaxInt64, 10_000)); err != nil {
		t.Fatal(err)
	}
	if err := eng.Apply(ctxT(t), "p", &out, engine.Incr("n", 1, 10_000)); !errors.Is(err, engine.ErrOverflow) {
		t.Fatalf("overflowing incr: %v, want ErrOverflow", err)
	}
	// 401: a client signing with another secret.
	cfg := h.config()
	cfg.Secret = strings.Repeat("z", 40)
	wrong := client.New(cfg)
	defer wrong.Close()
	if err := engine.New(wrong).Apply(ctxT(t), "p", &out, engine.Get("k")); !errors.Is(err, client.ErrUnavailable) || !errors.Is(err, wire.ErrUnauthorized) {
		t.Fatalf("wrong secret: %v, want ErrUnavailable wrapping 401", err)
	}
	// 503 guard_stopped, then service again after resume.
	h.operator(wire.PathStop)
	if err := eng.Apply(ctxT(t), "p", &out, engine.Get("k")); !errors.Is(err, client.ErrUnavailable) || !errors.Is(err, wire.ErrStopped) {
		t.Fatalf("stopped server: %v, want ErrUnavailable wrapping guard_stopped", err)
	}
	h.operator(wire.PathResume)
	if err := eng.Apply(ctxT(t), "p", &out, engine.Get("k")); err != nil {
		t.Fatalf("after resume: %v", err)
	}
	// Ping reports the protocol.
	p, err := c.Ping(ctxT(t))
	if err != nil || p.Protocol != wire.ProtocolVersion {
		t.Fatalf("ping: %+v, %v", p, err)
	}
}

func TestPingRefusesAnotherProtocol(t *testing.T) {
	srv, _ := scripted(t, 200, "application/json", `{"protocol":2,"version":"future"}`)
	cfg := client.DefaultConfig()
	cfg.URL, cfg.Secret, cfg.Pepper = srv.URL, testSecret, testPepper
	if _, err := client.New(cfg).Ping(ctxT(t)); !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("ping of a protocol 2 server: %v, want ErrUnavailable", err)
	}
}

func TestOffClientAnswersUnavailable(t *testing.T) {
	h := newHarness(t)
	bad := map[string]func(*client.Config){
		"no URL":          func(c *client.Config) { c.URL = "" },
		"plain http":      func(c *client.Config) { c.URL = "http://sluice.example:8080" },
		"short secret":    func(c *client.Config) { c.Secret = "short" },
		"short pepper":    func(c *client.Config) { c.Pepper = strings.Repeat("p", 31) },
		"no pepper":       func(c *client.Config) { c.Pepper = "" },
		"backend off":     func(c *client.Config) { c.Off = true },
		"pepper = secret": func(c *client.Config) { c.Pepper = c.Secret },
	}
	for name, mutate := range bad {
		t.Run(name, func(t *testing.T) {
			cfg := h.config()
			mutate(&cfg)
			c := client.New(cfg)
			if err := c.Err(); !errors.Is(err, client.ErrUnavailable) {
				t.Fatalf("Err() = %v, want ErrUnavailable", err)
			}
			_, err := c.Do(ctxT(t), &engine.Request{Steps: []engine.Step{{Partition: "p", Commands: []engine.Command{engine.Get("k")}}}})
			if !errors.Is(err, client.ErrUnavailable) || !strings.Contains(err.Error(), "client off") {
				t.Fatalf("Do: %v, want ErrUnavailable naming the off state", err)
			}
			if _, err := c.Ping(ctxT(t)); !errors.Is(err, client.ErrUnavailable) {
				t.Fatalf("Ping: %v", err)
			}
			if c.Hash(client.PurposeKey, "x") == "" {
				t.Fatal("an off client must still hash")
			}
		})
	}
	if got := h.rpcs.Load(); got != 0 {
		t.Fatalf("off clients sent %d requests", got)
	}
}

func TestClosedClient(t *testing.T) {
	h := newHarness(t)
	c := h.client()
	view := c.WithFamily("proxy")
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	var out engine.StepResult
	if err := engine.New(view).Apply(ctxT(t), "p", &out, engine.Get("k")); !errors.Is(err, engine.ErrClosed) {
		t.Fatalf("call on a closed client's view: %v, want ErrClosed", err)
	}
}

func TestApplyReusesOutAndSendsFreshIDs(t *testing.T) {
	h := newHarness(t)
	c := h.client()
	out := engine.StepResult{Results: make([]engine.Result, 0, 4)}
	b := engine.Batch{Partition: "p", Commands: []engine.Command{engine.Hit(1, engine.Window{Key: "w", Kind: algo.KindSliding, Limit: 9, WindowMs: 60_000})}}
	for range 2 {
		if err := c.Apply(ctxT(t), &b, &out); err != nil {
			t.Fatal(err)
		}
	}
	if out.Results[0].Remaining != 7 || cap(out.Results) != 4 {
		t.Fatalf("remaining %d cap %d: want 7 (two hits, two ids) in the reused slice", out.Results[0].Remaining, cap(out.Results))
	}
	bodies := h.sent()
	id := regexp.MustCompile(`"operationId":"([0-9a-f]{32})"`)
	a, z := id.FindSubmatch(bodies[0]), id.FindSubmatch(bodies[1])
	if a == nil || z == nil || bytes.Equal(a[1], z[1]) {
		t.Fatalf("operation ids %q and %q: want two fresh ids", a, z)
	}
	// A batch carrying an id replays.
	b.OperationID = "retry-me"
	for i := range 2 {
		if err := c.Apply(ctxT(t), &b, &out); err != nil {
			t.Fatal(err)
		}
		if out.Replayed != (i == 1) || out.Results[0].Remaining != 6 {
			t.Fatalf("apply %d with an id: replayed %v remaining %d", i, out.Replayed, out.Results[0].Remaining)
		}
	}
}

func TestRequestsAreSignedAtTheConfiguredClock(t *testing.T) {
	h := newHarness(t)
	// The server reads a fixed wall clock, so the skew is exactly what the
	// test says however long a request takes on a busy machine.
	wall := time.Unix(1_700_000_000, 0)
	scfg := server.DefaultConfig()
	scfg.Secrets = []string{testSecret}
	scfg.OperatorToken = testToken
	scfg.Now = func() time.Time { return wall }
	h.rpc = server.New(engine.New(h.store), scfg)
	for skew, ok := range map[time.Duration]bool{-59 * time.Second: true, 59 * time.Second: true, -61 * time.Second: false, 61 * time.Second: false} {
		cfg := h.config()
		cfg.Now = func() time.Time { return wall.Add(skew) }
		c := client.New(cfg)
		_, err := c.Do(ctxT(t), &engine.Request{Steps: []engine.Step{{Partition: "p", Commands: []engine.Command{engine.Get("k")}}}})
		c.Close()
		if ok && err != nil {
			t.Errorf("skew %v: %v", skew, err)
		}
		if !ok && (!errors.Is(err, client.ErrUnavailable) || !errors.Is(err, wire.ErrUnauthorized)) {
			t.Errorf("skew %v: %v, want ErrUnavailable wrapping 401", skew, err)
		}
	}
}

// TestHTTPVersions sends a request with each HTTP version to a server
// serving both, as sluice serve does, and checks which one it arrived in.
func TestHTTPVersions(t *testing.T) {
	h := newHarness(t)
	for _, tc := range []struct {
		version client.HTTPVersion
		want    int64
	}{{"", 1}, {client.HTTP2, 2}, {client.HTTP1, 1}} {
		cfg := h.config()
		cfg.HTTPVersion = tc.version
		c := client.New(cfg)
		if _, err := engine.New(c).Do(ctxT(t), &engine.Request{Steps: []engine.Step{{Partition: "p", Commands: []engine.Command{engine.Get("k")}}}}); err != nil {
			t.Fatalf("HTTP version %q: %v", tc.version, err)
		}
		c.Close()
		if got := h.proto.Load(); got != tc.want {
			t.Errorf("HTTP version %q: the request arrived over HTTP/%d, want HTTP/%d", tc.version, got, tc.want)
		}
	}
}

// TestH2CNeedsAServerSpeakingIt checks what HTTP2 costs against a
// plain-http server that speaks HTTP/1.1 only: the store is unavailable,
// while the default reaches it.
func TestH2CNeedsAServerSpeakingIt(t *testing.T) {
	h := newHarness(t)
	old := httptest.NewServer(http.HandlerFunc(h.serve)) // HTTP/1.1 only
	defer old.Close()
	cfg := h.config()
	cfg.URL = old.URL
	req := &engine.Request{Steps: []engine.Step{{Partition: "p", Commands: []engine.Command{engine.Get("k")}}}}
	c := client.New(cfg)
	defer c.Close()
	if _, err := engine.New(c).Do(ctxT(t), req); err != nil {
		t.Fatalf("the default to an HTTP/1.1-only server: %v", err)
	}
	cfg.HTTPVersion = client.HTTP2
	c2 := client.New(cfg)
	defer c2.Close()
	if _, err := engine.New(c2).Do(ctxT(t), req); !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("h2c to an HTTP/1.1-only server: %v, want ErrUnavailable", err)
	}
}

// TestAnswerSkippingOutOfTurn answers 200 with steps skipped, or not
// skipped, where the request's mode and the steps before them say
// otherwise: the answer is not the request's, so the call is unavailable,
// and a Guard applies its fail mode rather than read a result that is not
// there.
func TestAnswerSkippingOutOfTurn(t *testing.T) {
	const (
		skipped  = `{"skipped":true,"results":[]}`
		allowed  = `{"results":[{"allowed":true,"remaining":1,"windows":[{"allowed":true,"remaining":1,"resetAt":1}]}]}`
		denied   = `{"denied":true,"results":[{"allowed":false,"remaining":0,"retryAfterMs":5,"windows":[{"allowed":false,"remaining":0,"resetAt":1,"retryAfterMs":5}]}]}`
		unmarked = `{"results":[{"allowed":false,"remaining":0,"retryAfterMs":5,"windows":[{"allowed":false,"remaining":0,"resetAt":1,"retryAfterMs":5}]}]}`
	)
	hit := engine.Hit(1, fixed("w", 1, 1000))
	step := func(p string) engine.Step { return engine.Step{Partition: p, Commands: []engine.Command{hit}} }
	cases := []struct {
		name  string
		mode  engine.Mode
		steps int
		body  string
	}{
		{"first step skipped", engine.Sequential, 1, `{"steps":[` + skipped + `]}`},
		{"skipped after an allowed step", engine.Sequential, 2, `{"steps":[` + allowed + `,` + skipped + `]}`},
		{"run after a denied step", engine.Sequential, 2, `{"steps":[` + denied + `,` + allowed + `]}`},
		{"skipped in mode all", engine.All, 2, `{"steps":[` + denied + `,` + skipped + `]}`},
		{"denial not marked", engine.Sequential, 1, `{"steps":[` + unmarked + `]}`},
		{"allowed step marked denied", engine.All, 1, `{"steps":[{"denied":true,"results":[{"allowed":true,"remaining":1,"windows":[{"allowed":true,"remaining":1,"resetAt":1}]}]}]}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv, _ := scripted(t, 200, "application/json", tc.body)
			cfg := client.DefaultConfig()
			cfg.URL, cfg.Secret, cfg.Pepper = srv.URL, testSecret, testPepper
			c := client.New(cfg)
			defer c.Close()
			r := &engine.Request{Mode: tc.mode}
			for i := range tc.steps {
				r.Steps = append(r.Steps, step(string(rune('a'+i))))
			}
			if _, err := c.Do(ctxT(t), r); !errors.Is(err, client.ErrUnavailable) {
				t.Fatalf("%v, want ErrUnavailable", err)
			}
			if tc.steps != 1 {
				return
			}
			g, _ := newGuard(t, c, client.FailClosed)
			d, err := g.Hit(ctxT(t), "a", 1, fixed("w", 1, 1000))
			if err != nil || d.Allowed || d.Origin != client.OriginFailClosed || !errors.Is(d.Err, client.ErrUnavailable) {
				t.Fatalf("guard: %+v, %v; want refused by the fail mode", d, err)
			}
		})
	}
	// The answers the server gives are accepted.
	for _, tc := range []struct {
		mode engine.Mode
		body string
	}{
		{engine.Sequential, `{"steps":[` + denied + `,` + skipped + `]}`},
		{engine.Sequential, `{"steps":[` + allowed + `,` + allowed + `]}`},
		{engine.All, `{"steps":[` + denied + `,` + denied + `]}`},
	} {
		srv, _ := scripted(t, 200, "application/json", tc.body)
		cfg := client.DefaultConfig()
		cfg.URL, cfg.Secret, cfg.Pepper = srv.URL, testSecret, testPepper
		c := client.New(cfg)
		defer c.Close()
		if _, err := c.Do(ctxT(t), &engine.Request{Mode: tc.mode, Steps: []engine.Step{step("a"), step("b")}}); err != nil {
			t.Fatalf("%s %s: %v", tc.mode, tc.body, err)
		}
	}
}

// storeOnly hides every interface of the store it holds but engine.Store,
// as a wrapper of a caller's own (metrics, tracing) does: the engine then
// runs a request step by step through Apply.
type storeOnly struct{ engine.Store }

// TestApplyKeepsStepsOfOneOperationApart runs a request of two steps on one
// partition, with an operation id, through a store wrapping the client, so
// that each step reaches Client.Apply as a batch naming its step. Each step
// is charged, the second is neither replayed from the first nor refused as
// a conflict with it, and a retry of the whole request replays both.
func TestApplyKeepsStepsOfOneOperationApart(t *testing.T) {
	h := newHarness(t)
	eng := engine.New(storeOnly{h.client()})
	w := fixed("w", 10, 60_000)
	hit := engine.Step{Partition: "acct:42", Commands: []engine.Command{engine.Hit(1, w)}}
	req := &engine.Request{OperationID: engine.NewOperationID(), Steps: []engine.Step{hit, hit}}
	first, err := eng.Do(ctxT(t), req)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []int64{9, 8} {
		if st := first.Steps[i]; st.Replayed || st.Results[0].Remaining != want {
			t.Fatalf("step %d of two equal hits: %+v, want charged, %d remaining", i, st, want)
		}
	}
	again, err := eng.Do(ctxT(t), req)
	if err != nil {
		t.Fatal(err)
	}
	for i, st := range again.Steps {
		if !st.Replayed || st.Results[0].Remaining != first.Steps[i].Results[0].Remaining {
			t.Fatalf("retry, step %d: %+v, want its own recorded result replayed", i, st)
		}
	}
	incr := &engine.Request{OperationID: engine.NewOperationID(), Steps: []engine.Step{
		{Partition: "acct:42", Commands: []engine.Command{engine.Incr("n", 1, 60_000)}},
		{Partition: "acct:42", Commands: []engine.Command{engine.Incr("n", 5, 60_000)}},
	}}
	resp, err := eng.Do(ctxT(t), incr)
	if err != nil {
		t.Fatalf("two steps of other commands on one partition: %v", err)
	}
	if resp.Steps[1].Results[0].Int != 6 {
		t.Fatalf("second step: %+v, want the counter at 6", resp.Steps[1])
	}
}
