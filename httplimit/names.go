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
// It is a set-associative cache: a key's hash picks a shard and, in it, a
// set of namesWays slots, and the key can be remembered in no other. One
// hash of the key serves the shard, the set and a tag compared before the
// key itself, and neither a lookup nor an insertion touches a map, so a
// client not seen recently (a miss, then an insertion) costs a few reads of
// one set and the allocation of its name. A new name replaces the least
// recently used of its set. Names in use therefore stay (a name is lost
// only if namesWays new clients land in its set between two of its uses:
// at 4,096 slots, some thousands of new clients), and memory never grows:
// at most namesShards·namesSets·namesWays keys of at most maxNamedKey
// bytes are held. It holds raw client keys, as the request does, in this
// process's memory only; they never reach the store.
type names struct {
	seed   maphash.Seed
	shards [namesShards]namesShard
}

// The bounds of names: 4,096 keys of at most 128 bytes. Full, it holds
// about 300 kB for IPv4 clients under a short prefix, and at most 2 MB
// for the longest keys and prefixes.
const (
	namesShards = 16
	namesSets   = 64 // per shard
	namesWays   = 4  // slots per set
	maxNamedKey = 128
)

type namesShard struct {
	mu   sync.Mutex
	tick uint32 // counts the shard's uses; stamps slots
	sets [namesSets]namesSet
	_    [56]byte // keep the next shard's lock off this one's last set
}

// namesSet is one set of slots. A slot holds its key followed by the key's
// partition name, one string, so that remembering a name costs one
// allocation and a lookup reads the key and the name from the same memory.
type namesSet struct {
	tags [namesWays]uint32 // the high bits of each slot's key hash
	used [namesWays]uint32 // the shard's tick at each slot's last use
	klen [namesWays]uint8  // the length of each slot's key
	both [namesWays]string // key ‖ name; "" in an empty slot
}

func newNames() *names { return &names{seed: maphash.MakeSeed()} }

// set returns the set of the key with hash h, and the tag of h.
func (n *names) set(h uint64) (*namesShard, *namesSet, uint32) {
	sh := &n.shards[h%namesShards]
	return sh, &sh.sets[(h/namesShards)%namesSets], uint32(h >> 32)
}

// find returns the slot of s holding key, or -1.
func (s *namesSet) find(key []byte, tag uint32) int {
	for w := range namesWays {
		if s.tags[w] == tag && int(s.klen[w]) == len(key) && s.both[w] != "" && s.both[w][:len(key)] == string(key) {
			return w
		}
	}
	return -1
}

// get returns the partition name remembered for key, and the hash of key
// that add takes.
func (n *names) get(key []byte) (string, uint64, bool) {
	if len(key) > maxNamedKey {
		return "", 0, false
	}
	h := maphash.Bytes(n.seed, key)
	sh, s, tag := n.set(h)
	sh.mu.Lock()
	w := s.find(key, tag)
	if w < 0 {
		sh.mu.Unlock()
		return "", h, false
	}
	sh.tick++
	s.used[w] = sh.tick
	both := s.both[w]
	sh.mu.Unlock()
	return both[len(key):], h, true
}

// add remembers name as the partition name of key, whose hash get
// returned, and returns it.
func (n *names) add(key []byte, h uint64, name []byte) string {
	if len(key) > maxNamedKey {
		return string(name)
	}
	var buf [maxNamedKey + maxPartitionLen]byte
	both := string(append(append(buf[:0], key...), name...))
	sh, s, tag := n.set(h)
	sh.mu.Lock()
	w := s.find(key, tag) // another request of the client may have added it
	if w < 0 {
		w = s.victim(sh.tick)
	}
	sh.tick++
	s.tags[w], s.used[w], s.klen[w], s.both[w] = tag, sh.tick, uint8(len(key)), both
	sh.mu.Unlock()
	return both[len(key):]
}

// victim returns the slot of s a new name takes at tick: an empty one, else
// the least recently used. Ages are differences of ticks, right across the
// counter's wrap.
func (s *namesSet) victim(tick uint32) int {
	v := 0
	for w := range namesWays {
		if s.both[w] == "" {
			return w
		}
		if tick-s.used[w] > tick-s.used[v] {
			v = w
		}
	}
	return v
}
