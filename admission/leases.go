package admission

// Quota leases. A fair RPC is charged to up to four quotas (a source, its
// prefix tiers, a principal), each a row the store writes on every charge.
// For a busy identity most of those writes are avoidable: when a charge
// goes to the store, it reserves on each quota it charges the RPC's
// commands and what fills the quota's lease up to a chunk
// (Config.QuotaChunk, at most 1 % of the quota), and this server keeps
// that as the identity's lease. The next RPCs
// of that identity take from its leases without a store call; one whose
// quotas do not all hold enough goes to the store for the rest, as before,
// taking from the leases that do.
//
// What this keeps:
//
//   - No identity is admitted beyond its share: a lease is reserved in the
//     store, within the share, and synced there before anything is taken
//     from it (the RPCs it admits wait for no Sync of their own). Near the
//     share, a charge that cannot fit its chunk charges the RPC's commands
//     alone, so the last commands of a share are admitted exactly.
//   - A fairness denial spends nothing: commands taken from leases go back
//     to them when the rest of the charge is refused (or fails).
//   - The charge and the family spend still happen together: an RPC takes
//     from its family chunk and its quotas' leases before it runs, and
//     gives both back if either refuses.
//   - No hotspot: each lease is a counter of its own, taken from with a
//     compare-and-swap and found in a table whose locks are spread over
//     shards, each held for one lookup.
//
// What it costs, all of it in the direction of admitting less:
//
//   - A lease unspent when the server stops, when its UTC day ends, or when
//     it is evicted (a family keeps at most maxLeases, the least recently
//     used evicted first) is lost: the identity is admitted up to one chunk
//     less that day, per server.
//   - Servers sharing a store each hold their own leases: an identity near
//     its share may be refused on one while another still holds a chunk of
//     it.
//
// And one bounded exception: a fairness reset deletes the identity's rows,
// but a lease another server took before the reset stays spendable there
// until that server reads the reset (within Config.StateRefresh): up to
// one chunk per server beyond the fresh share. The server that made the
// reset drops its leases at once.

import (
	"hash/maphash"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// maxLeases bounds the leases one server keeps of one family.
const maxLeases = 10_000

// leaseShards is how many locks a family's leases are spread over, so that
// fair RPCs of different identities do not wait for one another.
const leaseShards = 32

// quota names one identity's quota on one axis.
type quota struct {
	ax axis
	id string
}

// quotas lists the quotas id is charged to, in the order charge adds their
// budgets: the source, its tiers from finest to coarsest, the principal.
func (id *identities) quotas(qs *[maxQuotas]quota) int {
	n := 0
	if id.source != "" {
		qs[n] = quota{axisSource, id.source}
		n++
		for i, t := range tierAxes {
			if h := id.tiers[i]; h != "" {
				qs[n] = quota{t.axis, h}
				n++
			}
		}
	}
	if id.principal != "" {
		qs[n] = quota{axisPrincipal, id.principal}
		n++
	}
	return n
}

// quotaLease is what this server holds, reserved in the store and not yet
// admitted, of one identity's quota for one UTC day and lease epoch. A
// lease of another day or epoch is never taken from: it is replaced.
type quotaLease struct {
	day, epoch int64
	left       atomic.Int64
	// refilling is set while one RPC's charge tops the lease up, so that
	// RPCs arriving meanwhile charge their own commands alone rather than
	// each top it up again.
	refilling atomic.Bool
}

// take takes n commands from l if it holds them.
func (l *quotaLease) take(n int64) bool {
	for {
		left := l.left.Load()
		if left < n {
			return false
		}
		if l.left.CompareAndSwap(left, left-n) {
			return true
		}
	}
}

// leases are one family's quota leases, spread over shards by quota.
type leases struct {
	seed   maphash.Seed
	shards [leaseShards]leaseShard
}

type leaseShard struct {
	mu  sync.Mutex
	lru *simplelru.LRU[quota, *quotaLease]
}

func newLeases() *leases {
	ls := &leases{seed: maphash.MakeSeed()}
	for i := range ls.shards {
		c, err := simplelru.NewLRU[quota, *quotaLease](maxLeases/leaseShards, nil)
		if err != nil {
			panic(err) // only for a size below 1
		}
		ls.shards[i].lru = c
	}
	return ls
}

// get returns q's lease for day and epoch, replacing one of another day or
// epoch (or none) with an empty lease.
func (ls *leases) get(q quota, day, epoch int64) *quotaLease {
	sh := &ls.shards[(maphash.String(ls.seed, q.id)+uint64(q.ax))%leaseShards]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	l, ok := sh.lru.Get(q)
	if !ok || l.day != day || l.epoch != epoch {
		l = &quotaLease{day: day, epoch: epoch}
		sh.lru.Add(q, l)
	}
	return l
}

// leaseTake is what takeLeases did for one RPC, quota by quota (in the
// order of quotas): took[i] is the lease n commands were taken from, or
// nil when quota i must be charged in the store; refill[i] is the lease
// that charge tops up, when the RPC may reserve more than its commands.
type leaseTake struct {
	took, refill [maxQuotas]*quotaLease
}

// takeLeases takes n commands of day from the lease of every quota in qs
// that holds them, and reports whether all of them did: the RPC then needs
// no store call. For each quota that does not, it claims the lease's
// refill when no other RPC has. The RPC tops its leases up only if it
// claimed every refill it needs (see extra); otherwise it releases its
// claims and charges its commands alone. Each lease is taken from on its
// own: an RPC that takes from one and then finds another short gives back
// what it took only once its charge is decided, so a concurrent RPC may
// meanwhile find the first short and go to the store, never the reverse.
func (f *family) takeLeases(qs []quota, day, n int64, lt *leaseTake) bool {
	if f.leases == nil {
		return false
	}
	epoch := f.leaseEpoch.Load()
	all, claimedAll := true, true
	for i, q := range qs {
		l := f.leases.get(q, day, epoch)
		switch {
		case l.take(n):
			lt.took[i] = l
		case l.refilling.CompareAndSwap(false, true):
			all = false
			lt.refill[i] = l
		default:
			all, claimedAll = false, false
		}
	}
	if f.leasesTaken != nil {
		f.leasesTaken()
	}
	if f.leaseEpoch.Load() != epoch {
		// A fairness reset moved the epoch on while the leases were taken:
		// they may be of the epoch before it, reserved against counters
		// the reset deleted. Give everything back and charge the store,
		// so that no RPC is admitted from a lease older than a reset that
		// has returned.
		f.settleLeases(lt, n, 0, true)
		*lt = leaseTake{}
		return false
	}
	if !all && !claimedAll {
		for i, l := range lt.refill {
			if l != nil {
				l.refilling.Store(false)
				lt.refill[i] = nil
			}
		}
	}
	return all
}

// extra returns what the store charge of an RPC of n commands may reserve
// beyond them on each quota it charges: what tops the least full of those
// quotas' leases up to its chunk (a lease too short for n may still hold
// some commands, an RPC larger than the chunk all of it), and no more than
// any of them can hold beside n. So no lease holds more than its chunk,
// and a restart loses no more. It is 0 when the RPC holds no refill claim.
func (f *family) extra(qs []quota, lt *leaseTake, n int64) int64 {
	extra := int64(-1)
	for i, q := range qs {
		if lt.took[i] != nil {
			continue
		}
		l := lt.refill[i]
		if l == nil {
			return 0
		}
		e := max(min(f.quotaChunk[q.ax]-l.left.Load(), f.limits[q.ax]-n), 0)
		if extra < 0 || e < extra {
			extra = e
		}
	}
	return max(extra, 0)
}

// settleLeases ends an RPC's use of its leases. If its store charge
// reserved extra commands on each quota it charged, they go to those
// quotas' leases; if the RPC was refused or failed (refused), the commands
// it took from leases go back to them. Either way its refill claims end.
// A lease replaced meanwhile (a new day or epoch, an eviction) is no
// longer taken from: what goes to it is lost, never admitted twice.
func (f *family) settleLeases(lt *leaseTake, n, extra int64, refused bool) {
	for i := range lt.took {
		if l := lt.took[i]; l != nil && refused {
			l.left.Add(n)
		}
		if l := lt.refill[i]; l != nil {
			if !refused {
				l.left.Add(extra)
			}
			l.refilling.Store(false)
		}
	}
}
