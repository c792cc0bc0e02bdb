package redistest_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redistest"
)

func TestSingle(t *testing.T) {
	s := redistest.Start(t)
	c := s.Client(t)
	ctx := t.Context()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	for param, want := range map[string]string{"save": "", "appendonly": "no"} {
		got, err := c.ConfigGet(ctx, param).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got[param] != want {
			t.Errorf("%s = %q, want %q", param, got[param], want)
		}
	}
	s.Stop()
	if s.Running() {
		t.Fatal("server still running after Stop")
	}
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("PING answered after Stop")
	}
	s.Stop() // idempotent
}

func TestPauseResume(t *testing.T) {
	s := redistest.Start(t)
	c := s.Client(t)
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 200e6)
	defer cancel()
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("a paused server answered PING")
	}
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	if err := c.Ping(t.Context()).Err(); err != nil {
		t.Fatalf("PING after Resume: %v", err)
	}
}

func TestCluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	c := cl.Client(t)
	ctx := t.Context()
	// Keys spread over every master: each master owns a third of the slots.
	owners := map[string]bool{}
	for i := range 64 {
		key := fmt.Sprintf("key-%d", i)
		if err := c.Set(ctx, key, i, 0).Err(); err != nil {
			t.Fatal(err)
		}
		slot, err := c.ClusterKeySlot(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		owners[cl.Masters[int(slot)*3/16384].Addr] = true
	}
	if len(owners) != 3 {
		t.Fatalf("keys landed on %d masters, want 3", len(owners))
	}
	for _, m := range cl.Masters {
		n, err := m.Client(t).DBSize(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			t.Errorf("master %s holds no key", m.Addr)
		}
	}
}

func TestReplicated(t *testing.T) {
	r := redistest.StartReplicated(t)
	ctx := t.Context()
	p, q := r.Primary.Client(t), r.Replica.Client(t)
	if err := p.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := p.Do(ctx, "wait", 1, 5000).Int(); err != nil || n != 1 {
		t.Fatalf("WAIT 1: %d replicas acknowledged, err %v", n, err)
	}
	if got, err := q.Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Fatalf("replica GET k = %q, %v; want v", got, err)
	}
	r.Primary.Stop()
	if err := r.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	if err := q.Set(ctx, "k2", "v", 0).Err(); err != nil {
		t.Fatalf("promoted replica refused a write: %v", err)
	}
}

// A TLS server answers a client with a certificate of its authority, and
// has no plain port.
func TestTLS(t *testing.T) {
	ca := redistest.NewCA(t, "redistest CA")
	s := redistest.StartTLS(t, ca, "")
	c := s.Client(t)
	ctx := t.Context()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	conf, err := c.ConfigGet(ctx, "port").Result()
	if err != nil {
		t.Fatal(err)
	}
	if conf["port"] != "0" {
		t.Errorf("plain port %q, want 0 (off)", conf["port"])
	}
	plain := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, ContextTimeoutEnabled: true})
	defer plain.Close()
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := plain.Ping(pctx).Err(); err == nil {
		t.Error("a plain-text client was answered by the TLS port")
	}
}
