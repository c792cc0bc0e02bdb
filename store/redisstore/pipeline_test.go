package redisstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/store/redisstore"
)

// gate is a go-redis hook that counts the round trips of batches — single
// FCALLs and pipelines — and can hold the next single FCALL until
// released, so that the batches arriving meanwhile queue.
type gate struct {
	hold      atomic.Bool
	held      chan struct{} // closed when a held FCALL is waiting
	release   chan struct{}
	singles   atomic.Int64 // FCALLs sent alone
	pipelines atomic.Int64 // pipelines sent
	piped     atomic.Int64 // FCALLs sent in pipelines
	// mutate, when set, may alter a pipeline's commands before they
	// are sent.
	mutate func([]redis.Cmder)
}

func newGate() *gate {
	return &gate{held: make(chan struct{}), release: make(chan struct{})}
}

func (g *gate) DialHook(next redis.DialHook) redis.DialHook { return next }

func (g *gate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if isBatch(cmd) {
			g.singles.Add(1)
			if g.hold.CompareAndSwap(true, false) {
				close(g.held)
				<-g.release
			}
		}
		return next(ctx, cmd)
	}
}

func (g *gate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) == 0 || !isBatch(cmds[0]) {
			return next(ctx, cmds) // a connection's set-up
		}
		g.pipelines.Add(1)
		g.piped.Add(int64(len(cmds)))
		if g.mutate != nil {
			g.mutate(cmds)
		}
		return next(ctx, cmds)
	}
}

// isBatch reports whether cmd runs a batch.
func isBatch(cmd redis.Cmder) bool { return cmd.Name() == "fcall" || cmd.Name() == "evalsha" }

// gatedStore returns a store coalescing batches behind one round trip in
// flight, on a client with g as a hook; the function library is loaded
// and the counters are zero.
func gatedStore(t *testing.T, g *gate) (*redisstore.Store, *engine.Engine) {
	t.Helper()
	s, eng, _ := gatedStoreOn(t, g)
	return s, eng
}

// gatedStoreOn is gatedStore that also returns a client of its server.
func gatedStoreOn(t *testing.T, g *gate) (*redisstore.Store, *engine.Engine, *redis.Client) {
	t.Helper()
	srv := redistest.Start(t)
	admin := srv.Client(t)
	client := redis.NewClient(srv.Options())
	client.AddHook(g)
	cfg := freshConfig(nil)
	cfg.Pipeline = 1
	s, err := redisstore.New(client, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	eng := engine.New(s)
	var out engine.StepResult
	if err := eng.Apply(t.Context(), "warm", &out, engine.Get("k")); err != nil {
		t.Fatal(err)
	}
	g.singles.Store(0)
	return s, eng, admin
}

// waitQueued waits until n batches are queued behind the held FCALL.
func waitQueued(t *testing.T, s *redisstore.Store, n int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for redisstore.Queued(s) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d batches queued after a minute, want %d", redisstore.Queued(s), n)
		}
		time.Sleep(time.Millisecond) // polling a condition, not timing
	}
}

func hit(key string) engine.Command { return hitN(key, 1) }

func hitN(key string, cost int64) engine.Command {
	return engine.Hit(cost, engine.Window{Key: key, Kind: algo.KindFixed, Limit: 100, WindowMs: 60_000})
}

// TestPipelineCoalesces holds the one round trip allowed in flight while
// more batches arrive: they queue and go out as a single pipeline, and
// each caller gets its own result.
func TestPipelineCoalesces(t *testing.T) {
	g := newGate()
	s, eng := gatedStore(t, g)
	g.hold.Store(true)
	const n = 20
	errs := make([]error, n)
	outs := make([]engine.StepResult, n)
	var wg sync.WaitGroup
	wg.Go(func() { errs[0] = eng.Apply(t.Context(), "p0", &outs[0], hit("k"), hit("k0")) })
	<-g.held
	for i := 1; i < n; i++ {
		wg.Go(func() {
			p := "p" + strconv.Itoa(i)
			errs[i] = eng.Apply(t.Context(), p, &outs[i], hitN("k", int64(i+1)), hit("k"+strconv.Itoa(i)))
		})
	}
	waitQueued(t, s, n-1)
	close(g.release)
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("batch %d: %v", i, errs[i])
		}
		// Batch i's partition's k was hit with a cost of i+1, its own
		// key with 1.
		res := outs[i].Results
		if len(res) != 2 {
			t.Fatalf("batch %d: %d results, want 2", i, len(res))
		}
		if got := res[0].Remaining; got != int64(100-(i+1)) {
			t.Errorf("batch %d: k remaining %d, want %d", i, got, 100-(i+1))
		}
		if got := res[1].Remaining; got != 99 {
			t.Errorf("batch %d: own key remaining %d, want 9", i, got)
		}
	}
	if singles, pipes, piped := g.singles.Load(), g.pipelines.Load(), g.piped.Load(); singles != 1 || pipes != 1 || piped != n-1 {
		t.Errorf("%d batches took %d single FCALLs and %d pipelines of %d FCALLs, want 1 and 1 of %d", n, singles, pipes, piped, n-1)
	}
}

// TestPipelineQueuedCancel cancels a caller while its batch is queued: it
// returns at once with ErrUnavailable, and the others are unaffected.
func TestPipelineQueuedCancel(t *testing.T) {
	g := newGate()
	s, eng := gatedStore(t, g)
	g.hold.Store(true)
	const n = 5
	errs := make([]error, n)
	outs := make([]engine.StepResult, n)
	var wg sync.WaitGroup
	wg.Go(func() { errs[0] = eng.Apply(t.Context(), "p0", &outs[0], hit("k")) })
	<-g.held
	ctx, cancel := context.WithCancel(t.Context())
	cancelled := make(chan error, 1)
	go func() {
		var out engine.StepResult
		cancelled <- eng.Apply(ctx, "gone", &out, hit("k"))
	}()
	waitQueued(t, s, 1)
	for i := 1; i < n; i++ {
		wg.Go(func() { errs[i] = eng.Apply(t.Context(), "p"+strconv.Itoa(i), &outs[i], hit("k")) })
	}
	waitQueued(t, s, n)
	cancel()
	// The round trip in flight is still held: the cancelled caller
	// returns without waiting for it.
	if err := <-cancelled; !errors.Is(err, engine.ErrUnavailable) || !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled caller: %v, want ErrUnavailable wrapping context.Canceled", err)
	}
	close(g.release)
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("batch %d: %v", i, errs[i])
		}
		if r := outs[i].Results; len(r) != 1 || !r[0].Allowed || r[0].Remaining != 99 {
			t.Errorf("batch %d: %+v, want one allowed hit leaving 99", i, r)
		}
	}
	// The cancelled batch was dropped from the queue before it was sent.
	if pipes, piped := g.pipelines.Load(), g.piped.Load(); pipes != 1 || piped != n-1 {
		t.Errorf("%d pipelines of %d FCALLs, want 1 of %d", pipes, piped, n-1)
	}
	var out engine.StepResult
	if err := eng.Apply(t.Context(), "gone", &out, engine.Get("x"), hit("k")); err != nil {
		t.Fatal(err)
	}
	if r := out.Results[1]; r.Remaining != 99 {
		t.Errorf("the cancelled batch's key: remaining %d after one more hit, want 99 (it never ran)", r.Remaining)
	}
}

// TestPipelineCommandError plants a key of the wrong type under one
// partition and makes Redis refuse another partition's command: each fails
// only its own caller, and the batches pipelined with them succeed.
func TestPipelineCommandError(t *testing.T) {
	g := newGate()
	s, eng := gatedStore(t, g)
	var out engine.StepResult
	if err := eng.Apply(t.Context(), "typed", &out, engine.Set("k", "v", 60_000)); err != nil {
		t.Fatal(err)
	}
	g.singles.Store(0)
	// Redis refuses the FCALL of partition "refused": its key count is
	// no number.
	g.mutate = func(cmds []redis.Cmder) {
		for _, cmd := range cmds {
			if args := cmd.Args(); strings.Contains(fmt.Sprint(args...), "refused") {
				args[2] = "many"
			}
		}
	}
	g.hold.Store(true)
	parts := []string{"p0", "p1", "typed", "p2", "refused", "p3"}
	errs := make([]error, len(parts))
	outs := make([]engine.StepResult, len(parts))
	var wg sync.WaitGroup
	wg.Go(func() { errs[0] = eng.Apply(t.Context(), parts[0], &outs[0], hit("k")) })
	<-g.held
	for i := 1; i < len(parts); i++ {
		wg.Go(func() { errs[i] = eng.Apply(t.Context(), parts[i], &outs[i], hit("k")) })
	}
	waitQueued(t, s, len(parts)-1)
	close(g.release)
	wg.Wait()
	for i, p := range parts {
		switch p {
		case "typed":
			if !errors.Is(errs[i], engine.ErrWrongType) {
				t.Errorf("%s: %v, want ErrWrongType", p, errs[i])
			}
		case "refused":
			var rerr redis.Error
			if !errors.Is(errs[i], engine.ErrUnavailable) || !errors.As(errs[i], &rerr) {
				t.Errorf("%s: %v, want ErrUnavailable wrapping Redis's error", p, errs[i])
			}
		default:
			if errs[i] != nil {
				t.Errorf("%s: %v", p, errs[i])
			} else if r := outs[i].Results; len(r) != 1 || !r[0].Allowed || r[0].Remaining != 99 {
				t.Errorf("%s: %+v, want one allowed hit leaving 99", p, r)
			}
		}
	}
	if pipes, piped := g.pipelines.Load(), g.piped.Load(); pipes != 1 || piped != int64(len(parts)-1) {
		t.Errorf("%d pipelines of %d FCALLs, want 1 of %d", pipes, piped, len(parts)-1)
	}
}

// cutConn passes everything through until cut is set: then, after the next
// write of an FCALL, it waits for Redis to answer (so the command ran),
// drops the answer and the connection, and reports io.EOF — a connection
// that broke after Redis ran the command, which go-redis may retry.
type cutConn struct {
	net.Conn
	cut     *atomic.Bool
	pending bool
}

func (c *cutConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	if err == nil && bytes.Contains(bytes.ToLower(b), []byte("fcall")) && c.cut.CompareAndSwap(true, false) {
		c.pending = true
	}
	return n, err
}

func (c *cutConn) Read(b []byte) (int, error) {
	if c.pending {
		c.pending = false
		_, _ = c.Conn.Read(make([]byte, 1<<16)) // Redis answered: it ran the command
		c.Conn.Close()
		return 0, io.EOF
	}
	return c.Conn.Read(b)
}

// TestClusterNeverResends breaks a cluster connection after Redis ran a
// batch, alone and in a pipeline: a cluster client retries such a
// command or pipeline up to MaxRedirects times whatever MaxRetries says,
// and the store must keep it from running the batch twice.
func TestClusterNeverResends(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	var cut atomic.Bool
	opts := cl.Options()
	opts.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
		var d net.Dialer
		conn, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &cutConn{Conn: conn, cut: &cut}, nil
	}
	client := redis.NewClusterClient(opts)
	g := newGate()
	client.AddHook(g)
	cfg := freshConfig(nil)
	cfg.Pipeline = 1
	s, err := redisstore.New(client, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	eng := engine.New(s)
	var out engine.StepResult
	// Load the library on every master before cutting anything.
	for i := range 8 {
		if err := eng.Apply(t.Context(), "warm"+strconv.Itoa(i), &out, engine.Get("k")); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("alone", func(t *testing.T) {
		cut.Store(true)
		if err := eng.Apply(t.Context(), "alone", &out, hit("k")); !errors.Is(err, engine.ErrUnavailable) {
			t.Fatalf("a batch whose connection broke: %v, want ErrUnavailable", err)
		}
		if err := eng.Apply(t.Context(), "alone", &out, hit("k")); err != nil {
			t.Fatal(err)
		}
		if r := out.Results[0].Remaining; r != 98 {
			t.Errorf("after the broken batch and one more hit: remaining %d, want 98 (the broken one ran once)", r)
		}
	})

	t.Run("pipelined", func(t *testing.T) {
		g.hold.Store(true)
		const n = 12
		errs := make([]error, n)
		var wg sync.WaitGroup
		p := func(i int) string { return "q" + strconv.Itoa(i) }
		wg.Go(func() {
			var out engine.StepResult
			errs[0] = eng.Apply(t.Context(), p(0), &out, hit("k"))
		})
		<-g.held
		for i := 1; i < n; i++ {
			wg.Go(func() {
				var out engine.StepResult
				errs[i] = eng.Apply(t.Context(), p(i), &out, hit("k"))
			})
		}
		waitQueued(t, s, n-1)
		// Break the pipeline's first write to a node.
		g.mutate = func([]redis.Cmder) { cut.Store(true) }
		close(g.release)
		wg.Wait()
		failed := 0
		for i := range n {
			if errs[i] != nil {
				if !errors.Is(errs[i], engine.ErrUnavailable) {
					t.Errorf("batch %d: %v, want ErrUnavailable", i, errs[i])
				}
				failed++
			}
			if err := eng.Apply(t.Context(), p(i), &out, hit("k")); err != nil {
				t.Fatal(err)
			}
			// A batch that failed ran once or not at all; one that
			// succeeded, once.
			if r := out.Results[0].Remaining; r != 98 && (errs[i] == nil || r != 99) {
				t.Errorf("partition %s: remaining %d after its batch (error %v) and one more hit: it ran %d times", p(i), r, errs[i], 99-r)
			}
		}
		if failed == 0 {
			t.Error("no batch saw the broken connection")
		}
	})
}

// TestPipelineRecovers empties the server's functions, or its script
// cache, just before a pipeline is sent: every command of the pipeline is
// refused, and each batch recovers as a batch sent alone does (loading the
// library, or EVAL after NOSCRIPT), with its own result.
func TestPipelineRecovers(t *testing.T) {
	for _, tc := range []struct {
		name    string
		scripts bool
		flush   func(context.Context, *redis.Client) error
	}{
		{"functions flushed", false, func(ctx context.Context, c *redis.Client) error { return c.FunctionFlush(ctx).Err() }},
		{"scripts flushed", true, func(ctx context.Context, c *redis.Client) error { return c.ScriptFlush(ctx).Err() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newGate()
			s, eng, admin := gatedStoreOn(t, g)
			if tc.scripts {
				redisstore.UseScripts(s)
			}
			var flushErr error
			g.mutate = func([]redis.Cmder) { flushErr = tc.flush(context.Background(), admin) }
			g.hold.Store(true)
			const n = 8
			errs := make([]error, n)
			outs := make([]engine.StepResult, n)
			var wg sync.WaitGroup
			wg.Go(func() { errs[0] = eng.Apply(t.Context(), "p0", &outs[0], hit("k")) })
			<-g.held
			for i := 1; i < n; i++ {
				wg.Go(func() { errs[i] = eng.Apply(t.Context(), "p"+strconv.Itoa(i), &outs[i], hitN("k", int64(i+1))) })
			}
			waitQueued(t, s, n-1)
			close(g.release)
			wg.Wait()
			if flushErr != nil {
				t.Fatal(flushErr)
			}
			for i := range n {
				if errs[i] != nil {
					t.Fatalf("batch %d: %v", i, errs[i])
				}
				if r := outs[i].Results; len(r) != 1 || !r[0].Allowed || r[0].Remaining != int64(100-(i+1)) {
					t.Errorf("batch %d: %+v, want one allowed hit leaving %d", i, r, 100-(i+1))
				}
			}
			if pipes, piped := g.pipelines.Load(), g.piped.Load(); pipes != 1 || piped != n-1 {
				t.Errorf("%d pipelines of %d batches, want 1 of %d", pipes, piped, n-1)
			}
		})
	}
}
