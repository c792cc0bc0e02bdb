package httplimit

import (
	"strconv"
	"strings"
	"testing"
)

// The memo of partition names answers what it was told, keeps a name in
// use through a flood of new clients, holds at most its bound whatever the
// number of clients, and keeps no key longer than maxNamedKey.
func TestNames(t *testing.T) {
	n := newNames()
	key := func(i int) []byte { return []byte("10.0." + strconv.Itoa(i)) }
	name := func(k []byte) []byte { return []byte("p:" + string(k)) }
	hot := []byte("192.0.2.1")
	n.add(hot, name(hot))

	const clients = 40 * namesShards * namesPerGen
	for i := range clients {
		k := key(i)
		if p := n.add(k, name(k)); p != string(name(k)) {
			t.Fatalf("add(%s) = %q", k, p)
		}
		if p, ok := n.get(k); !ok || p != string(name(k)) {
			t.Fatalf("get(%s) = %q, %v just after add", k, p, ok)
		}
		if i%64 == 0 {
			if p, ok := n.get(hot); !ok || p != string(name(hot)) {
				t.Fatalf("after %d new clients, the client in use is forgotten: %q, %v", i, p, ok)
			}
		}
	}
	held := 0
	for i := range n.shards {
		sh := &n.shards[i]
		if l := len(sh.cur) + len(sh.old); l > 2*namesPerGen {
			t.Fatalf("shard %d holds %d names, bound %d", i, l, 2*namesPerGen)
		}
		held += len(sh.cur) + len(sh.old)
	}
	if held < namesShards*namesPerGen {
		t.Fatalf("%d names held after %d clients: the memo hardly remembers", held, clients)
	}

	long := []byte(strings.Repeat("k", maxNamedKey+1))
	if p := n.add(long, []byte("p:long")); p != "p:long" {
		t.Fatalf("add of a long key = %q", p)
	}
	if _, ok := n.get(long); ok {
		t.Fatal("a key over maxNamedKey was remembered")
	}
}
