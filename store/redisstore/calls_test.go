package redisstore_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"

	"github.com/redis/go-redis/v9"
)

// batchCalls is a go-redis hook that records every call of the batch code
// a client sends (FCALL, EVALSHA, EVAL), alone or in a pipeline: its
// command name and its clock argument (ARGV[2]).
type batchCalls struct {
	mu    sync.Mutex
	calls []batchCall
}

type batchCall struct{ name, clock string }

func (h *batchCalls) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *batchCalls) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.record(cmd)
		return next(ctx, cmd)
	}
}

func (h *batchCalls) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			h.record(cmd)
		}
		return next(ctx, cmds)
	}
}

// record keeps a call of the batch code: {name, function or script,
// numkeys, keys..., ARGV...}.
func (h *batchCalls) record(cmd redis.Cmder) {
	switch cmd.Name() {
	case "fcall", "evalsha", "eval":
	default:
		return
	}
	args := cmd.Args()
	clock := "(missing)"
	if numkeys, err := strconv.Atoi(fmt.Sprint(args[2])); err == nil && len(args) > 4+numkeys {
		clock = fmt.Sprint(args[4+numkeys])
	}
	h.mu.Lock()
	h.calls = append(h.calls, batchCall{cmd.Name(), clock})
	h.mu.Unlock()
}

// take returns the calls recorded since the last take.
func (h *batchCalls) take() []batchCall {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.calls
	h.calls = nil
	return c
}
