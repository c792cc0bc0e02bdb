package httplimit

import (
	"strconv"
	"strings"
	"sync"
	"testing"
)

// The memo of partition names answers what it was told, keeps a name in
// use through a flood of new clients, holds at most its bound whatever the
// number of clients, and keeps no key longer than maxNamedKey.
func TestNames(t *testing.T) {
	n := newNames()
	key := func(i int) []byte { return []byte("10.0." + strconv.Itoa(i)) }
	name := func(k []byte) []byte { return []byte("p:" + string(k)) }
	add := func(k []byte) string {
		if p, _, ok := n.get(k); ok {
			t.Fatalf("get(%s) = %q before it was added", k, p)
		}
		_, h, _ := n.get(k)
		return n.add(k, h, name(k))
	}
	hot := []byte("192.0.2.1")
	add(hot)

	const slots = namesShards * namesSets * namesWays
	const clients = 40 * slots
	for i := range clients {
		k := key(i)
		if p := add(k); p != string(name(k)) {
			t.Fatalf("add(%s) = %q", k, p)
		}
		if p, _, ok := n.get(k); !ok || p != string(name(k)) {
			t.Fatalf("get(%s) = %q, %v just after add", k, p, ok)
		}
		if i%64 == 0 {
			if p, _, ok := n.get(hot); !ok || p != string(name(hot)) {
				t.Fatalf("after %d new clients, the client in use is forgotten: %q, %v", i, p, ok)
			}
		}
	}
	held := 0
	for i := range n.shards {
		for j := range n.shards[i].sets {
			for _, both := range n.shards[i].sets[j].both {
				if both != "" {
					held++
				}
			}
		}
	}
	if held < slots*9/10 {
		t.Fatalf("%d names held after %d clients: the memo hardly remembers", held, clients)
	}
	// The most recent clients are mostly remembered.
	recent := 0
	for i := clients - slots/4; i < clients; i++ {
		if _, _, ok := n.get(key(i)); ok {
			recent++
		}
	}
	if recent < slots/4/2 {
		t.Fatalf("%d of the last %d clients remembered", recent, slots/4)
	}

	// Adding a key again replaces its name rather than taking a second slot.
	again := key(clients - 1)
	_, h, _ := n.get(again)
	n.add(again, h, []byte("p:other"))
	if p, _, _ := n.get(again); p != "p:other" {
		t.Fatalf("get after a second add = %q", p)
	}
	_, s, tag := n.set(h)
	copies := 0
	for w := range namesWays {
		if s.tags[w] == tag && strings.HasPrefix(s.both[w], string(again)+"p:") {
			copies++
		}
	}
	if copies != 1 {
		t.Fatalf("%d slots hold %s", copies, again)
	}

	long := []byte(strings.Repeat("k", maxNamedKey+1))
	_, h, _ = n.get(long)
	if p := n.add(long, h, []byte("p:long")); p != "p:long" {
		t.Fatalf("add of a long key = %q", p)
	}
	if _, _, ok := n.get(long); ok {
		t.Fatal("a key over maxNamedKey was remembered")
	}
}

// Concurrent lookups and insertions of overlapping keys never answer one
// key with another's name.
func TestNamesConcurrent(t *testing.T) {
	n := newNames()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 20_000 {
				k := []byte("10.1." + strconv.Itoa((i*(g+1))%6000))
				want := "p:" + string(k)
				p, h, ok := n.get(k)
				if !ok {
					p = n.add(k, h, []byte(want))
				}
				if p != want {
					t.Errorf("name of %s = %q, want %q", k, p, want)
					return
				}
			}
		})
	}
	wg.Wait()
}
