package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/testclock"
	"github.com/sluicehq/sluice/store/memstore"
)

var sentinels = []error{
	engine.ErrInvalid, engine.ErrWrongType, engine.ErrOverflow, engine.ErrOperationConflict,
	engine.ErrCapacity, engine.ErrCorrupt, engine.ErrClosed, engine.ErrUnavailable,
}

func wrapsSentinel(err error) bool {
	for _, s := range sentinels {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}

// FuzzRequest decodes JSON into a Request, validates it and, if it is valid,
// runs it twice on a fresh memory store. Invalid requests must fail with
// ErrInvalid before reaching the store; valid ones must never be called
// invalid by the store, must answer every step they ran, and must replay
// the steps they recorded exactly.
func FuzzRequest(f *testing.F) {
	for _, seed := range []string{
		`{"steps":[{"partition":"ip:9f86d081","commands":[{"op":"win.hit","cost":1,"windows":[{"key":"s","kind":"fixed","limit":10,"windowMs":1000},{"key":"m","kind":"sliding","limit":100,"windowMs":60000}]}]}]}`,
		`{"operationId":"5f2b9c1e0a7d4e61","steps":[{"partition":"fence:ab12","commands":[{"op":"kv.get","key":"token"},{"op":"kv.set","key":"token","value":"used","mode":"nx","ttlMs":7776000000}]}]}`,
		`{"operationId":"op-1","mode":"all","steps":[{"partition":"login","commands":[{"op":"res.reserve","receipt":"r1","cost":1,"budgets":[{"key":"src","limit":20,"windowMs":900000},{"key":"acct","limit":5,"windowMs":900000,"refundable":true}]}]},{"partition":"login","commands":[{"op":"res.refund","key":"r1"},{"op":"res.refund","key":"r1"}]}]}`,
		`{"steps":[{"partition":"u","commands":[{"op":"kv.incr","key":"n","delta":9223372036854775807,"ttlMs":60000},{"op":"kv.incr","key":"n","delta":1,"ttlMs":60000}]}]}`,
		`{"operationId":"g","steps":[{"partition":"gates","commands":[{"op":"gate.acquire","key":"api","lease":"w1","limit":1,"ttlMs":30000},{"op":"gate.acquire","key":"api","lease":"w2","limit":1,"ttlMs":30000},{"op":"gate.renew","key":"api","lease":"w1","ttlMs":60000},{"op":"gate.release","key":"api","lease":"w1"}]}]}`,
		`{"mode":"sequential","steps":[{"partition":"p","commands":[{"op":"pace.penalize","key":"up","limit":5,"windowMs":1000,"delayMs":2000},{"op":"pace.take","key":"up","limit":5,"windowMs":1000,"cost":2,"maxWaitMs":5000},{"op":"pace.claim","key":"up","limit":5,"windowMs":1000,"refillPermille":250,"at":1767225602000,"cost":2,"maxWaitMs":5000}]}]}`,
		`{"steps":[{"partition":"p","commands":[{"op":"win.hit","cost":3,"windows":[{"key":"l","kind":"log","limit":3,"windowMs":500},{"key":"g","kind":"gcra","limit":1099511627776,"windowMs":10368000000}]},{"op":"kv.ttl","key":"l"},{"op":"kv.del","key":"g"},{"op":"kv.set","key":"v","value":"0","keepTtl":true,"ttlMs":1000},{"op":"kv.expire","key":"v","ttlMs":2000}]}]}`,
		`{"steps":[{"partition":"p","commands":[{"op":"win.hit","cost":9223372036854775807,"windows":[{"key":"w","kind":"fixed","limit":9223372036854775807,"windowMs":4611686018427387904}]}]}]}`,
		`{"operationId":"op-2","steps":[{"partition":"a","commands":[{"op":"kv.set","key":"k","value":"v","mode":"xx","ttlMs":1000}]},{"partition":"a","commands":[{"op":"kv.incr","key":"k","delta":-1,"ttlMs":1000}]}]}`,
		`{"operationId":"op-3","mode":"all","steps":[{"partition":"a","commands":[{"op":"win.hit","cost":1,"windows":[{"key":"w","kind":"gcra","limit":2,"windowMs":1000}]}]},{"partition":"a","commands":[{"op":"win.hit","cost":2,"windows":[{"key":"w","kind":"gcra","limit":2,"windowMs":1000}]}]},{"partition":"b","commands":[{"op":"kv.get","key":"w"}]}]}`,
		`{"steps":[]}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var req engine.Request
		if json.Unmarshal(data, &req) != nil {
			return
		}
		clock := testclock.At(t0)
		mem, err := memstore.New(memstore.Config{MaxKeys: 64, Shards: 1, Clock: clock})
		if err != nil {
			t.Fatal(err)
		}
		store := &countingStore{Store: mem}
		eng := engine.New(store)
		ctx := context.Background()

		if err := req.Validate(); err != nil {
			if !errors.Is(err, engine.ErrInvalid) {
				t.Fatalf("Validate = %v, not ErrInvalid", err)
			}
			if _, err := eng.Do(ctx, &req); !errors.Is(err, engine.ErrInvalid) {
				t.Fatalf("Do of an invalid request = %v", err)
			}
			if store.applies.Load() != 0 {
				t.Fatal("an invalid request reached the store")
			}
			return
		}
		for i := range req.Steps {
			if _, err := req.Steps[i].Hash(); err != nil {
				t.Fatalf("Hash of valid step %d: %v", i, err)
			}
		}

		first := checkRun(t, eng, &req)
		clock.Advance(time.Second)
		second := checkRun(t, eng, &req)
		if req.OperationID == "" {
			return
		}
		for i := range min(len(first.Steps), len(second.Steps)) {
			if !second.Steps[i].Replayed {
				continue
			}
			got, want := second.Steps[i], first.Steps[i]
			got.Replayed = false
			if want.Skipped || !reflect.DeepEqual(normalize(got), normalize(want)) {
				t.Fatalf("step %d replayed\n%+v\nbut first returned\n%+v", i, got, want)
			}
		}
	})
}

// checkRun runs a valid request and checks the invariants of its answer.
func checkRun(t *testing.T, eng *engine.Engine, req *engine.Request) *engine.Response {
	t.Helper()
	resp, err := eng.Do(context.Background(), req)
	if err != nil {
		if errors.Is(err, engine.ErrInvalid) {
			t.Fatalf("a valid request was refused as invalid: %v", err)
		}
		if errors.Is(err, engine.ErrOperationConflict) {
			t.Fatalf("a request conflicts with itself: %v", err)
		}
		if !wrapsSentinel(err) {
			t.Fatalf("error wraps no sentinel: %v", err)
		}
		if resp == nil || len(resp.Steps) >= len(req.Steps) {
			t.Fatalf("failed request answered %v steps of %d", resp, len(req.Steps))
		}
	} else if len(resp.Steps) != len(req.Steps) {
		t.Fatalf("%d step results for %d steps", len(resp.Steps), len(req.Steps))
	}
	denied := false
	for i, s := range resp.Steps {
		if s.Skipped != (denied && req.Mode != engine.All) {
			t.Fatalf("step %d skipped = %v after a denial = %v in mode %q", i, s.Skipped, denied, req.Mode)
		}
		denied = denied || s.Denied
		if s.Skipped {
			if len(s.Results) != 0 {
				t.Fatalf("skipped step %d has results", i)
			}
			continue
		}
		if len(s.Results) != len(req.Steps[i].Commands) {
			t.Fatalf("step %d: %d results for %d commands", i, len(s.Results), len(req.Steps[i].Commands))
		}
		anyDenied := false
		for j, r := range s.Results {
			anyDenied = anyDenied || !r.Allowed
			if r.Remaining < 0 || r.RetryAfterMs < 0 || r.TTLMs < 0 {
				t.Fatalf("step %d command %d: negative result %+v", i, j, r)
			}
			if r.Allowed && r.RetryAfterMs != 0 {
				t.Fatalf("step %d command %d: allowed with a retry-after: %+v", i, j, r)
			}
			for _, w := range r.Windows {
				if w.Remaining < 0 || w.RetryAfterMs < 0 || (r.Allowed && !w.Allowed) {
					t.Fatalf("step %d command %d: window result %+v of %+v", i, j, w, r)
				}
			}
		}
		if anyDenied != s.Denied {
			t.Fatalf("step %d: Denied = %v, results %+v", i, s.Denied, s.Results)
		}
	}
	return resp
}
