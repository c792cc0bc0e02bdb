// Package coalesce gathers the concurrent calls of many goroutines into
// batches by natural batching, with no timer. A Queue lets a bounded number
// of sends be in flight at once: while fewer are, a call takes a place and
// is sent at once, alone; a call made while every place is taken waits in
// the queue, and the next sender to finish takes the queue's oldest calls
// as one batch. An idle caller waits for nothing; a busy one sends fewer,
// larger batches, as many as a round trip lets accumulate. Optionally a
// queue that already makes a large enough batch is sent at once, from a
// place of its own beyond the limit (Config.Ready): waiting for a place
// would only delay it.
//
// The Sluice client fills envelopes of RPCs this way, and the Redis store
// pipelines of batches. A Queue holds only the bookkeeping: what a call
// carries, how a batch is sent and how each call learns its answer are the
// user's.
package coalesce

import (
	"runtime"
	"sync"
)

// Item is a queued call.
type Item interface {
	// Abandoned reports that the caller gave up waiting: a batch leaves
	// the call out, so it is never sent.
	Abandoned() bool
}

// Queue is the bookkeeping of natural batching for calls of type T. It is
// safe for concurrent use.
type Queue[T Item] struct {
	cfg Config[T] // as New normalized it

	mu       sync.Mutex
	inFlight int // places taken: sends in flight, or a sender draining the queue
	queue    []T // calls waiting for a sender, oldest first
}

// Config shapes a Queue.
type Config[T Item] struct {
	// Limit is the number of places: sends in flight at once (at least 1).
	Limit int
	// Max is the most calls a batch holds (at least 1).
	Max int
	// Fits, if not nil, bounds a batch further: it reports whether next
	// may join the calls already in batch (never empty).
	Fits func(batch []T, next T) bool
	// Ready, if not nil, reports whether the calls waiting (oldest first,
	// never empty, abandoned ones included) already make a batch worth
	// sending without waiting for a place. While every one of Limit
	// places is taken, a call whose arrival makes the queue ready takes
	// one more place, up to MaxPlaces, and a new goroutine sends the
	// queue with the send function given to Enter, as Leave's would.
	// Natural batching waits for a place so that calls gather; once they
	// share a send's fixed price well enough, the wait only adds latency,
	// and the extra place lets the far side work on the batch meanwhile.
	Ready func(queued []T) bool
	// MaxPlaces bounds the places Ready may open: at most MaxPlaces sends
	// are in flight at once. Under Limit it counts as Limit: no more.
	MaxPlaces int
	// YieldAfterBatch makes a sender yield the processor after each batch
	// it answers, so that its callers, busy ones calling again at once,
	// queue behind the place it still holds and go in its next batch.
	// Without it the sender finds the queue empty, gives up its place, and
	// the first caller to call again goes alone: under load about every
	// other send is then a batch of one. Set it when each send costs the
	// far side a fixed price worth sharing (a request to an HTTP server);
	// leave it off when the far side is one thread kept busy by sends back
	// to back (a Redis server), whose gaps the lone sends fill.
	YieldAfterBatch bool
}

// New returns a Queue shaped by c; a Limit or Max under 1 counts as 1.
func New[T Item](c Config[T]) *Queue[T] {
	c.Limit = max(c.Limit, 1)
	c.Max = max(c.Max, 1)
	c.MaxPlaces = max(c.MaxPlaces, c.Limit)
	return &Queue[T]{cfg: c}
}

// Enter takes a place and reports true when one is free: the caller sends
// its call at once and then calls Leave. Otherwise it queues the call that
// mk makes and returns it: the call is answered by the sender of a batch,
// or left out of every batch once Abandoned. If the queue is then ready
// (Config.Ready) and fewer than MaxPlaces are taken, a new goroutine takes
// one more place and sends the queue with send, batch after batch.
//
// Before the queue grows, Enter drops the abandoned calls from it: while
// every place stays taken (a send that hangs), callers that give up cannot
// grow the queue with every call they make. It holds at most twice the
// most calls ever waiting in it at once, and at least one.
func (q *Queue[T]) Enter(mk func() T, send func(batch []T)) (queued T, now bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.inFlight < q.cfg.Limit {
		q.inFlight++
		return queued, true
	}
	queued = mk()
	if len(q.queue) == cap(q.queue) {
		q.prune()
	}
	q.queue = append(q.queue, queued)
	// While fewer than MaxPlaces are taken, the queue was not ready
	// before this call (a ready one is sent at once, and a sender gives up
	// its place only with the queue empty), so Ready never weighs more
	// calls than its own threshold and one.
	if q.cfg.Ready != nil && q.inFlight < q.cfg.MaxPlaces && q.cfg.Ready(q.queue) {
		q.inFlight++
		go q.drain(send)
	}
	return queued, false
}

// prune drops the abandoned calls from the queue, keeping the others in
// order. q.mu must be held.
func (q *Queue[T]) prune() {
	live := q.queue[:0]
	for _, c := range q.queue {
		if !c.Abandoned() {
			live = append(live, c)
		}
	}
	clear(q.queue[len(live):])
	q.queue = live
}

// Leave gives up the place taken by Enter. If calls queued meanwhile, the
// place passes to a new goroutine that sends them with send, batch after
// batch, until the queue is empty; the caller returns at once.
func (q *Queue[T]) Leave(send func(batch []T)) {
	q.mu.Lock()
	queued := len(q.queue) > 0
	if !queued {
		q.inFlight--
	}
	q.mu.Unlock()
	if queued {
		go q.drain(send)
	}
}

// drain sends the queue, batch after batch, and then gives up its place,
// yielding the processor after each batch if the Queue is so configured.
func (q *Queue[T]) drain(send func(batch []T)) {
	for {
		batch := q.take()
		if batch == nil {
			return
		}
		send(batch)
		if q.cfg.YieldAfterBatch {
			runtime.Gosched()
		}
	}
}

// take removes the oldest queued calls that fit one batch, leaving out
// those abandoned. When none is left it gives up the place and returns nil.
func (q *Queue[T]) take() []T {
	q.mu.Lock()
	defer q.mu.Unlock()
	var batch []T
	i := 0
	for ; i < len(q.queue) && len(batch) < q.cfg.Max; i++ {
		next := q.queue[i]
		if next.Abandoned() {
			continue
		}
		if len(batch) > 0 && q.cfg.Fits != nil && !q.cfg.Fits(batch, next) {
			break
		}
		batch = append(batch, next)
	}
	n := copy(q.queue, q.queue[i:])
	clear(q.queue[n:])
	q.queue = q.queue[:n]
	if len(batch) == 0 {
		q.inFlight--
		return nil
	}
	return batch
}

// Len returns the number of calls waiting in the queue, abandoned ones
// included until a batch leaves them out.
func (q *Queue[T]) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.queue)
}
