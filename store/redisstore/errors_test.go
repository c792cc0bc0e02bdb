package redisstore_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/store/redisstore"
)

// replyError is an error reply of Redis, as go-redis hands it over: a
// redis.Error.
type replyError string

func (e replyError) Error() string { return string(e) }
func (replyError) RedisError()     {}

// refusingClient is a redisstore.Client whose server answers every command
// of the batch code with the error its table holds (by command name:
// fcall, evalsha, eval, and FUNCTION LOAD as "function"), and reports
// noeviction to New. It records the commands it was sent.
type refusingClient struct {
	errs map[string]error
	mu   sync.Mutex
	sent []string
}

func (c *refusingClient) Process(_ context.Context, cmd redis.Cmder) error {
	name := strings.ToLower(cmd.Name())
	c.record(name)
	err, ok := c.errs[name]
	if !ok {
		err = replyError("ERR unexpected command " + name)
	}
	cmd.SetErr(err)
	return err
}

func (c *refusingClient) FunctionLoadReplace(context.Context, string) *redis.StringCmd {
	c.record("function")
	err, ok := c.errs["function"]
	if !ok {
		err = replyError("ERR unexpected FUNCTION LOAD")
	}
	return redis.NewStringResult("", err)
}

func (c *refusingClient) ConfigGet(context.Context, string) *redis.MapStringStringCmd {
	return redis.NewMapStringStringResult(map[string]string{"maxmemory-policy": "noeviction"}, nil)
}

func (c *refusingClient) Close() error { return nil }

func (c *refusingClient) record(name string) {
	c.mu.Lock()
	c.sent = append(c.sent, name)
	c.mu.Unlock()
}

// TestRedisErrorsNeverAllow answers the store's batches with every kind of
// error reply a Redis, a cluster or a replica gives — redirections, a slot
// busy migrating, a script running too long, a dataset loading, a primary
// down or turned replica, memory full, an ACL refusal, and a script the
// server lacks whose EVAL then fails — by the paths the store takes on
// them (a call refused, a library load refused, scripts). Each is an error
// wrapping engine.ErrUnavailable that carries Redis's words, with no
// result, never an admission: for a lone hit, a batch of several commands
// and a joint step. A stub stands in for Redis here: these replies are
// hard to provoke on demand; the real-server tests cover the main paths.
func TestRedisErrorsNeverAllow(t *testing.T) {
	type tc struct {
		name    string
		scripts bool // the store runs scripts (EVALSHA) from the start
		errs    map[string]error
		want    string // in the error
	}
	var cases []tc
	for _, reply := range []string{
		"CROSSSLOT Keys in request don't hash to the same slot",
		"MOVED 3999 127.0.0.1:6381",
		"ASK 3999 127.0.0.1:6381",
		"TRYAGAIN Multiple keys request during rehashing of slot",
		"CLUSTERDOWN The cluster is down",
		"BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.",
		"LOADING Redis is loading the dataset in memory",
		"MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
		"READONLY You can't write against a read only replica.",
		"NOREPLICAS Not enough good replicas to write.",
		"NOPERM this user has no permissions to access one of the keys used as arguments",
		"ERR The user executing the script can't run this command or subcommand script: sluice_batch, on @user_function:1.",
		"ERR ACL failure in script: User sluice has no permissions to run the 'time' command script: sluice_batch",
	} {
		// The function library's call refused; and the same answer to a
		// store running scripts, by EVALSHA, then by EVAL after NOSCRIPT.
		cases = append(cases,
			tc{name: "fcall " + reply, errs: map[string]error{"fcall": replyError(reply)}, want: reply},
			tc{name: "evalsha " + reply, scripts: true, errs: map[string]error{"evalsha": replyError(reply)}, want: reply},
			tc{name: "eval after NOSCRIPT " + reply, scripts: true, errs: map[string]error{
				"evalsha": replyError("NOSCRIPT No matching script. Please use EVAL."),
				"eval":    replyError(reply),
			}, want: reply})
	}
	noscript := replyError("NOSCRIPT No matching script. Please use EVAL.")
	cases = append(cases,
		// Over maxmemory Redis refuses a whole FCALL: the store runs the
		// batch as a script, whose write is refused in turn.
		tc{name: "OOM", errs: map[string]error{
			"fcall": replyError("OOM command not allowed when used memory > 'maxmemory'."), "evalsha": noscript,
			"eval": replyError("OOM command not allowed when used memory > 'maxmemory'. script: x"),
		}, want: "OOM"},
		// FCALL refused by the ACL: scripts, refused in turn.
		tc{name: "NOPERM fcall", errs: map[string]error{
			"fcall": replyError("NOPERM this user has no permissions to run the 'fcall' command"), "evalsha": noscript,
			"eval": replyError("NOPERM this user has no permissions to run the 'eval' command"),
		}, want: "'eval'"},
		// The library missing and its load refused, for good or for the
		// moment: the batch runs as a script, whose EVAL fails.
		tc{name: "library load refused", errs: map[string]error{
			"fcall": replyError("ERR Function not found"), "function": replyError("NOPERM this user has no permissions to run the 'function|load' command"),
			"evalsha": noscript, "eval": replyError("BUSY Redis is busy running a script."),
		}, want: "BUSY"},
		tc{name: "library load over maxmemory", errs: map[string]error{
			"fcall": replyError("ERR Function not found"), "function": replyError("OOM command not allowed when used memory > 'maxmemory'."),
			"evalsha": noscript, "eval": replyError("OOM command not allowed when used memory > 'maxmemory'. script: x"),
		}, want: "OOM"},
		// A server without functions at all.
		tc{name: "unknown command", errs: map[string]error{
			"fcall": replyError("ERR unknown command 'fcall'"), "evalsha": noscript,
			"eval": replyError("LOADING Redis is loading the dataset in memory"),
		}, want: "LOADING"},
	)

	win := engine.Window{Key: "w", Kind: algo.KindFixed, Limit: 10, WindowMs: 60_000}
	batches := map[string]func() []*engine.Batch{
		"lone hit": func() []*engine.Batch {
			return []*engine.Batch{{Partition: "p", Commands: []engine.Command{engine.Hit(1, win)}}}
		},
		"batch": func() []*engine.Batch {
			return []*engine.Batch{{Partition: "p", OperationID: "op", Commands: []engine.Command{
				engine.Hit(1, win), engine.Incr("n", 1, 60_000), engine.Reserve("r", 1, engine.Budget{Key: "b", Limit: 5, WindowMs: 60_000, Refundable: true}),
			}}}
		},
		"joint step": func() []*engine.Batch {
			return []*engine.Batch{
				{Partition: "src", Commands: []engine.Command{engine.Hit(1, win)}},
				{Partition: "who", Commands: []engine.Command{engine.Reserve("", 1, engine.Budget{Key: "b", Limit: 5, WindowMs: 60_000})}},
			}
		},
	}
	for _, c := range cases {
		for shape, build := range batches {
			client := &refusingClient{errs: c.errs}
			s, err := redisstore.New(client, freshConfig(nil))
			if err != nil {
				t.Fatal(err)
			}
			if c.scripts {
				redisstore.UseScripts(s)
			}
			bs := build()
			outs := []engine.StepResult{{Results: []engine.Result{{Allowed: true}}}, {Results: []engine.Result{{Allowed: true}}}}[:len(bs)]
			if len(bs) == 1 {
				err = s.Apply(t.Context(), bs[0], &outs[0])
			} else {
				err = s.ApplyJoint(t.Context(), bs, outs)
			}
			if !errors.Is(err, engine.ErrUnavailable) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s, %s: %v, want ErrUnavailable carrying %q (sent %v)", c.name, shape, err, c.want, client.sent)
			}
			for i, out := range outs {
				if len(out.Results) != 0 || out.Denied || out.Replayed {
					t.Errorf("%s, %s: result %d holds %+v after an error", c.name, shape, i, out)
				}
			}
			for _, name := range client.sent {
				if _, ok := c.errs[name]; !ok {
					t.Errorf("%s, %s: the store sent %s, which the case does not expect (sent %v)", c.name, shape, name, client.sent)
				}
			}
			s.Close()
		}
	}
}
