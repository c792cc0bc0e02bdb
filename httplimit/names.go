package httplimit

import (
	"hash/maphash"
	"sync"
)

// names remembers the partition names of the client keys a Limiter saw
// recently, so that every request of a client after its first skips the
// keyed hash (two SHA-256 blocks, the largest share of a check's own work)
// and the allocation of the name. A name depends only on the prefix, the
// pepper and the key, so a remembered name is exactly the one the hash
// would give: the store sees the same partitions with or without it.
//
// It is bounded: at most namesShards·namesPerShard entries, each holding a
// key of at most maxNamedKey bytes. A full shard forgets an arbitrary entry
// to make room, so a flood of new clients costs each of them an insertion
// and never grows the memory. It holds raw client keys, as the request
// does, in this process's memory only; they never reach the store.
type names struct {
	seed   maphash.Seed
	shards [namesShards]namesShard
}

// The bounds of names: 4,096 keys of at most 128 bytes, about half a
// megabyte when full of the longest keys and names.
const (
	namesShards   = 16
	namesPerShard = 256
	maxNamedKey   = 128
)

type namesShard struct {
	mu sync.Mutex
	m  map[string]string // client key → partition name
	_  [48]byte          // keep neighbouring shards' locks off one cache line
}

func newNames() *names {
	n := &names{seed: maphash.MakeSeed()}
	for i := range n.shards {
		n.shards[i].m = make(map[string]string)
	}
	return n
}

func (n *names) shard(key []byte) *namesShard {
	return &n.shards[maphash.Bytes(n.seed, key)%namesShards]
}

// get returns the partition name remembered for key.
func (n *names) get(key []byte) (string, bool) {
	if len(key) > maxNamedKey {
		return "", false
	}
	sh := n.shard(key)
	sh.mu.Lock()
	p, ok := sh.m[string(key)] // a lookup by string(bytes) does not allocate
	sh.mu.Unlock()
	return p, ok
}

// add remembers name as the partition name of key and returns it. The key
// and the name are kept in one string, so that remembering them costs one
// allocation and a lookup reads them from the same memory.
func (n *names) add(key, name []byte) string {
	if len(key) > maxNamedKey {
		return string(name)
	}
	var buf [maxNamedKey + maxPartitionLen]byte
	both := string(append(append(buf[:0], key...), name...))
	k, partition := both[:len(key)], both[len(key):]
	sh := n.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if len(sh.m) >= namesPerShard {
		for k := range sh.m { // iteration starts at a random entry
			delete(sh.m, k)
			break
		}
	}
	sh.m[k] = partition
	return partition
}
