package algo_test

import (
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/sluicehq/sluice/algo"
)

func TestGateAcquire(t *testing.T) {
	const limit, ttl = 2, 1000
	var g algo.GateState
	acquire := func(now int64, id string, want algo.Decision) {
		t.Helper()
		before := slices.Clone(g.Leases)
		next, d := g.Acquire(now, id, limit, ttl)
		if d != want {
			t.Errorf("Acquire(%d, %q) = %+v, want %+v", now, id, d, want)
		}
		if !d.Allowed && !slices.Equal(next.Leases, before) {
			t.Errorf("denied Acquire(%d, %q) changed the leases to %v", now, id, next.Leases)
		}
		g = next
	}
	acquire(0, "a", algo.Decision{Allowed: true, Remaining: 1, ResetAt: 1000})
	acquire(100, "b", algo.Decision{Allowed: true, Remaining: 0, ResetAt: 1100})
	// Full: the earliest lease ("a") expires at 1000.
	acquire(200, "c", algo.Decision{RetryAfter: 800, ResetAt: 1100})
	// Acquiring a held lease again renews it and takes no second slot.
	acquire(300, "a", algo.Decision{Allowed: true, Remaining: 0, ResetAt: 1300})
	if n := g.Live(300); n != 2 {
		t.Errorf("Live = %d after a repeated acquire, want 2", n)
	}
	acquire(1099, "c", algo.Decision{RetryAfter: 1, ResetAt: 1300})
	// "b" expires at 1100 and frees its slot without a release.
	acquire(1100, "c", algo.Decision{Allowed: true, Remaining: 0, ResetAt: 2100})
	if got := g.Live(1100); got != 2 {
		t.Errorf("Live = %d, want 2", got)
	}
	want := []algo.Lease{{ID: "a", ExpireAt: 1300}, {ID: "c", ExpireAt: 2100}}
	if !slices.Equal(g.Leases, want) {
		t.Errorf("leases = %v, want %v (the expired one dropped)", g.Leases, want)
	}
	if got := g.ExpireAt(); got != 2100 {
		t.Errorf("ExpireAt = %d, want 2100", got)
	}
}

func TestGateRenew(t *testing.T) {
	g, _ := algo.GateState{}.Acquire(0, "a", 1, 1000)
	// Renewing with a shorter TTL never shortens the lease.
	g, ok := g.Renew(100, "a", 10)
	if !ok || g.Leases[0].ExpireAt != 1000 {
		t.Errorf("Renew(short) = %v, %v; want the lease kept until 1000", g.Leases, ok)
	}
	g, ok = g.Renew(500, "a", 1000)
	if !ok || g.Leases[0].ExpireAt != 1500 {
		t.Errorf("Renew = %v, %v; want the lease extended to 1500", g.Leases, ok)
	}
	// A lease that has expired cannot be renewed; nothing changes.
	before := slices.Clone(g.Leases)
	g2, ok := g.Renew(1500, "a", 1000)
	if ok || !slices.Equal(g2.Leases, before) {
		t.Errorf("Renew(expired) = %v, %v; want false and no change", g2.Leases, ok)
	}
	if _, ok := g.Renew(100, "b", 1000); ok {
		t.Error("Renew of a lease never acquired reported true")
	}
}

func TestGateRelease(t *testing.T) {
	g, _ := algo.GateState{}.Acquire(0, "a", 2, 1000)
	g, _ = g.Acquire(0, "b", 2, 50)
	g, ok := g.Release(10, "a")
	if !ok || !slices.Equal(g.Leases, []algo.Lease{{ID: "b", ExpireAt: 50}}) {
		t.Errorf("Release(a) = %v, %v", g.Leases, ok)
	}
	// Releasing again is harmless and reports the lease was not held.
	g, ok = g.Release(20, "a")
	if ok || g.Live(20) != 1 {
		t.Errorf("second Release(a) = %v, %v; want false and one live lease", g.Leases, ok)
	}
	// Releasing anything drops the expired leases.
	g, ok = g.Release(60, "zzz")
	if ok || len(g.Leases) != 0 {
		t.Errorf("Release after expiry = %v, %v; want no leases", g.Leases, ok)
	}
}

func TestGateDoesNotAlias(t *testing.T) {
	backing := make([]algo.Lease, 2, 8)
	backing[0], backing[1] = algo.Lease{ID: "a", ExpireAt: 100}, algo.Lease{ID: "b", ExpireAt: 200}
	want := slices.Clone(backing[:cap(backing)])
	g := algo.GateState{Leases: backing}
	ops := []func() algo.GateState{
		func() algo.GateState { n, _ := g.Acquire(10, "a", 3, 1000); return n },
		func() algo.GateState { n, _ := g.Acquire(10, "c", 3, 1000); return n },
		func() algo.GateState { n, _ := g.Renew(10, "b", 1000); return n },
		func() algo.GateState { n, _ := g.Release(10, "a"); return n },
	}
	for i, op := range ops {
		next := op()
		for j := range next.Leases {
			next.Leases[j].ID = "overwritten"
		}
		if !slices.Equal(backing[:cap(backing)], want) {
			t.Fatalf("op %d wrote through its input: %v", i, backing[:cap(backing)])
		}
	}
}

// TestGateMatchesModel runs random acquire, renew and release calls at
// non-decreasing instants against a map of live leases.
func TestGateMatchesModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		limit := rapid.Int64Range(1, 4).Draw(t, "limit")
		ids := []string{"a", "b", "c", "d", "e", "f"}
		var g algo.GateState
		model := map[string]int64{} // id → expiry
		now := int64(0)
		for range rapid.IntRange(1, 60).Draw(t, "ops") {
			now += rapid.Int64Range(0, 50).Draw(t, "gap")
			id := rapid.SampledFrom(ids).Draw(t, "id")
			ttl := rapid.Int64Range(1, 200).Draw(t, "ttl")
			for k, exp := range model {
				if exp <= now {
					delete(model, k)
				}
			}
			_, held := model[id]
			switch rapid.IntRange(0, 2).Draw(t, "op") {
			case 0:
				var d algo.Decision
				g, d = g.Acquire(now, id, limit, ttl)
				want := held || int64(len(model)) < limit
				if d.Allowed != want {
					t.Fatalf("Acquire(%d, %q) allowed %v, model %v (%v)", now, id, d.Allowed, want, model)
				}
				if d.Allowed {
					model[id] = max(model[id], now+ttl)
				} else {
					earliest := now + 1<<40
					for _, exp := range model {
						earliest = min(earliest, exp)
					}
					if d.RetryAfter != earliest-now {
						t.Fatalf("retry-after %d, want %d", d.RetryAfter, earliest-now)
					}
				}
			case 1:
				var ok bool
				g, ok = g.Renew(now, id, ttl)
				if ok != held {
					t.Fatalf("Renew(%d, %q) = %v, model holds it: %v", now, id, ok, held)
				}
				if held {
					model[id] = max(model[id], now+ttl)
				}
			case 2:
				var ok bool
				g, ok = g.Release(now, id)
				if ok != held {
					t.Fatalf("Release(%d, %q) = %v, model holds it: %v", now, id, ok, held)
				}
				delete(model, id)
			}
			if live := g.Live(now); live != int64(len(model)) || live > limit {
				t.Fatalf("Live = %d, model %d, limit %d", live, len(model), limit)
			}
			for _, l := range g.Leases {
				if exp, ok := model[l.ID]; l.ExpireAt > now && (!ok || exp != l.ExpireAt) {
					t.Fatalf("lease %+v, model %v", l, model)
				}
			}
		}
	})
}
