package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/server"
	"github.com/sluicehq/sluice/store/diskstore"
	"github.com/sluicehq/sluice/wire"
)

// events is one ordered log of what the store, the file system and the
// handler did: "apply", "defer" (a batch run with ApplyDeferred), "fsync"
// (of the write-ahead log), "synced" (a Sync returned) and "answer" (the
// handler wrote its status).
type events struct {
	mu  sync.Mutex
	log []string
}

func (e *events) add(ev string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.log = append(e.log, ev)
}

func (e *events) take() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	l := e.log
	e.log = nil
	return l
}

// orderStore forwards to a DeferredSyncStore and logs its calls.
type orderStore struct {
	engine.DeferredSyncStore
	ev      *events
	syncErr error // when set, Sync fails with it
}

func (s *orderStore) Apply(ctx context.Context, b *engine.Batch, out *engine.StepResult) error {
	err := s.DeferredSyncStore.Apply(ctx, b, out)
	s.ev.add("apply")
	return err
}

func (s *orderStore) ApplyDeferred(ctx context.Context, b *engine.Batch, out *engine.StepResult) error {
	err := s.DeferredSyncStore.ApplyDeferred(ctx, b, out)
	s.ev.add("defer")
	return err
}

func (s *orderStore) Sync(ctx context.Context) error {
	if s.syncErr != nil {
		return s.syncErr
	}
	err := s.DeferredSyncStore.Sync(ctx)
	s.ev.add("synced")
	return err
}

// answerRecorder logs the moment the handler writes its status.
type answerRecorder struct {
	*httptest.ResponseRecorder
	ev *events
}

func (r *answerRecorder) WriteHeader(code int) {
	r.ev.add("answer")
	r.ResponseRecorder.WriteHeader(code)
}

type durableHarness struct {
	t    *testing.T
	srv  *server.Server
	ev   *events
	st   *orderStore
	hold *fsyncHold
}

// fsyncHold holds the write-ahead log's fsyncs while held, until release.
type fsyncHold struct {
	mu      sync.Mutex
	release chan struct{} // nil when not held
}

func (f *fsyncHold) hold() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.release = make(chan struct{})
}

func (f *fsyncHold) unhold() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.release != nil {
		close(f.release)
		f.release = nil
	}
}

func (f *fsyncHold) wait() {
	f.mu.Lock()
	c := f.release
	f.mu.Unlock()
	if c != nil {
		<-c
	}
}

// newDurableHarness runs a server with fair admission over the embedded
// store under its default policy (every commit waits for an fsync), on an
// in-memory file system whose write-ahead log fsyncs are logged as they
// complete, and can be held.
func newDurableHarness(t *testing.T) *durableHarness {
	t.Helper()
	ev, hold := &events{}, &fsyncHold{}
	fs := errorfs.Wrap(vfs.NewMem(), errorfs.InjectorFunc(func(op errorfs.Op) error {
		switch op.Kind {
		case errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo:
			if strings.HasSuffix(op.Path, ".log") {
				hold.wait()
				ev.add("fsync")
			}
		}
		return nil
	}))
	dcfg := diskstore.DefaultConfig()
	dcfg.Dir, dcfg.FS = "db", fs
	ds, err := diskstore.Open(dcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		hold.unhold()
		ds.Close()
	})
	h := newOrderHarness(t, &orderStore{DeferredSyncStore: ds, ev: ev})
	h.hold = hold
	return h
}

func newOrderHarness(t *testing.T, st *orderStore) *durableHarness {
	eng := engine.New(st)
	acfg := admission.DefaultConfig()
	// Chunks large enough that no lease falls within the RPCs observed.
	acfg.Total, acfg.Chunk = 10_000_000, 10_000
	// No quota leases: every fair RPC's charge reaches the store, where
	// these tests watch it deferred and synced.
	acfg.QuotaChunk = 0
	acfg.Families = []string{admission.DefaultFamily, "open", "tiny"}
	acfg.Split = "tiny=100000"
	acfg.Fair = []string{admission.DefaultFamily, "tiny"}
	// tiny's principal may spend one command a day.
	acfg.FamilyShares = map[string]admission.Shares{"tiny": {Principal: 100_000}}
	cfg := server.DefaultConfig()
	cfg.Secrets, cfg.OperatorToken = []string{admSecret}, admToken
	cfg.Admission = admission.New(eng, acfg)
	return &durableHarness{t: t, srv: server.New(eng, cfg), ev: st.ev, st: st}
}

// send posts body, signed, to path and returns the answer.
func (h *durableHarness) send(path string, body []byte) *httptest.ResponseRecorder {
	h.t.Helper()
	req := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
	ts := time.Now().Unix()
	req.Header.Set(wire.HeaderTimestamp, strconv.FormatInt(ts, 10))
	req.Header.Set(wire.HeaderSignature, wire.Sign([]byte(admSecret), ts, http.MethodPost, path, body))
	rec := &answerRecorder{ResponseRecorder: httptest.NewRecorder(), ev: h.ev}
	h.srv.ServeHTTP(rec, req)
	return rec.ResponseRecorder
}

// rpc sends r to /v1/rpc under a fresh operation id.
func (h *durableHarness) rpc(r wire.Request) *httptest.ResponseRecorder {
	h.t.Helper()
	r.OperationID = engine.NewOperationID()
	body, err := json.Marshal(r)
	if err != nil {
		h.t.Fatal(err)
	}
	return h.send(wire.PathRPC, body)
}

// held sends with the log's fsync held, takes what ran before the answer,
// releases the fsync and returns the answer and what followed. It runs in
// a synctest bubble.
func (h *durableHarness) held(send func() *httptest.ResponseRecorder) (rec *httptest.ResponseRecorder, before, after []string) {
	h.ev.take()
	h.hold.hold()
	done := make(chan *httptest.ResponseRecorder, 1)
	go func() { done <- send() }()
	synctest.Wait()
	before = h.ev.take()
	h.hold.unhold()
	rec = <-done
	synctest.Wait()
	return rec, before, h.ev.take()
}

func count(log []string, ev string) int {
	n := 0
	for _, e := range log {
		if e == ev {
			n++
		}
	}
	return n
}

// TestFairRPCWaitsForOneFsync holds the write-ahead log's fsync during
// each of a series of fair RPCs to a server on the embedded store: all
// three of its batches (the source's and the principal's reservations, the
// subject request) run while the first fsync is still held, so the RPC
// waits for fsyncs once, at its end, where each batch used to wait for its
// own in turn. No answer, a grant or an engine error, comes before the
// fsync of everything its RPC wrote; a fairness refusal, which grants
// nothing, waits for none; an RPC that is not fair keeps its synced batch.
func TestFairRPCWaitsForOneFsync(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newDurableHarness(t)
		// Lease each family's chunk, and read its stop state.
		for _, fam := range []string{admission.DefaultFamily, "open", "tiny"} {
			if rec := h.rpc(incr(fam, "s0", "", "k")); rec.Code != http.StatusOK {
				t.Fatalf("first rpc of %s: %d %s", fam, rec.Code, rec.Body)
			}
		}
		held := func(what string, r wire.Request) (*httptest.ResponseRecorder, []string, []string) {
			return h.held(func() *httptest.ResponseRecorder { return h.rpc(r) })
		}
		const n = 10
		fsyncs := 0
		for i := range n {
			what := fmt.Sprint("fair rpc ", i)
			rec, before, after := held(what, incr(admission.DefaultFamily, fmt.Sprint("s", i%3), fmt.Sprint("p", i%4), "k"))
			if rec.Code != http.StatusOK {
				t.Fatalf("%s: %d %s", what, rec.Code, rec.Body)
			}
			if !slices.Equal(before, []string{"defer", "defer", "defer"}) {
				t.Fatalf("%s: %q ran while the first fsync was held, want its three batches deferred and no answer", what, before)
			}
			if !slices.Contains(after, "fsync") || !slices.Contains(after, "synced") || after[len(after)-1] != "answer" ||
				slices.Index(after, "synced") > slices.Index(after, "answer") {
				t.Fatalf("%s: after the release %q, want an fsync and a returned Sync, then the answer", what, after)
			}
			fsyncs += count(after, "fsync")
		}
		// The fsync held covers the first batch; the other two share the
		// next at most (Pebble syncs what was written while it waited).
		if fsyncs > 2*n {
			t.Errorf("%d fair RPCs waited for %d fsyncs", n, fsyncs)
		}

		// An engine error follows the fsync of the charges just as a grant.
		hit := wire.Request{Family: admission.DefaultFamily, Source: "s0", Principal: "p0",
			Steps: []engine.Step{{Partition: "p", Commands: []engine.Command{engine.Hit(1, engine.Window{Key: "w", Kind: algo.KindFixed, Limit: 10, WindowMs: 60_000})}}}}
		if rec := h.rpc(hit); rec.Code != http.StatusOK {
			t.Fatalf("hit: %d %s", rec.Code, rec.Body)
		}
		rec, before, after := held("engine error", incr(admission.DefaultFamily, "s0", "p0", "w"))
		if code(t, rec) != wire.CodeWrongType || slices.Contains(before, "answer") ||
			!slices.Contains(after, "synced") || slices.Index(after, "synced") > slices.Index(after, "answer") {
			t.Fatalf("engine error: %d %s; before the release %q, after %q", rec.Code, rec.Body, before, after)
		}

		// A fairness refusal after the source was charged and refunded
		// (tiny's principal has a share of one command) answers without
		// waiting for any fsync.
		two := incr("tiny", "s1", "alice", "k")
		two.Steps[0].Commands = append(two.Steps[0].Commands, engine.Incr("k2", 1, 60_000))
		rec, before, _ = held("refusal", two)
		if code(t, rec) != wire.CodeLimited || !slices.Equal(before, []string{"defer", "defer", "answer"}) {
			t.Fatalf("refusal: %d %s; %q before the release, want the charge and the refund deferred, then the answer", rec.Code, rec.Body, before)
		}

		// An RPC of a family that is not fair keeps its synced batch: it
		// waits for its own fsync, and no Sync follows.
		rec, before, after = held("not fair", incr("open", "", "", "k"))
		if rec.Code != http.StatusOK || len(before) != 0 || !slices.Equal(after, []string{"fsync", "apply", "answer"}) {
			t.Fatalf("not fair: %d %s; %q before the release, %q after", rec.Code, rec.Body, before, after)
		}
	})
}

// TestFailedSyncAnswers503 makes the Sync that ends a fair RPC fail: the
// answer is 503 guard_unavailable, never the grant the subject request
// computed, while an RPC that is not fair, which needs no Sync, is served.
func TestFailedSyncAnswers503(t *testing.T) {
	h := newDurableHarness(t)
	if rec := h.rpc(incr(admission.DefaultFamily, "s0", "p0", "k")); rec.Code != http.StatusOK {
		t.Fatalf("before the failure: %d %s", rec.Code, rec.Body)
	}
	h.st.syncErr = fmt.Errorf("fsync: %w", engine.ErrUnavailable)
	for _, r := range []wire.Request{incr(admission.DefaultFamily, "s0", "p0", "k"), get(admission.DefaultFamily, "k")} {
		rec := h.rpc(r)
		if c := code(t, rec); c != wire.CodeUnavailable || rec.Code != http.StatusServiceUnavailable {
			t.Fatalf("fair rpc with a failing Sync: %d %s", rec.Code, rec.Body)
		}
	}
	if rec := h.rpc(incr("open", "", "", "k")); rec.Code != http.StatusOK {
		t.Fatalf("rpc that is not fair: %d %s", rec.Code, rec.Body)
	}

	// In an envelope on the embedded store every request that reaches the
	// engine waits for the envelope's one fsync, fair or not; a request
	// refused before it keeps its own answer.
	bad := get(admission.DefaultFamily, "k")
	bad.Steps[0].Partition = ""
	rec := h.send(wire.PathRPCs, envelopeBody(t, incr(admission.DefaultFamily, "s0", "p0", "k"), incr("open", "", "", "k"), bad))
	var answers wire.EnvelopeResponse
	if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &answers) != nil || len(answers.Answers) != 3 {
		t.Fatalf("envelope: %d %s", rec.Code, rec.Body)
	}
	for i, what := range []string{"fair request", "request that is not fair"} {
		if a := answers.Answers[i]; a.Status != http.StatusServiceUnavailable || a.Problem == nil || a.Problem.Code != wire.CodeUnavailable || a.Response != nil {
			t.Errorf("%s of the envelope: %+v, want 503 guard_unavailable", what, a)
		}
	}
	if a := answers.Answers[2]; a.Status != http.StatusBadRequest || a.Problem == nil || a.Problem.Code != wire.CodeInvalid {
		t.Errorf("invalid request of the envelope: %+v, want 400 invalid", a)
	}
}

// TestEnvelopeWaitsForOneFsync holds the write-ahead log's fsync while an
// envelope of requests, fair and not, runs on the embedded store: every
// batch runs deferred while the fsync is held, and the envelope answers
// once, after one Sync.
func TestEnvelopeWaitsForOneFsync(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newDurableHarness(t)
		for _, fam := range []string{admission.DefaultFamily, "open"} {
			if rec := h.rpc(incr(fam, "s0", "", "k")); rec.Code != http.StatusOK {
				t.Fatalf("first rpc of %s: %d %s", fam, rec.Code, rec.Body)
			}
		}
		body := envelopeBody(t, incr("open", "", "", "a"), incr("open", "", "", "b"), incr(admission.DefaultFamily, "s1", "p1", "c"), incr("open", "", "", "a"))
		rec, before, after := h.held(func() *httptest.ResponseRecorder { return h.send(wire.PathRPCs, body) })

		// Three requests that are not fair, one batch each; a fair one,
		// with its two reservations.
		if want := slices.Repeat([]string{"defer"}, 6); !slices.Equal(before, want) {
			t.Fatalf("%q ran while the fsync was held, want %q and no answer", before, want)
		}
		if count(after, "synced") != 1 || count(after, "answer") != 1 || after[len(after)-1] != "answer" ||
			slices.Index(after, "synced") > slices.Index(after, "answer") || slices.Contains(after, "apply") {
			t.Fatalf("after the release %q, want an fsync and one returned Sync, then the answer", after)
		}
		var answers wire.EnvelopeResponse
		if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &answers) != nil || len(answers.Answers) != 4 {
			t.Fatalf("envelope: %d %s", rec.Code, rec.Body)
		}
		for i, want := range []int64{1, 1, 1, 2} {
			a := answers.Answers[i]
			if a.Status != http.StatusOK || a.Response == nil || a.Response.Steps[0].Results[0].Int != want {
				t.Errorf("answer %d: %+v, want %d", i, a, want)
			}
		}
	})
}
