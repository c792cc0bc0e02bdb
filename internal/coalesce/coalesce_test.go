package coalesce_test

import (
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/internal/coalesce"
)

// call is a test call: n numbers it, size weighs it, and gone marks it
// abandoned.
type call struct {
	n, size int
	gone    bool
	done    chan struct{}
}

func (c *call) Abandoned() bool { return c.gone }

func newCall(n int) func() *call {
	return func() *call { return &call{n: n, size: 1, done: make(chan struct{})} }
}

// recorder is a send function recording its batches.
type recorder struct {
	mu      sync.Mutex
	batches [][]int
}

func (r *recorder) send(batch []*call) {
	r.mu.Lock()
	var ns []int
	for _, c := range batch {
		ns = append(ns, c.n)
	}
	r.batches = append(r.batches, ns)
	r.mu.Unlock()
	for _, c := range batch {
		close(c.done)
	}
}

func TestCallsGoAloneWhileAPlaceIsFree(t *testing.T) {
	q := coalesce.New(coalesce.Config[*call]{Limit: 2, Max: 8})
	var r recorder
	for i := range 2 {
		if _, now := q.Enter(newCall(i), r.send); !now {
			t.Fatalf("call %d queued with %d places and %d taken", i, 2, i)
		}
	}
	c, now := q.Enter(newCall(2), r.send)
	if now || c == nil || c.n != 2 {
		t.Fatalf("third call: now %v, queued %+v; want it queued", now, c)
	}
	if got := q.Len(); got != 1 {
		t.Errorf("Len %d, want 1", got)
	}
}

// TestLeaveSendsTheQueueInBatches queues 7 calls behind the one place and
// leaves it: they go out oldest first in batches of at most 3, and the place
// is free again once the queue is empty.
func TestLeaveSendsTheQueueInBatches(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := coalesce.New(coalesce.Config[*call]{Limit: 1, Max: 3})
		var r recorder
		if _, now := q.Enter(newCall(-1), r.send); !now {
			t.Fatal("the first call was queued")
		}
		var queued []*call
		for i := range 7 {
			c, now := q.Enter(newCall(i), r.send)
			if now {
				t.Fatalf("call %d went alone while the place was taken", i)
			}
			queued = append(queued, c)
		}
		q.Leave(r.send)
		synctest.Wait()
		for _, c := range queued {
			select {
			case <-c.done:
			default:
				t.Fatalf("call %d never sent", c.n)
			}
		}
		want := [][]int{{0, 1, 2}, {3, 4, 5}, {6}}
		if !slices.EqualFunc(r.batches, want, slices.Equal) {
			t.Errorf("batches %v, want %v", r.batches, want)
		}
		if _, now := q.Enter(newCall(7), r.send); !now {
			t.Error("the place was not given up once the queue was empty")
		}
	})
}

// TestFitsBoundsABatch weighs calls: a batch closes before the call that
// would take it past 4, which opens the next.
func TestFitsBoundsABatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fits := func(batch []*call, next *call) bool {
			size := next.size
			for _, c := range batch {
				size += c.size
			}
			return size <= 4
		}
		q := coalesce.New(coalesce.Config[*call]{Limit: 1, Max: 8, Fits: fits})
		var r recorder
		q.Enter(newCall(-1), r.send)
		for i, size := range []int{3, 1, 2, 2, 5, 1} {
			q.Enter(func() *call { return &call{n: i, size: size, done: make(chan struct{})} }, r.send)
		}
		q.Leave(r.send)
		synctest.Wait()
		// A call heavier than the bound still goes, alone.
		want := [][]int{{0, 1}, {2, 3}, {4}, {5}}
		if !slices.EqualFunc(r.batches, want, slices.Equal) {
			t.Errorf("batches %v, want %v", r.batches, want)
		}
	})
}

// TestReadyQueueGoesAtOnce holds the one place while calls queue: once
// they weigh 3 (Ready), they go at once from a second place, without
// waiting for the first; once MaxPlaces are taken, the queue waits for one
// of them, however ready; and the extra place is given up with the queue
// empty.
func TestReadyQueueGoesAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ready := func(queued []*call) bool {
			size := 0
			for _, c := range queued {
				size += c.size
			}
			return size >= 3
		}
		q := coalesce.New(coalesce.Config[*call]{Limit: 1, Max: 8, Ready: ready, MaxPlaces: 2})
		release := make(chan struct{})
		var r recorder
		held := func(batch []*call) {
			r.send(batch) // answers the batch, then holds the place
			<-release
		}
		if _, now := q.Enter(newCall(-1), held); !now {
			t.Fatal("the first call was queued")
		}
		var queued []*call
		enter := func(n int) {
			t.Helper()
			c, now := q.Enter(newCall(n), held)
			if now {
				t.Fatalf("call %d went alone while the place was taken", n)
			}
			queued = append(queued, c)
		}
		enter(0)
		enter(1)
		synctest.Wait()
		if len(r.batches) != 0 || q.Len() != 2 {
			t.Fatalf("batches %v and %d queued before the queue was ready, want none sent and 2", r.batches, q.Len())
		}
		enter(2)
		synctest.Wait()
		if want := [][]int{{0, 1, 2}}; !slices.EqualFunc(r.batches, want, slices.Equal) {
			t.Fatalf("batches %v once the queue was ready, want %v", r.batches, want)
		}
		for i := 3; i < 7; i++ {
			enter(i)
		}
		synctest.Wait()
		if len(r.batches) != 1 || q.Len() != 4 {
			t.Fatalf("batches %v and %d queued with both places taken, want 1 sent and 4 queued", r.batches, q.Len())
		}
		close(release)
		synctest.Wait()
		if want := [][]int{{0, 1, 2}, {3, 4, 5, 6}}; !slices.EqualFunc(r.batches, want, slices.Equal) {
			t.Fatalf("batches %v once a place was free, want %v", r.batches, want)
		}
		for _, c := range queued {
			select {
			case <-c.done:
			default:
				t.Fatalf("call %d never sent", c.n)
			}
		}
		q.Leave(held)
		if _, now := q.Enter(newCall(7), held); !now {
			t.Error("a place was not given up once the queue was empty")
		}
	})
}

// TestAbandonedCallsAreNeverSent abandons some queued calls: no batch holds
// them, and when only abandoned calls are left the place is given up.
func TestAbandonedCallsAreNeverSent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := coalesce.New(coalesce.Config[*call]{Limit: 1, Max: 8})
		var r recorder
		q.Enter(newCall(-1), r.send)
		var queued []*call
		for i := range 4 {
			c, _ := q.Enter(newCall(i), r.send)
			queued = append(queued, c)
		}
		queued[1].gone, queued[3].gone = true, true
		q.Leave(r.send)
		synctest.Wait()
		if want := [][]int{{0, 2}}; !slices.EqualFunc(r.batches, want, slices.Equal) {
			t.Errorf("batches %v, want %v", r.batches, want)
		}

		// Only abandoned calls queued: nothing is sent, the place is free.
		q.Enter(newCall(-1), r.send)
		c, _ := q.Enter(newCall(9), r.send)
		c.gone = true
		r.batches = nil
		q.Leave(r.send)
		synctest.Wait()
		if len(r.batches) != 0 {
			t.Errorf("batches %v of abandoned calls, want none", r.batches)
		}
		if q.Len() != 0 {
			t.Errorf("Len %d after the drain, want 0", q.Len())
		}
		if _, now := q.Enter(newCall(10), r.send); !now {
			t.Error("the place was not given up")
		}
	})
}

// TestAbandonedCallsDoNotGrowTheQueue holds the one place, as a send that
// hangs would, while 3 calls wait and 10,000 more are made and abandoned
// one after another: the queue stays within twice the calls waiting, and
// when the place is left only the waiting calls are sent, in order.
func TestAbandonedCallsDoNotGrowTheQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := coalesce.New(coalesce.Config[*call]{Limit: 1, Max: 8})
		var r recorder
		q.Enter(newCall(-1), r.send)
		for i := range 3 {
			q.Enter(newCall(i), r.send)
		}
		for i := range 10_000 {
			c, now := q.Enter(newCall(100+i), r.send)
			if now {
				t.Fatalf("call %d went alone while the place was taken", 100+i)
			}
			c.gone = true
			if got := q.Len(); got > 2*3 {
				t.Fatalf("Len %d after %d abandoned calls behind 3 waiting, want at most %d", got, i+1, 2*3)
			}
		}
		q.Leave(r.send)
		synctest.Wait()
		if want := [][]int{{0, 1, 2}}; !slices.EqualFunc(r.batches, want, slices.Equal) {
			t.Errorf("batches %v, want %v", r.batches, want)
		}
	})
}

// TestConcurrentCallsAreEachAnsweredOnce runs many goroutines through a
// Queue of 2 places, and of 2 places and up to 5 for ready queues: every
// call is answered exactly once, alone or in a batch, and no more sends
// are ever in flight than the places.
func TestConcurrentCallsAreEachAnsweredOnce(t *testing.T) {
	ready := func(queued []*call) bool { return len(queued) >= 4 }
	t.Run("limit", func(t *testing.T) {
		answerEachOnce(t, coalesce.Config[*call]{Limit: 2, Max: 16}, 2)
	})
	t.Run("ready", func(t *testing.T) {
		answerEachOnce(t, coalesce.Config[*call]{Limit: 2, Max: 16, Ready: ready, MaxPlaces: 5}, 5)
	})
}

// answerEachOnce runs many goroutines through a Queue of config c: every
// call is answered exactly once, and at most limit sends are ever in
// flight.
func answerEachOnce(t *testing.T, c coalesce.Config[*call], limit int32) {
	const callers, perCaller = 64, 50
	q := coalesce.New(c)
	var inFlight, peak atomic.Int32
	enter := func() {
		n := inFlight.Add(1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
	}
	answered := make([]atomic.Int32, callers*perCaller)
	send := func(batch []*call) {
		enter()
		defer inFlight.Add(-1)
		for _, c := range batch {
			answered[c.n].Add(1)
			close(c.done)
		}
	}
	var wg sync.WaitGroup
	for g := range callers {
		wg.Go(func() {
			for i := range perCaller {
				n := g*perCaller + i
				c, now := q.Enter(newCall(n), send)
				if now {
					enter()
					answered[n].Add(1)
					inFlight.Add(-1)
					q.Leave(send)
					continue
				}
				<-c.done
			}
		})
	}
	wg.Wait()
	for n := range answered {
		if got := answered[n].Load(); got != 1 {
			t.Fatalf("call %d answered %d times, want once", n, got)
		}
	}
	if p := peak.Load(); p > limit {
		t.Errorf("%d sends in flight at once, want at most %d", p, limit)
	}
}

// TestAnsweredCallersJoinTheNextBatch keeps 8 callers busy through one
// place on one processor, each calling again as soon as it is answered,
// with a round trip of a millisecond on a fake clock. With YieldAfterBatch
// the callers a batch answers call again while its sender still holds the
// place, so they go in its next batch and hardly a call goes alone.
// Without it the sender gives up its place before they have the
// processor, and the first of them goes alone after every batch: an
// eighth of all calls.
func TestAnsweredCallersJoinTheNextBatch(t *testing.T) {
	const callers, perCaller = 8, 100
	countAlone := func(yield bool) int {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
		var alone atomic.Int32
		synctest.Test(t, func(t *testing.T) {
			q := coalesce.New(coalesce.Config[*call]{Limit: 1, Max: 64, YieldAfterBatch: yield})
			roundTrip := func() { time.Sleep(time.Millisecond) }
			send := func(batch []*call) {
				roundTrip()
				for _, c := range batch {
					close(c.done)
				}
			}
			var wg sync.WaitGroup
			for g := range callers {
				wg.Go(func() {
					for i := range perCaller {
						c, now := q.Enter(newCall(g*perCaller+i), send)
						if now {
							alone.Add(1)
							roundTrip()
							q.Leave(send)
							continue
						}
						<-c.done
					}
				})
			}
			wg.Wait()
		})
		return int(alone.Load())
	}
	if n := countAlone(true); n > perCaller/4 {
		t.Errorf("yielding: %d of %d calls went alone, want at most %d", n, callers*perCaller, perCaller/4)
	}
	if n := countAlone(false); n < perCaller/2 {
		t.Errorf("not yielding: %d of %d calls went alone, want about %d, one after each batch", n, callers*perCaller, perCaller)
	}
}
