package algo

import (
	"testing"

	"pgregory.net/rapid"
)

// TestPeekMatchesDenial checks Peek against what a denied hit reports for
// the same state: a denial charges nothing, so both describe the window as
// it stands. Peek must also agree with the remaining of a fresh window.
func TestPeekMatchesDenial(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		kind := rapid.SampledFrom([]Kind{KindFixed, KindSliding, KindLog, KindGCRA}).Draw(t, "kind")
		l := Limit{Kind: kind, Limit: rapid.Int64Range(1, 50).Draw(t, "limit"), Window: rapid.Int64Range(1, 5_000).Draw(t, "window")}
		now := rapid.Int64Range(0, 1_000_000).Draw(t, "start")
		var s WindowState
		if p := Peek(l, s, now); p.Remaining != l.Limit || p.ResetAt != now {
			t.Fatalf("empty window: Peek = %+v, want remaining %d reset %d", p, l.Limit, now)
		}
		for range rapid.IntRange(1, 60).Draw(t, "hits") {
			now += rapid.Int64Range(0, l.Window).Draw(t, "gap")
			cost := rapid.Int64Range(1, l.Limit).Draw(t, "cost")
			next, d := Hit(l, s, now, cost)
			p := Peek(l, s, now)
			if !d.Allowed {
				if p.Remaining != d.Remaining {
					t.Fatalf("at %d: Peek remaining %d, denied hit reports %d", now, p.Remaining, d.Remaining)
				}
				if p.Remaining >= cost {
					t.Fatalf("at %d: Peek says %d remain, yet a hit of %d was denied", now, p.Remaining, cost)
				}
				continue
			}
			if p.Remaining < cost {
				t.Fatalf("at %d: Peek says %d remain, yet a hit of %d was admitted", now, p.Remaining, cost)
			}
			if kind != KindSliding && p.Remaining-cost != d.Remaining {
				// Integer kinds charge exactly cost.
				t.Fatalf("at %d: Peek remaining %d − cost %d ≠ remaining after hit %d", now, p.Remaining, cost, d.Remaining)
			}
			if p.ResetAt > d.ResetAt {
				t.Fatalf("at %d: uncharged window resets at %d, after the charged one (%d)", now, p.ResetAt, d.ResetAt)
			}
			s = next
		}
	})
}
