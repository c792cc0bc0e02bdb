package httplimit

import (
	"strconv"
	"strings"
	"testing"
)

// The memo of partition names never holds more than its bound, whatever
// the number of clients, keeps no key longer than maxNamedKey, and answers
// what it was told.
func TestNamesAreBounded(t *testing.T) {
	n := newNames()
	const clients = 20 * namesShards * namesPerShard
	for i := range clients {
		key := []byte("10.0." + strconv.Itoa(i))
		if p := n.add(key, []byte("p:"+string(key))); p != "p:"+string(key) {
			t.Fatalf("add(%s) = %q", key, p)
		}
		if p, ok := n.get(key); !ok || p != "p:"+string(key) {
			t.Fatalf("get(%s) = %q, %v just after put", key, p, ok)
		}
	}
	held := 0
	for i := range n.shards {
		if l := len(n.shards[i].m); l > namesPerShard {
			t.Fatalf("shard %d holds %d names, bound %d", i, l, namesPerShard)
		}
		held += len(n.shards[i].m)
	}
	if held < namesShards*namesPerShard/2 {
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
