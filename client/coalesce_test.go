package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/testclock"
	"github.com/sluicehq/sluice/server"
	"github.com/sluicehq/sluice/store/memstore"
	"github.com/sluicehq/sluice/wire"
)

// inProcess is a client transport that serves each request with a real
// Sluice server in the same goroutine, so that a synctest bubble sees every
// goroutine involved. It holds the first RPC until gate is closed, counts
// the requests of each endpoint and the most requests one envelope held,
// and can play a server without envelopes.
type inProcess struct {
	srv           http.Handler
	gate          chan struct{}
	held          atomic.Bool
	rpcs, envs    atomic.Int64
	fullest       atomic.Int64  // the most requests one envelope held
	holdEnvelopes bool          // envelopes wait for gate too
	noEnvelopes   bool          // answer envelopes 404 and ping without the feature
	roundTrip     time.Duration // how long each request takes, on the bubble's clock
	ignorePrefer  bool          // play a server that knows no Prefer header
	dropApplied   bool          // play a proxy that drops Preference-Applied
	// preferred and applied count the requests that asked for a minimal
	// answer and the answers that said they were one.
	preferred, applied atomic.Int64
}

func newInProcess(t *testing.T) *inProcess {
	t.Helper()
	cfg := memstore.DefaultConfig()
	cfg.Clock = testclock.At(start)
	mem, err := memstore.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mem.Close() })
	scfg := server.DefaultConfig()
	scfg.Secrets, scfg.OperatorToken = []string{testSecret}, testToken
	return &inProcess{srv: server.New(engine.New(mem), scfg), gate: make(chan struct{})}
}

func (p *inProcess) RoundTrip(r *http.Request) (*http.Response, error) {
	time.Sleep(p.roundTrip)
	rec := httptest.NewRecorder()
	switch r.URL.Path {
	case wire.PathRPC:
		p.rpcs.Add(1)
		if p.held.CompareAndSwap(false, true) {
			<-p.gate
		}
	case wire.PathRPCs:
		p.envs.Add(1)
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return nil, err
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		if reqs, err := wire.DecodeEnvelope(body, nil); err == nil {
			for n := int64(len(reqs)); ; {
				f := p.fullest.Load()
				if n <= f || p.fullest.CompareAndSwap(f, n) {
					break
				}
			}
		}
		if p.holdEnvelopes {
			<-p.gate
		}
		if p.noEnvelopes {
			rec.WriteHeader(http.StatusNotFound)
			_, _ = io.WriteString(rec, `{"type":"about:blank","title":"Not Found","status":404,"code":"not_found","reason":"no such endpoint"}`)
			return rec.Result(), nil
		}
	case wire.PathPing:
		if p.noEnvelopes {
			_, _ = io.WriteString(rec, `{"protocol":1,"version":"old"}`)
			return rec.Result(), nil
		}
	}
	if wire.PrefersMinimal(r.Header.Values(wire.HeaderPrefer)) {
		p.preferred.Add(1)
	}
	if p.ignorePrefer {
		r.Header.Del(wire.HeaderPrefer)
	}
	p.srv.ServeHTTP(rec, r)
	res := rec.Result()
	if wire.PrefersMinimal(res.Header.Values(wire.HeaderPreferenceApplied)) {
		p.applied.Add(1)
	}
	if p.dropApplied {
		res.Header.Del(wire.HeaderPreferenceApplied)
	}
	return res, nil
}

// client returns a client through p with one RPC in flight at most.
func (p *inProcess) client(t *testing.T) *client.Client {
	cfg := client.DefaultConfig()
	cfg.URL, cfg.Secret, cfg.Pepper = "http://127.0.0.1:1", testSecret, testPepper
	cfg.HTTPClient = &http.Client{Transport: p}
	cfg.Coalesce = 1
	c := client.New(cfg)
	if err := c.Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// limitedHit is one hit on the one window all callers share.
func limitedHit(limit int64) *engine.Batch {
	w := engine.Window{Key: "shared", Kind: algo.KindFixed, Limit: limit, WindowMs: 60_000}
	return &engine.Batch{Partition: "tenant", Commands: []engine.Command{engine.Hit(1, w)}}
}

// hitAll makes n concurrent calls of one hit each on a window of limit
// and returns each caller's result and error.
func hitAll(ctx context.Context, c *client.Client, n int, limit int64) ([]engine.StepResult, []error) {
	results, errs := make([]engine.StepResult, n), make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i] = c.Apply(ctx, limitedHit(limit), &results[i]) })
	}
	wg.Wait()
	return results, errs
}

// checkShared checks that exactly limit callers were admitted, each with a
// remaining count of its own: every charge answered exactly once.
func checkShared(t *testing.T, results []engine.StepResult, errs []error, limit int64) {
	t.Helper()
	var remaining []int64
	for i := range results {
		if errs[i] != nil {
			t.Fatalf("caller %d: %v", i, errs[i])
		}
		if r := results[i].Results; len(r) == 1 && r[0].Allowed {
			remaining = append(remaining, r[0].Remaining)
		}
	}
	slices.Sort(remaining)
	if int64(len(remaining)) != limit {
		t.Fatalf("%d callers admitted, want exactly %d", len(remaining), limit)
	}
	for i, r := range remaining {
		if r != int64(i) {
			t.Fatalf("remaining counts of the admitted %v, want each of 0…%d once", remaining, limit-1)
		}
	}
}

// TestCoalescedCallersShareALimit holds every RPC and envelope in flight
// while 256 callers call: one RPC goes alone, and the calls waiting, many
// enough to fill envelopes, take the 3 more places a client of Coalesce 1
// has for them and wait there. Once let go, every call is sent in
// envelopes of at most wire.MaxEnvelope, exactly the limit is admitted,
// and every caller gets an answer of its own.
func TestCoalescedCallersShareALimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newInProcess(t)
		p.holdEnvelopes = true
		c := p.client(t)
		const callers, limit = 256, 100
		var results []engine.StepResult
		var errs []error
		done := make(chan struct{})
		go func() {
			results, errs = hitAll(t.Context(), c, callers, limit)
			close(done)
		}()
		synctest.Wait() // every place taken, every other caller queued
		if p.rpcs.Load() != 1 || p.envs.Load() != 3 {
			t.Fatalf("while every place is held: %d RPCs and %d envelopes sent, want 1 and 3", p.rpcs.Load(), p.envs.Load())
		}
		close(p.gate)
		<-done
		checkShared(t, results, errs, limit)
		envelopes := (callers - 1 + wire.MaxEnvelope - 1) / wire.MaxEnvelope
		if p.rpcs.Load() != 1 || p.envs.Load() < int64(envelopes) || p.fullest.Load() != wire.MaxEnvelope {
			t.Errorf("%d RPCs and %d envelopes for %d calls, the fullest of %d; want 1, at least %d, and %d",
				p.rpcs.Load(), p.envs.Load(), callers, p.fullest.Load(), envelopes, wire.MaxEnvelope)
		}
	})
}

// TestBusyCallersTravelTogether keeps 8 callers busy through one RPC in
// flight, on one processor, each calling again as soon as it is answered,
// with a round trip of a millisecond on the bubble's clock. The callers an
// envelope answers go in the next one together: hardly a call goes alone.
// (A sender that gave up its place before they ran would let the first of
// them go alone after every envelope, an eighth of all calls.)
func TestBusyCallersTravelTogether(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	synctest.Test(t, func(t *testing.T) {
		p := newInProcess(t)
		close(p.gate)
		p.roundTrip = time.Millisecond
		c := p.client(t)
		const callers, perCaller = 8, 50
		var wg sync.WaitGroup
		for range callers {
			wg.Go(func() {
				var res engine.StepResult
				for range perCaller {
					if err := c.Apply(t.Context(), limitedHit(algo.MaxLimit), &res); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		if n := p.rpcs.Load(); n > perCaller/4 {
			t.Errorf("%d of %d calls went alone (%d envelopes), want at most %d", n, callers*perCaller, p.envs.Load(), perCaller/4)
		}
	})
}

// TestCoalescedCallerCancelled cancels one queued caller: it returns at
// once with ErrUnavailable, its request is never sent, and the others are
// answered as usual. Two of them share an operation id with different
// commands: the envelope runs them concurrently, in no order, so one runs
// and the other is engine.ErrOperationConflict.
func TestCoalescedCallerCancelled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newInProcess(t)
		c := p.client(t)
		eng := engine.New(c)
		incr := func(key string) *engine.Request {
			return &engine.Request{Steps: []engine.Step{{Partition: "p", Commands: []engine.Command{engine.Incr(key, 1, 60_000)}}}}
		}
		var wg sync.WaitGroup
		wg.Go(func() { _, _ = eng.Do(t.Context(), incr("first")) })
		synctest.Wait()

		ctx, cancel := context.WithCancel(t.Context())
		var cancelledErr error
		wg.Go(func() { _, cancelledErr = eng.Do(ctx, incr("cancelled")) })
		reused := incr("n")
		reused.OperationID = engine.NewOperationID()
		conflict := incr("other")
		conflict.OperationID = reused.OperationID
		resps, errs := make([]*engine.Response, 2), make([]error, 2)
		for i, r := range []*engine.Request{reused, conflict} {
			wg.Go(func() { resps[i], errs[i] = eng.Do(t.Context(), r) })
		}
		synctest.Wait()
		cancel()
		synctest.Wait()
		if !errors.Is(cancelledErr, client.ErrUnavailable) || !errors.Is(cancelledErr, context.Canceled) {
			t.Fatalf("the cancelled caller, while the RPC is held: %v, want ErrUnavailable wrapping context.Canceled", cancelledErr)
		}
		close(p.gate)
		wg.Wait()
		ran := 0
		if errs[1] == nil {
			ran = 1
		}
		if err := errs[ran]; err != nil || resps[ran].Steps[0].Results[0].Int != 1 {
			t.Errorf("the queued caller that ran: %+v, %v", resps[ran], err)
		}
		if err := errs[1-ran]; !errors.Is(err, engine.ErrOperationConflict) {
			t.Errorf("the other with its operation id: %v, want ErrOperationConflict", err)
		}
		resp, err := eng.Do(t.Context(), &engine.Request{Steps: []engine.Step{{Partition: "p", Commands: []engine.Command{engine.Get("cancelled")}}}})
		if err != nil || resp.Steps[0].Results[0].Found {
			t.Errorf("the cancelled caller's key: %+v, %v; want never written", resp, err)
		}
		if p.envs.Load() != 1 {
			t.Errorf("%d envelopes, want the 2 remaining queued calls in 1", p.envs.Load())
		}
	})
}

// TestQueuedCallTimesOut queues a call behind an RPC that is held: once
// the client's timeout has passed, the call answers ErrUnavailable
// wrapping context.DeadlineExceeded, and it is never sent afterwards.
func TestQueuedCallTimesOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newInProcess(t)
		c := p.client(t)
		eng := engine.New(c)
		step := func(cmd engine.Command) *engine.Request {
			return &engine.Request{Steps: []engine.Step{{Partition: "p", Commands: []engine.Command{cmd}}}}
		}
		var wg sync.WaitGroup
		wg.Go(func() { _, _ = eng.Do(t.Context(), step(engine.Incr("first", 1, 60_000))) })
		synctest.Wait()

		start := time.Now()
		_, err := eng.Do(t.Context(), step(engine.Incr("late", 1, 60_000)))
		if !errors.Is(err, client.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("the queued call: %v, want ErrUnavailable wrapping context.DeadlineExceeded", err)
		}
		if waited := time.Since(start); waited != client.DefaultTimeout {
			t.Errorf("the queued call gave up after %v, want the timeout, %v", waited, client.DefaultTimeout)
		}
		close(p.gate)
		wg.Wait()
		resp, err := eng.Do(t.Context(), step(engine.Get("late")))
		if err != nil || resp.Steps[0].Results[0].Found {
			t.Errorf("the timed-out call's key: %+v, %v; want never written", resp, err)
		}
		if p.rpcs.Load() != 2 || p.envs.Load() != 0 {
			t.Errorf("%d RPCs and %d envelopes, want the first call's and the read's RPCs alone", p.rpcs.Load(), p.envs.Load())
		}
	})
}

// hangingRPCs holds the first RPC until release is closed and then fails
// it; every later RPC hangs until its request's context ends, and reports
// when that was on ended.
type hangingRPCs struct {
	release chan struct{}
	ended   chan time.Time
	rpcs    atomic.Int64
}

func (h *hangingRPCs) RoundTrip(r *http.Request) (*http.Response, error) {
	if h.rpcs.Add(1) == 1 {
		<-h.release
		return nil, errors.New("the first RPC failed")
	}
	<-r.Context().Done()
	h.ended <- time.Now()
	return nil, r.Context().Err()
}

// TestQueuedCallSentAloneEndsAtItsTimeout queues a call behind an RPC that
// is held, lets that RPC end after half the timeout, and holds the queued
// call's own RPC, sent alone: it ends when its caller gives up, at the
// timeout from when the call was made, not a timeout after it was sent.
func TestQueuedCallSentAloneEndsAtItsTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := &hangingRPCs{release: make(chan struct{}), ended: make(chan time.Time, 1)}
		eng := engine.New(oneInFlight(t, h))
		var wg sync.WaitGroup
		wg.Go(func() { _, _ = eng.Do(t.Context(), one(engine.Incr("first", 1, 60_000))) })
		synctest.Wait()

		start := time.Now()
		var err error
		var returned time.Time
		wg.Go(func() {
			_, err = eng.Do(t.Context(), one(engine.Incr("queued", 1, 60_000)))
			returned = time.Now()
		})
		time.Sleep(client.DefaultTimeout / 2)
		close(h.release)
		ended := <-h.ended
		wg.Wait()

		if h.rpcs.Load() != 2 {
			t.Fatalf("%d RPCs, want the first and the queued call sent alone", h.rpcs.Load())
		}
		if !errors.Is(err, client.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("the queued call: %v, want ErrUnavailable wrapping context.DeadlineExceeded", err)
		}
		if got := returned.Sub(start); got != client.DefaultTimeout {
			t.Errorf("the queued call returned after %v, want the timeout, %v", got, client.DefaultTimeout)
		}
		if got := ended.Sub(start); got != client.DefaultTimeout {
			t.Errorf("the queued call's RPC ended %v after the call was made, want the timeout, %v", got, client.DefaultTimeout)
		}
	})
}

// TestCoalescingFallsBack plays a server without envelopes: its 404 sends
// the envelope's calls alone, answered as usual, and the client sends
// every later call alone; a ping without the feature does the same.
func TestCoalescingFallsBack(t *testing.T) {
	for _, ping := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			p := newInProcess(t)
			p.noEnvelopes = true
			c := p.client(t)
			if ping {
				if _, err := c.Ping(t.Context()); err != nil {
					t.Fatal(err)
				}
			}
			const callers, limit = 20, 15
			var results []engine.StepResult
			var errs []error
			done := make(chan struct{})
			go func() {
				results, errs = hitAll(t.Context(), c, callers, limit)
				close(done)
			}()
			synctest.Wait()
			close(p.gate)
			<-done
			checkShared(t, results, errs, limit)
			wantEnvs := int64(1)
			if ping {
				wantEnvs = 0
			}
			if p.envs.Load() != wantEnvs || p.rpcs.Load() != callers {
				t.Fatalf("ping %v: %d envelopes and %d RPCs for %d calls, want %d and %d", ping, p.envs.Load(), p.rpcs.Load(), callers, wantEnvs, callers)
			}
			// Later calls go alone at once: no envelope, nobody queued
			// behind a held RPC.
			p.held.Store(false)
			p.gate = make(chan struct{})
			done = make(chan struct{})
			go func() {
				results, errs = hitAll(t.Context(), c, callers, 2*callers)
				close(done)
			}()
			synctest.Wait()
			if got := p.rpcs.Load(); got != 2*callers {
				t.Errorf("ping %v: %d RPCs under way after the fallback, want all %d calls sent at once", ping, got-callers, callers)
			}
			close(p.gate)
			<-done
			for i, err := range errs {
				if err != nil {
					t.Fatalf("caller %d after the fallback: %v", i, err)
				}
			}
			if p.envs.Load() != wantEnvs {
				t.Errorf("ping %v: an envelope was sent after the fallback", ping)
			}
		})
	}
}

// TestCoalescingOverLoopback makes many concurrent calls through a real
// server and the default client: exactly the limit is admitted, every
// caller answered once, in fewer HTTP requests than calls.
func TestCoalescingOverLoopback(t *testing.T) {
	h := newHarness(t)
	var envelopes atomic.Int64
	h.before = func(w http.ResponseWriter, r *http.Request) bool {
		if r.URL.Path == wire.PathRPCs {
			envelopes.Add(1)
		}
		return false
	}
	cfg := h.config()
	cfg.Timeout = client.MaxTimeout // a failure bound on a loaded machine
	c := client.New(cfg)
	defer c.Close()
	const callers, limit = 256, 100
	for round := range 3 {
		w := limitedHit(limit)
		w.Commands[0].Windows[0].Key += strings.Repeat("x", round)
		results, errs := make([]engine.StepResult, callers), make([]error, callers)
		var wg sync.WaitGroup
		for i := range callers {
			wg.Go(func() { errs[i] = c.Apply(t.Context(), w, &results[i]) })
		}
		wg.Wait()
		checkShared(t, results, errs, limit)
	}
	if sent := h.rpcs.Load() + envelopes.Load(); sent >= 3*callers {
		t.Errorf("%d HTTP requests for %d calls: nothing was coalesced", sent, 3*callers)
	}
	t.Logf("%d RPCs and %d envelopes for %d calls", h.rpcs.Load(), envelopes.Load(), 3*callers)
}

// tenKiB returns a request of some 10 KiB: five sets of 2,000 bytes.
func tenKiB(i int) *engine.Request {
	value := strings.Repeat("v", 2000)
	var cmds []engine.Command
	for j := range 5 {
		cmds = append(cmds, engine.Set(strconv.Itoa(i*5+j), value, 60_000))
	}
	return &engine.Request{Steps: []engine.Step{{Partition: "p", Commands: cmds}}}
}

// TestCoalescingSplitsAtTheBodyBound holds every RPC and envelope in
// flight while 20 calls of some 10 KiB each are made: once every place is
// taken, the calls left queue, and no envelope is built over
// wire.MaxEnvelopeBody (the server would refuse it): the fullest holds 4.
func TestCoalescingSplitsAtTheBodyBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newInProcess(t)
		p.holdEnvelopes = true
		c := p.client(t)
		eng := engine.New(c)
		var wg sync.WaitGroup
		wg.Go(func() {
			_, _ = eng.Do(t.Context(), &engine.Request{Steps: []engine.Step{{Partition: "p", Commands: []engine.Command{engine.Get("k")}}}})
		})
		synctest.Wait()
		const callers = 20
		errs := make([]error, callers)
		for i := range callers {
			wg.Go(func() { _, errs[i] = eng.Do(t.Context(), tenKiB(i)) })
		}
		synctest.Wait()
		close(p.gate)
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("caller %d: %v", i, err)
			}
		}
		if got := p.fullest.Load(); got != 4 {
			t.Errorf("the fullest envelope of calls of 10 KiB held %d, want 4 (within %d bytes)", got, wire.MaxEnvelopeBody)
		}
	})
}

// TestHeavyCallsGoWithoutWaiting holds the one RPC a client has in flight:
// calls of one hit queue behind it, however many, while calls of some 10
// KiB go as soon as those waiting fill half an envelope, in RPCs of their
// own, up to 4 in flight.
func TestHeavyCallsGoWithoutWaiting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newInProcess(t)
		p.holdEnvelopes = true
		c := p.client(t) // Coalesce 1
		eng := engine.New(c)
		var wg sync.WaitGroup
		wg.Go(func() {
			_, _ = eng.Do(t.Context(), &engine.Request{Steps: []engine.Step{{Partition: "p", Commands: []engine.Command{engine.Get("k")}}}})
		})
		synctest.Wait()
		for range 40 {
			wg.Go(func() {
				var res engine.StepResult
				if err := c.Apply(t.Context(), limitedHit(algo.MaxLimit), &res); err != nil {
					t.Error(err)
				}
			})
		}
		synctest.Wait()
		if n := p.envs.Load(); n != 0 {
			t.Fatalf("%d envelopes of one-hit calls sent while the one place was taken, want none", n)
		}
		const heavy = 20
		for i := range heavy {
			wg.Go(func() {
				if _, err := eng.Do(t.Context(), tenKiB(i)); err != nil {
					t.Error(err)
				}
			})
		}
		synctest.Wait()
		if n := p.envs.Load(); n != 3 {
			t.Errorf("%d envelopes sent while the one place was taken and heavy calls queued, want 3 (4 in flight in all)", n)
		}
		close(p.gate)
		wg.Wait()
	})
}

// envelopeEditor is a client transport over an inProcess server that
// edits the answers of every envelope before the client reads them.
type envelopeEditor struct {
	*inProcess
	edit func([]json.RawMessage) []json.RawMessage
}

func (e *envelopeEditor) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := e.inProcess.RoundTrip(r)
	if err != nil || r.URL.Path != wire.PathRPCs {
		return resp, err
	}
	var env struct {
		Answers []json.RawMessage `json:"answers"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&env); err != nil {
		return nil, err
	}
	body, err := json.Marshal(struct {
		Answers []json.RawMessage `json:"answers"`
	}{e.edit(env.Answers)})
	if err != nil {
		return nil, err
	}
	resp.Body, resp.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
	return resp, nil
}

// TestEnvelopeAnswersOutOfShape answers an envelope of a kv.incr and a
// win.hit with one answer too few, one too many, the two answers swapped,
// and one answer holding neither response nor problem: no caller reads an
// answer that is not its own, and each is unavailable instead. (Swapped,
// both answers have shapes their callers would take, in the minimal form;
// the operation ids they name give them away.) The two calls queue in no
// set order, so the test counts the callers answered.
func TestEnvelopeAnswersOutOfShape(t *testing.T) {
	edits := []struct {
		name     string
		edit     func([]json.RawMessage) []json.RawMessage
		answered int // callers still answered
	}{
		{"fewer", func(a []json.RawMessage) []json.RawMessage { return a[:1] }, 0},
		{"more", func(a []json.RawMessage) []json.RawMessage { return append(a, a[0]) }, 0},
		{"swapped", func(a []json.RawMessage) []json.RawMessage { return []json.RawMessage{a[1], a[0]} }, 0},
		{"empty", func(a []json.RawMessage) []json.RawMessage {
			return []json.RawMessage{a[0], json.RawMessage(`{"status":200}`)}
		}, 1},
	}
	for _, tc := range edits {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := newInProcess(t)
				c := oneInFlight(t, &envelopeEditor{inProcess: p, edit: tc.edit})
				var wg sync.WaitGroup
				wg.Go(func() { _, _ = c.Do(t.Context(), one(engine.Get("first"))) })
				synctest.Wait() // the first call holds the one place
				reqs := []*engine.Request{one(engine.Incr("n", 1, 60_000)), one(engine.Hit(1, fixed("w", 5, 1000)))}
				var errs [2]error
				for i, r := range reqs {
					wg.Go(func() { _, errs[i] = c.Do(t.Context(), r) })
				}
				synctest.Wait()
				close(p.gate)
				wg.Wait()
				if p.envs.Load() != 1 {
					t.Fatalf("%d envelopes, want 1", p.envs.Load())
				}
				answered := 0
				for i, err := range errs {
					switch {
					case err == nil:
						answered++
					case !errors.Is(err, client.ErrUnavailable):
						t.Errorf("caller %d: %v, want its answer or ErrUnavailable", i, err)
					}
				}
				if answered != tc.answered {
					t.Errorf("%d callers answered (errors %v), want %d", answered, errs, tc.answered)
				}
			})
		})
	}
}

// TestEnvelopeOfLargeAnswers coalesces three calls, each reading 32 values
// of 2 KiB that JSON escapes sixfold: each answer alone is within what a
// client reads for one request, and so is their envelope's answer, though
// it holds three of them.
func TestEnvelopeOfLargeAnswers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newInProcess(t)
		c := p.client(t)
		value := strings.Repeat("<", engine.MaxValueBytes)
		p.held.Store(true) // no RPC held while the values are written
		for s := range 4 {
			for k := range engine.MaxCommandsPerStep {
				r := &engine.Request{Steps: []engine.Step{{Partition: "p" + strconv.Itoa(s), Commands: []engine.Command{engine.Set("k"+strconv.Itoa(k), value, 60_000)}}}}
				if _, err := c.Do(t.Context(), r); err != nil {
					t.Fatal(err)
				}
			}
		}
		read := &engine.Request{Mode: engine.All}
		for s := range 4 {
			st := engine.Step{Partition: "p" + strconv.Itoa(s)}
			for k := range engine.MaxCommandsPerStep {
				st.Commands = append(st.Commands, engine.Get("k"+strconv.Itoa(k)))
			}
			read.Steps = append(read.Steps, st)
		}
		if resp, err := c.Do(t.Context(), read); err != nil || resp.Steps[3].Results[7].Value != value {
			t.Fatalf("one read alone: %v", err)
		}

		p.held.Store(false)
		var wg sync.WaitGroup
		wg.Go(func() {
			_, _ = c.Do(t.Context(), &engine.Request{Steps: []engine.Step{{Partition: "p", Commands: []engine.Command{engine.Get("first")}}}})
		})
		synctest.Wait() // the first call holds the one place
		var errs [3]error
		for i := range errs {
			wg.Go(func() {
				resp, err := c.Do(t.Context(), read)
				if err == nil && resp.Steps[3].Results[7].Value != value {
					err = errors.New("the value read back differs")
				}
				errs[i] = err
			})
		}
		synctest.Wait()
		close(p.gate)
		wg.Wait()
		if p.envs.Load() != 1 {
			t.Fatalf("%d envelopes, want the 3 reads in 1", p.envs.Load())
		}
		for i, err := range errs {
			if err != nil {
				t.Errorf("read %d: %v", i, err)
			}
		}
	})
}

// envelopeRefuser is a client transport over an inProcess server that
// answers every envelope as a whole with status and the problem of code.
type envelopeRefuser struct {
	*inProcess
	status int
	code   wire.Code
}

func (e *envelopeRefuser) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Path != wire.PathRPCs {
		return e.inProcess.RoundTrip(r)
	}
	e.envs.Add(1)
	rec := httptest.NewRecorder()
	rec.Header().Set("Content-Type", "application/problem+json")
	rec.WriteHeader(e.status)
	_ = json.NewEncoder(rec).Encode(wire.NewProblem(e.code, "the envelope as a whole"))
	return rec.Result(), nil
}

// TestEnvelopeRefusedAsAWhole answers an envelope of two valid calls with
// an error of the whole envelope: nothing in it ran, and neither caller
// made a mistake of its own, so each is unavailable (the server's problem
// its cause), never engine.ErrInvalid, engine.ErrOperationConflict or
// another error of a request it did not send wrong.
func TestEnvelopeRefusedAsAWhole(t *testing.T) {
	for _, tc := range []struct {
		status int
		code   wire.Code
		is     error
	}{
		{http.StatusBadRequest, wire.CodeInvalid, wire.ErrInvalid},
		{http.StatusBadRequest, wire.CodeWrongType, nil},
		{http.StatusConflict, wire.CodeConflict, wire.ErrConflict},
		{http.StatusServiceUnavailable, wire.CodeStopped, wire.ErrStopped},
	} {
		t.Run(string(tc.code), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := newInProcess(t)
				c := oneInFlight(t, &envelopeRefuser{inProcess: p, status: tc.status, code: tc.code})
				var wg sync.WaitGroup
				wg.Go(func() { _, _ = c.Do(t.Context(), one(engine.Get("first"))) })
				synctest.Wait() // the first call holds the one place
				var errs [2]error
				for i := range errs {
					wg.Go(func() { _, errs[i] = c.Do(t.Context(), one(engine.Incr("n", 1, 60_000))) })
				}
				synctest.Wait()
				close(p.gate)
				wg.Wait()
				if p.envs.Load() != 1 {
					t.Fatalf("%d envelopes, want 1", p.envs.Load())
				}
				for i, err := range errs {
					if !errors.Is(err, client.ErrUnavailable) {
						t.Errorf("caller %d: %v, want ErrUnavailable", i, err)
					}
					for _, not := range []error{engine.ErrInvalid, engine.ErrWrongType, engine.ErrOverflow, engine.ErrOperationConflict} {
						if errors.Is(err, not) {
							t.Errorf("caller %d: %v, is %v", i, err, not)
						}
					}
					if tc.is != nil && !errors.Is(err, tc.is) {
						t.Errorf("caller %d: %v, want the server's problem %v as its cause", i, err, tc.is)
					}
				}
			})
		})
	}
}

// oneInFlight returns a client over rt with one RPC in flight at a time,
// so that calls made while one is in flight share an envelope. It is
// closed when the test ends.
func oneInFlight(t *testing.T, rt http.RoundTripper) *client.Client {
	cfg := client.DefaultConfig()
	cfg.URL, cfg.Secret, cfg.Pepper = "http://127.0.0.1:1", testSecret, testPepper
	cfg.HTTPClient = &http.Client{Transport: rt}
	cfg.Coalesce = 1
	c := client.New(cfg)
	t.Cleanup(func() { c.Close() })
	return c
}

// one returns a request of one step of cmd alone.
func one(cmd engine.Command) *engine.Request {
	return &engine.Request{Steps: []engine.Step{{Partition: "p", Commands: []engine.Command{cmd}}}}
}
