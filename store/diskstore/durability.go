package diskstore

import (
	"sync"
	"sync/atomic"
	"time"
)

// durability tracks which commits of deferred rounds an fsync has covered.
//
// A round whose callers all deferred its fsync (ApplyDeferred) commits
// without asking Pebble for one: asking at once would start an fsync that
// covers that round alone, while the rest of its request (the other steps,
// the other requests of an envelope) is still being run, and their Sync
// would then wait for a second fsync. Instead each such round takes the
// next number from committed once it is in the log, and it is durable once
// any fsync that began after that has completed: a Sync, a synced round's,
// or, if none comes within lazyWait, the syncer's own. The log is fsynced
// in order, so an fsync covers every commit made before it was asked for.
type durability struct {
	// committed numbers the lazy commits: the last number handed out.
	committed atomic.Uint64
	mu        sync.Mutex
	synced    uint64        // every lazy commit up to this one is durable
	changed   chan struct{} // closed, and replaced, when synced moves
}

// lazyWait bounds how long a lazy commit waits for an fsync it did not ask
// for before the syncer asks for one.
const lazyWait = 2 * time.Millisecond

// advance records that every lazy commit numbered up to n is durable.
func (d *durability) advance(n uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if n <= d.synced {
		return
	}
	d.synced = n
	if d.changed != nil {
		close(d.changed)
		d.changed = nil
	}
}

// state returns synced and a channel closed when it moves.
func (d *durability) state() (uint64, <-chan struct{}) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.changed == nil {
		d.changed = make(chan struct{})
	}
	return d.synced, d.changed
}

// wait returns once lazy commit n is durable, asking for an fsync itself
// if none covers it within lazyWait or once the store is closing.
func (d *durability) wait(s *Store, n uint64) error {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		synced, changed := d.state()
		if synced >= n {
			return nil
		}
		if err := s.failure(); err != nil {
			return err
		}
		if timer == nil {
			timer = time.NewTimer(lazyWait)
		}
		select {
		case <-changed:
		case <-timer.C:
			return s.syncLog()
		case <-s.done:
			return s.syncLog()
		}
	}
}
