// Package storetest is the conformance suite every Sluice store passes.
//
// A store's own test calls [Run] with a function returning a fresh store on
// the clock it is given:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T, clock engine.Clock) engine.Store {
//			s, err := mystore.Open(t.TempDir(), mystore.WithClock(clock))
//			if err != nil {
//				t.Fatal(err)
//			}
//			return s
//		})
//	}
//
// Run executes every script under this package's testdata folder (embedded,
// so the suite runs the same from any package), each as a subtest named after
// its file and on a fresh store, and then the concurrency and contract
// checks: a 50-way kv.set nx race with exactly one winner; 256 goroutines on
// one key with a limit of 100 over 50 windows of every kind, never admitting
// more than the limit and admitting exactly the limit in at least 99% of the
// windows; many partitions sharing key names under concurrent load without
// interfering; a reused StepResult; and a closed store answering
// engine.ErrClosed. The suite drives the store's clock itself and never
// sleeps. Import it only from tests.
//
// # Scripts
//
// A script is a text file of lines, run top to bottom against one store
// whose clock the script controls. Blank lines are ignored, and an unquoted
// '#' at the start of a word begins a comment. Words are separated by spaces;
// a double-quoted part of a word follows Go syntax and may hold spaces
// (value="a b", value=""). A field's value written N*"TEXT" stands for N
// repetitions of TEXT (value=2048*"a", key=513*"k", op=129*"o"), for
// values at the edge of their bounds.
//
// Time. Every instant is written as a Go duration after the script epoch
// (0, 59.999s, 1m30s, 2h); durations are Go durations too, and both must be
// whole milliseconds. The epoch is [DefaultEpoch], a midnight, so every
// window whose length divides a day starts a bucket at the epoch; a first line
//
//	epoch 1704067200000
//
// names another (Unix milliseconds). The clock starts at the epoch and moves
// only when told:
//
//	at 1m         set the clock to epoch+1m (it may move backwards)
//	advance 500ms move the clock by 500ms (a negative duration steps back)
//
// Requests. The common case, one step of one command, takes one line: the
// partition, a colon, the command and its expected result after "->":
//
//	p: win.hit cost=1 win=a/fixed/3/1m -> ok remaining=2 resetAt=1m
//
// Anything larger is a block opened by "do", with optional operation id and
// mode, holding steps and their commands; it ends at the next line that is
// neither a step, a command nor a continuation:
//
//	do op=r1 mode=all
//	step p
//	  kv.set key=a value=1 ttl=1m -> ok
//	  kv.incr key=n delta=2 ttl=1m -> ok int=2
//	step q -> skipped
//	  kv.get key=a
//
// A step line may expect the step "skipped" or "replayed". A line starting
// with "->" continues the expectation of the command above it, for results
// too long for one line.
//
// Commands are the engine's wire names followed by fields:
//
//	key=K value=V mode=always|nx|xx keepTtl ttl=DUR delta=N cost=N
//	receipt=K lease=L limit=N maxWait=DUR at=INSTANT delay=DUR
//	win=KEY/KIND/LIMIT/WINDOW             a window of win.hit (repeatable)
//	budget=KEY/LIMIT/WINDOW[/refundable]  a budget of res.reserve (repeatable)
//	pace=KEY/LIMIT/WINDOW[/REFILL]        the paced limiter of pace.*
//	                                      (REFILL in thousandths)
//
// Expectations. An expectation starts with "ok" (allowed), "denied", or
// "error NAME", where NAME is one of invalid, wrong_type, overflow,
// conflict, capacity, corrupt, closed or unavailable and is matched with
// errors.Is against the engine's sentinels. It goes on with the result's
// fields:
//
//	found value=V int=N ttl=DUR remaining=N resetAt=INSTANT
//	retryAfter=DUR at=INSTANT
//	win=ok|denied/REMAINING/RESETAT[/RETRYAFTER]   one per window or budget
//
// Every field not written is expected to be zero, so an expectation states
// the whole result. A command over one window or budget that lists no win=
// expects that window's outcome to equal the command's own; a command over
// several must list each. Every command that runs needs an expectation and
// a step's denied flag must match its commands'. After a command expected to
// fail, nothing else in the request has an expectation: a failing step
// returns no results and later steps do not run; earlier steps completed
// and are checked, except after "invalid", which the engine reports before
// running any step, and except when a store that runs whole requests itself
// (an engine.RequestStore, such as a client of a server) answers the failure
// with no results at all: the lines that follow check the earlier steps'
// effects.
package storetest
