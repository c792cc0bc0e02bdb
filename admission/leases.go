package admission

// Quota leases. A fair RPC is charged to up to five quotas (a source, its
// prefix tiers, a principal), each a row the store writes on every charge.
// For a busy identity most of those writes are avoidable: when a charge
// goes to the store, it reserves the RPC's commands and a chunk more
// (Config.QuotaChunk, at most 1 % of the quota) on each quota it charges,
// and this server keeps the chunk as the identity's lease. The next RPCs
// of that identity take from its leases, under the family's lease lock,
// without a store call; one whose quotas do not all hold enough goes to
// the store for the rest, as before, taking from the leases that do.
//
// What this keeps:
//
//   - No identity is admitted beyond its share: a lease is reserved in the
//     store, within the share, before anything is taken from it. Near the
//     share, a charge that cannot fit its chunk charges the RPC's commands
//     alone, so the last commands of a share are admitted exactly.
//   - A fairness denial spends nothing: commands taken from leases go back
//     to them when the rest of the charge is refused (or fails).
//   - The charge and the family spend still happen together: an RPC takes
//     from its family chunk and its quotas' leases before it runs, and
//     gives both back if either refuses.
//
// What it costs, all of it in the direction of admitting less:
//
//   - A lease unspent when the server stops, when its UTC day ends, or when
//     it is evicted (at most maxLeases are kept, the least recently used
//     evicted first) is lost: the identity is admitted up to one chunk
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
	lru "github.com/hashicorp/golang-lru/v2"
)

// maxLeases bounds the leases one server keeps, across its families.
const maxLeases = 10_000

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

// leaseKey names one identity's lease in one family.
type leaseKey struct {
	f *family
	quota
}

// quotaLease is what this server holds, reserved in the store and not yet
// admitted, of one identity's quota for one UTC day. Its fields are
// guarded by its family's leaseMu.
type quotaLease struct {
	day, epoch int64
	left       int64
	// refilling is set while one RPC's charge tops the lease up, so that
	// RPCs arriving meanwhile charge their own commands alone rather than
	// each reserve a chunk more.
	refilling bool
}

// leaseTake is what takeLeases did for one RPC, quota by quota (in the
// order of quotas): took[i] is the lease n commands were taken from, or
// nil when quota i must be charged in the store; refill[i] is the lease
// that charge tops up, when the RPC may reserve a chunk more.
type leaseTake struct {
	took, refill [maxQuotas]*quotaLease
	// epoch is the family's lease epoch the leases belong to.
	epoch int64
}

func newLeases() *lru.Cache[leaseKey, *quotaLease] {
	c, err := lru.New[leaseKey, *quotaLease](maxLeases)
	if err != nil {
		panic(err) // only for a size below 1
	}
	return c
}

// takeLeases takes n commands of day from the lease of every quota in qs
// that holds them, and reports whether all of them did: the RPC then needs
// no store call. For each quota that does not, it claims the lease's
// refill when no other RPC has. The RPC charges a chunk more only if it
// claimed every refill it needs (see extra); otherwise it releases its
// claims and charges its commands alone.
func (a *Admitter) takeLeases(f *family, qs []quota, day, n int64, lt *leaseTake) bool {
	if a.leases == nil {
		return false
	}
	lt.epoch = f.leaseEpoch.Load()
	f.leaseMu.Lock()
	defer f.leaseMu.Unlock()
	all, claimedAll := true, true
	for i, q := range qs {
		key := leaseKey{f, q}
		l, ok := a.leases.Get(key)
		if !ok || l.day != day || l.epoch != lt.epoch {
			l = &quotaLease{day: day, epoch: lt.epoch}
			a.leases.Add(key, l)
		}
		switch {
		case l.left >= n:
			l.left -= n
			lt.took[i] = l
		case l.refilling:
			all, claimedAll = false, false
		default:
			all = false
			l.refilling = true
			lt.refill[i] = l
		}
	}
	if !all && !claimedAll {
		for i, l := range lt.refill {
			if l != nil {
				l.refilling = false
				lt.refill[i] = nil
			}
		}
	}
	return all
}

// extra returns the chunk the store charge of an RPC of n commands may
// reserve beyond them on each quota it charges: the smallest of those
// quotas' chunks, and no more than any of them can hold beside n. It is 0
// when the RPC holds no refill claim.
func (f *family) extra(qs []quota, lt *leaseTake, n int64) int64 {
	extra := int64(-1)
	for i, q := range qs {
		if lt.took[i] != nil {
			continue
		}
		if lt.refill[i] == nil {
			return 0
		}
		e := min(f.quotaChunk[q.ax], max(f.limits[q.ax]-n, 0))
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
func (a *Admitter) settleLeases(f *family, lt *leaseTake, n, extra int64, refused bool) {
	if a.leases == nil {
		return
	}
	f.leaseMu.Lock()
	defer f.leaseMu.Unlock()
	for i := range lt.took {
		if l := lt.took[i]; l != nil && refused {
			l.left += n
		}
		if l := lt.refill[i]; l != nil {
			l.refilling = false
			if !refused {
				l.left += extra
			}
		}
	}
}
