package redisstore

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/coalesce"
)

// noRetryCmd is a command that go-redis never sends twice. With MaxRetries
// -1 a single node's client already sends nothing twice, but a cluster
// client retries a command or a pipeline whose connection broke or timed
// out, up to MaxRedirects times, whatever MaxRetries says, and re-sends a
// whole pipeline whose first reply is a retryable error (TRYAGAIN,
// CLUSTERDOWN, LOADING) — though Redis may have run the rest. A command
// reporting NoRetry turns both off (go-redis 9.23: ClusterClient.process,
// processPipelineNodeConn, pipelineReadCmds). What is left is re-sent only
// when Redis did not run it: a command answered MOVED or ASK (it was
// refused, not run), and a pipeline whose connection could not be obtained
// (nothing was written).
type noRetryCmd struct{ *redis.Cmd }

func (noRetryCmd) NoRetry() bool { return true }

// do sends one command that must not be resent and returns its reply.
func do(ctx context.Context, r runner, args ...any) (any, error) {
	cmd := noRetryCmd{redis.NewCmd(ctx, args...)}
	_ = r.Process(ctx, cmd)
	return cmd.Result()
}

// pipeliner is a client that can send several commands as one pipeline:
// one write and one read per connection (per node of a cluster).
type pipeliner interface{ Pipeline() redis.Pipeliner }

// coalescer gathers concurrent batches into pipelines by natural batching,
// with no timer (see internal/coalesce): while fewer than its limit of
// round trips are in flight, a batch is sent at once, alone; a batch
// arriving while every place is taken queues, and the next sender to finish
// sends up to MaxPipelined of the queue as one pipeline. An idle store adds
// no delay; a busy one makes fewer, larger round trips.
type coalescer = coalesce.Queue[*pending]

// newCoalescer does not have its senders yield after each pipeline: Redis
// runs commands on one thread, and the lone batches that go while the next
// pipeline fills keep that thread busy. With the yield, pipelines were
// fuller and throughput fell by 8 % (docs/benchmarks.md, "A sender that
// yields after each batch").
func newCoalescer(limit int) *coalescer {
	return coalesce.New(coalesce.Config[*pending]{Limit: limit, Max: MaxPipelined})
}

// pending is a queued batch. Its sender writes reply and err, then closes
// done; a caller that gave up (its ctx ended) never reads them, and leaves
// c to the sender.
type pending struct {
	ctx   context.Context
	c     *call
	reply any
	err   error
	done  chan struct{}
}

// Abandoned reports that the caller gave up waiting: a batch not yet sent
// is then never sent, so never run.
func (p *pending) Abandoned() bool { return p.ctx.Err() != nil }

// coalesced runs c, at once while a sender is free and otherwise in a
// pipeline with the batches that queue alongside it. abandoned reports
// that the caller's ctx ended while c was queued: the batch may still run,
// so c belongs to its sender and must not be reused.
func (s *Store) coalesced(ctx context.Context, c *call) (reply any, err error, abandoned bool) {
	p, now := s.co.Enter(func() *pending { return &pending{ctx: ctx, c: c, done: make(chan struct{})} }, s.sendPipeline)
	if now {
		reply, err = s.eval(ctx, s.client, c)
		s.co.Leave(s.sendPipeline)
		return reply, err, false
	}
	select {
	case <-p.done:
		return p.reply, p.err, false
	case <-ctx.Done():
		return nil, ctx.Err(), true
	}
}

// sendPipeline runs the queued batches of batch and answers each: one
// alone, several as one pipeline of FCALLs (EVALSHAs on a server without
// functions). Each command has its own reply or error: a Redis error
// answers only its own command, and go-redis fails every command only
// when the connection fails (go-redis 9.23: pipelineReadCmds). A command
// refused for a reason the store recovers from — the library missing, a
// server without functions, OOM, NOSCRIPT — was not run, and is run again
// alone the way Apply runs a batch (see Store.eval). The pipeline serves
// several callers, so it is bounded by Config.Timeout, not by any caller's
// context.
func (s *Store) sendPipeline(batch []*pending) {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.Timeout)
	defer cancel()
	if len(batch) == 1 {
		p := batch[0]
		p.reply, p.err = s.eval(ctx, s.client, p.c)
		close(p.done)
		return
	}
	scripts := s.scripts.Load()
	loads := s.loads.Load()
	pipe := s.client.(pipeliner).Pipeline()
	cmds := make([]noRetryCmd, len(batch))
	for i, p := range batch {
		if scripts {
			cmds[i] = noRetryCmd{redis.NewCmd(ctx, p.c.evalshaArgs()...)}
		} else {
			cmds[i] = noRetryCmd{redis.NewCmd(ctx, p.c.fcallArgs()...)}
		}
		_ = pipe.Process(ctx, cmds[i])
	}
	_, _ = pipe.Exec(ctx)
	var wg sync.WaitGroup
	for i, p := range batch {
		reply, err := cmds[i].Result()
		if err != nil && recoverable(err, scripts) {
			// Rare: the library missing, functions refused, OOM,
			// NOSCRIPT. Each recovers on its own, as it would alone.
			wg.Go(func() {
				if scripts {
					p.reply, p.err = s.afterEvalSha(ctx, s.client, p.c, err)
				} else {
					p.reply, p.err = s.afterFcall(ctx, s.client, p.c, reply, err, loads)
				}
				close(p.done)
			})
			continue
		}
		p.reply, p.err = reply, err
		close(p.done)
	}
	wg.Wait()
}

// recoverable reports whether err, the error of one pipelined FCALL (or of
// an EVALSHA when scripts), is one the store recovers from by running the
// batch again alone: Redis refused the command, so it did not run.
func recoverable(err error, scripts bool) bool {
	if scripts {
		return redis.HasErrorPrefix(err, "NOSCRIPT")
	}
	for _, prefix := range []string{"Function not found", "unknown command", "OOM"} {
		if redis.HasErrorPrefix(err, prefix) {
			return true
		}
	}
	return fcallRefused(err)
}
