package redisstore_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/store/redisstore"
)

// loadGate is a go-redis hook that holds FUNCTION LOAD until released (or
// its context ends) and reports each FCALL answered "Function not found".
type loadGate struct {
	loading  chan struct{} // closed when a load is held
	once     sync.Once
	release  chan struct{}
	notFound chan struct{} // one send per FCALL answered "Function not found"
}

func (g *loadGate) DialHook(next redis.DialHook) redis.DialHook { return next }

func (g *loadGate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if args := cmd.Args(); cmd.Name() == "function" && len(args) > 1 && args[1] == "load" {
			g.once.Do(func() { close(g.loading) })
			select {
			case <-g.release:
			case <-ctx.Done():
			}
		}
		err := next(ctx, cmd)
		if cmd.Name() == "fcall" && redis.HasErrorPrefix(err, "Function not found") {
			g.notFound <- struct{}{}
		}
		return err
	}
}

func (g *loadGate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestLoadWaitEndsWithContext holds the library's load on a fresh server
// while a second caller, also finding the library missing, waits for it:
// when the second caller's context ends it returns at once with
// ErrUnavailable, its batch not run, rather than waiting for a load that
// may take the whole of another caller's Timeout.
func TestLoadWaitEndsWithContext(t *testing.T) {
	srv := redistest.Start(t)
	g := &loadGate{loading: make(chan struct{}), release: make(chan struct{}), notFound: make(chan struct{}, 2)}
	client := redis.NewClient(srv.Options())
	client.AddHook(g)
	cfg := freshConfig(nil)
	cfg.Pipeline = -1
	cfg.Timeout = redisstore.MaxTimeout
	s, err := redisstore.New(client, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	released := sync.OnceFunc(func() { close(g.release) })
	defer released()
	eng := engine.New(s)
	incr := engine.Incr("n", 1, 60_000)

	var loader engine.StepResult
	loaded := make(chan error, 1)
	go func() { loaded <- eng.Apply(t.Context(), "p", &loader, incr) }()
	<-g.notFound
	<-g.loading

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var waiter engine.StepResult
	waited := make(chan error, 1)
	go func() { waited <- eng.Apply(ctx, "q", &waiter, incr) }()
	<-g.notFound // the waiter found the library missing too
	cancel()
	select {
	case err := <-waited:
		if !errors.Is(err, engine.ErrUnavailable) || len(waiter.Results) != 0 {
			t.Fatalf("the waiter: %v, %+v; want ErrUnavailable and no results", err, waiter.Results)
		}
	case <-time.After(30 * time.Second): // a failure limit, not a measurement
		t.Fatal("the waiter's context ended, and it still waits for another caller's library load")
	}

	released()
	if err := <-loaded; err != nil || loader.Results[0].Int != 1 {
		t.Fatalf("the loader: %v, %+v; want 1", err, loader.Results)
	}
	var out engine.StepResult
	if err := eng.Apply(t.Context(), "q", &out, engine.Get("n")); err != nil || out.Results[0].Found {
		t.Fatalf("the waiter's counter holds %+v (%v), want none: its batch must not have run", out.Results, err)
	}
}
