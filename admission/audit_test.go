package admission

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/wire"
)

// seqs returns the sequence numbers of a page's records.
func seqs(p AuditPage) []int64 {
	out := make([]int64, len(p.Records))
	for i, r := range p.Records {
		out[i] = r.Seq
	}
	return out
}

func resetN(t *testing.T, a *Admitter, n int) {
	t.Helper()
	for i := range n {
		if _, err := a.ResetFairness(context.Background(), fmt.Sprint("actor", i), ResetRequest{Family: DefaultFamily, Principal: fmt.Sprint("p", i)}); err != nil {
			t.Fatal(err)
		}
	}
}

func TestAuditListsNewestFirstInPages(t *testing.T) {
	fx := newFixture(t)
	ctx := context.Background()
	a := fx.admitter(fairConfig(switches{}))
	if p, err := a.Audit(ctx, 0, 0); err != nil || len(p.Records) != 0 || p.Next != 0 {
		t.Fatalf("empty trail: %+v, %v", p, err)
	}
	resetN(t, a, 11)
	all, err := a.Audit(ctx, 0, 0)
	if err != nil || !slices.Equal(seqs(all), []int64{11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1}) || all.Next != 0 {
		t.Fatalf("whole trail: %v next %d, %v", seqs(all), all.Next, err)
	}
	if r := all.Records[0]; r.Actor != "actor10" || r.Reset.Principal != "p10" || r.Action != "fairness.reset" || !r.At.Equal(epoch) {
		t.Errorf("newest record %+v", r)
	}
	// Pages of 4 follow the cursor to the end.
	var got []int64
	var before int64
	for pages := 0; ; pages++ {
		p, err := a.Audit(ctx, before, 4)
		if err != nil || pages > 3 {
			t.Fatalf("page %d: %v (%d pages)", pages, err, pages)
		}
		got = append(got, seqs(p)...)
		if p.Next == 0 {
			break
		}
		before = p.Next
	}
	if !slices.Equal(got, seqs(all)) {
		t.Errorf("paged: %v, want %v", got, seqs(all))
	}
	for _, tc := range []struct {
		before int64
		limit  int
	}{{0, -1}, {0, MaxAuditLimit + 1}, {-1, 10}} {
		if _, err := a.Audit(ctx, tc.before, tc.limit); code(err) != wire.CodeInvalid {
			t.Errorf("Audit(%d, %d): %v, want invalid", tc.before, tc.limit, err)
		}
	}
	if p, err := a.Audit(ctx, 0, MaxAuditLimit); err != nil || len(p.Records) != 11 {
		t.Errorf("the largest page: %d records, %v", len(p.Records), err)
	}
}

// TestAuditRecordComesFirst: a reset whose record cannot be written
// resets nothing; one that fails after its record leaves the record of the
// attempt, and later records are listed across the gap the first left.
func TestAuditRecordComesFirst(t *testing.T) {
	fx := newFixture(t)
	ctx := context.Background()
	a := fx.admitter(fairConfig(switches{}))
	exhaustPrincipal(t, a, "alice")
	resetN(t, a, 1)
	recordWrite := func(partition string, cmds []engine.Command) bool {
		return partition == engine.ReservedPartition(auditPartition) && cmds[0].Op == engine.OpSet
	}
	fx.probe.set(nil, recordWrite)
	if _, err := a.ResetFairness(ctx, "ops", ResetRequest{Family: DefaultFamily, Principal: "alice"}); code(err) != wire.CodeUnavailable {
		t.Fatalf("reset without its record: %v", err)
	}
	fx.probe.set(nil, nil)
	if err := a.Admit(ctx, fairRPC("s9", "alice", nil)); code(err) != wire.CodeLimited {
		t.Fatalf("an unrecorded reset took effect: %v", err)
	}
	resetN(t, a, 1)
	p, err := a.Audit(ctx, 0, 0)
	if err != nil || !slices.Equal(seqs(p), []int64{3, 1}) {
		t.Fatalf("trail across the gap of the failed reset: %v, %v", seqs(p), err)
	}
}

// TestAuditRecordsExpire: records last the longest record lifetime, 120
// days, and numbering goes on across the expiry.
func TestAuditRecordsExpire(t *testing.T) {
	fx := newFixture(t)
	ctx := context.Background()
	a := fx.admitter(fairConfig(switches{}))
	resetN(t, a, 2)
	fx.clock.Advance(60 * 24 * time.Hour)
	resetN(t, a, 1)
	fx.clock.Advance(61 * 24 * time.Hour) // the first two are 121 days old
	p, err := a.Audit(ctx, 0, 0)
	if err != nil || !slices.Equal(seqs(p), []int64{3}) {
		t.Fatalf("after 121 days: %v, %v", seqs(p), err)
	}
	rec, err := a.ResetFairness(ctx, "ops", ResetRequest{Family: DefaultFamily, Principal: "x"})
	if err != nil || rec.Seq != 4 {
		t.Fatalf("next record %+v, %v: want sequence 4", rec, err)
	}
	if !strings.HasPrefix(fmt.Sprint(p.Records[0].At), "2026-03-02") {
		t.Errorf("record 3 written at %v", p.Records[0].At)
	}
}
