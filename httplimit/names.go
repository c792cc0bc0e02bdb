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
// Each of its shards keeps two generations of names: new names enter the
// current one, and a name found in the previous one moves to the current
// one. When the current generation is full it becomes the previous one,
// and the previous one is emptied. Names in use therefore stay, names
// unused for a generation go, and a flood of new clients costs each of
// them an insertion, never more memory: at most namesShards·2·namesPerGen
// keys of at most maxNamedKey bytes are held. It holds raw client keys, as
// the request does, in this process's memory only; they never reach the
// store.
type names struct {
	seed   maphash.Seed
	shards [namesShards]namesShard
}

// The bounds of names: 4,096 keys of at most 128 bytes. Full, it holds
// about 400 kB for IPv4 clients under a short prefix, and at most 2 MB for
// the longest keys and prefixes.
const (
	namesShards = 16
	namesPerGen = 128
	maxNamedKey = 128
)

type namesShard struct {
	mu sync.Mutex
	// cur and old map a client key to the key followed by its partition
	// name, one string, so that remembering a name costs one allocation
	// and a lookup reads the key and the name from the same memory.
	cur, old map[string]string
	_        [40]byte // keep neighbouring shards' locks off one cache line
}

func newNames() *names {
	n := &names{seed: maphash.MakeSeed()}
	for i := range n.shards {
		n.shards[i].cur = make(map[string]string, namesPerGen)
		n.shards[i].old = make(map[string]string, namesPerGen)
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
	defer sh.mu.Unlock()
	both, ok := sh.cur[string(key)] // a lookup by string(bytes) does not allocate
	if !ok {
		if both, ok = sh.old[string(key)]; !ok {
			return "", false
		}
		sh.put(both[:len(key)], both)
	}
	return both[len(key):], true
}

// add remembers name as the partition name of key and returns it.
func (n *names) add(key, name []byte) string {
	if len(key) > maxNamedKey {
		return string(name)
	}
	var buf [maxNamedKey + maxPartitionLen]byte
	both := string(append(append(buf[:0], key...), name...))
	sh := n.shard(key)
	sh.mu.Lock()
	sh.put(both[:len(key)], both)
	sh.mu.Unlock()
	return both[len(key):]
}

// put stores both under key in the current generation, starting a new one
// if it is full. sh.mu must be held.
func (sh *namesShard) put(key, both string) {
	if len(sh.cur) >= namesPerGen {
		sh.cur, sh.old = sh.old, sh.cur
		clear(sh.cur)
	}
	sh.cur[key] = both
}
