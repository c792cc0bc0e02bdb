package redisstore

import (
	"fmt"
	"strconv"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/engine"
)

// Key layout. Every key of a partition starts with
//
//	<Prefix>:{<partition>}:
//
// where the partition is escaped so that it cannot close the braces early
// ('%' → "%25", '}' → "%7D"). Redis Cluster hashes only what lies between
// the first '{' and the next '}', so every key of a partition shares one
// hash slot and a batch never spans slots. Records follow as "k:<key>";
// the replay record of step S of operation O is "r:<S>:<O>".

// appendTag appends the partition's escaped name to dst.
func appendTag(dst []byte, partition string) []byte {
	for i := 0; i < len(partition); i++ {
		switch c := partition[i]; c {
		case '%':
			dst = append(dst, "%25"...)
		case '}':
			dst = append(dst, "%7D"...)
		default:
			dst = append(dst, c)
		}
	}
	return dst
}

// partitionBase returns "<prefix>:{<escaped partition>}:".
func partitionBase(dst []byte, prefix, partition string) []byte {
	dst = append(dst, prefix...)
	dst = append(dst, ":{"...)
	dst = appendTag(dst, partition)
	return append(dst, "}:"...)
}

// The script's argument format (ARGV[1]); see lua/prelude.lua.
const scriptFormat = "1"

// loneFormat is ARGV[1] of a lone hit sent on its own (see lua/prelude.lua):
// the clock and the prefix follow, then the hit's spec, with none of a
// batch's fields.
const loneFormat = "hit 1"

// maxExactMs bounds the instants the script computes with: Lua numbers are
// doubles, exact for integers below 2^53, and every instant is summed with
// windows and TTLs of up to 120 days.
const maxExactMs = int64(1) << 52

// call holds the KEYS and ARGV of one script call, reused across calls.
type call struct {
	keys []string
	args []any
	// users holds the user key of each entry of keys ("" for the replay
	// record's), so that a key named twice is passed once.
	users []string
	// prefix is the partition's record key prefix: a prefix of the first
	// record key, sharing its bytes. buf holds it (its first plen bytes)
	// while the keys are built after it.
	prefix string
	plen   int
	buf    []byte
	// fcall is the whole FCALL command (name, function, key count, keys,
	// arguments), or EVALSHA or EVAL, built in one reused slice.
	fcall []any
	// spec is a lone hit's spec argument, built in place; args holds it
	// until the call is cleared.
	spec []byte
}

// clear drops the references a pooled call holds to the caller's strings.
func (c *call) clear() {
	clear(c.keys)
	clear(c.args)
	clear(c.users)
	clear(c.fcall)
	c.keys, c.args, c.users, c.fcall = c.keys[:0], c.args[:0], c.users[:0], c.fcall[:0]
	c.prefix = ""
}

// fcallArgs returns the FCALL command of the call, in c's reused slice.
func (c *call) fcallArgs() []any {
	c.fcall = append(c.fcall[:0], "fcall", functionName, len(c.keys))
	for _, k := range c.keys {
		c.fcall = append(c.fcall, k)
	}
	c.fcall = append(c.fcall, c.args...)
	return c.fcall
}

// evalshaArgs returns the EVALSHA command of the call, in c's reused slice.
func (c *call) evalshaArgs() []any { return c.scriptArgs("evalsha", batchSHA) }

// evalArgs returns the EVAL command of the call, in c's reused slice.
func (c *call) evalArgs() []any { return c.scriptArgs("eval", batchScript) }

func (c *call) scriptArgs(name, script string) []any {
	c.fcall = append(c.fcall[:0], name, script, len(c.keys))
	for _, k := range c.keys {
		c.fcall = append(c.fcall, k)
	}
	c.fcall = append(c.fcall, c.args...)
	return c.fcall
}

// isLone reports whether b is a lone hit of one window without an
// operation id: the batch code's compact reply.
func isLone(b *engine.Batch) bool {
	return len(b.Commands) == 1 && b.OperationID == "" && b.Commands[0].Op == engine.OpHit && len(b.Commands[0].Windows) == 1
}

// replayTTLArg is the replay records' lifetime as the script reads it.
var replayTTLArg any = strconv.FormatInt(engine.ReplayTTL.Milliseconds(), 10)

// encode fills c for b. It validates every command again (the engine has
// already; this keeps the script's arithmetic in its exact range even for a
// caller that skipped the engine) and checks what that validation leaves to
// the store: that every number is one the script computes exactly. On
// error nothing has been sent. With compact, a lone hit (isLone) takes the
// lone form, {LONE, clock, prefix, spec}, with its window's record as the
// only key, where spec is "<grace> <cost> <kind> <limit> <window>" in
// decimal; a joint step's batches, which the script reads as batches,
// never do.
func (c *call) encode(b *engine.Batch, cfg *Config, compact bool) error {
	c.clear()
	if n := len(b.Commands); n == 0 || n > engine.MaxCommandsPerStep {
		return fmt.Errorf("%w: %d commands in a batch (want 1…%d)", engine.ErrInvalid, n, engine.MaxCommandsPerStep)
	}
	c.buf = partitionBase(c.buf[:0], cfg.Prefix, b.Partition)
	base := len(c.buf)

	now, grace := "", int64(0)
	if cfg.Clock != nil {
		ms := engine.UnixMilli(cfg.Clock)
		if ms < -maxExactMs || ms > maxExactMs {
			return fmt.Errorf("%w: redisstore: the clock reads %d ms, outside ±2^52", engine.ErrUnavailable, ms)
		}
		now, grace = strconv.FormatInt(ms, 10), overrideGrace.Milliseconds()
	}
	hash := ""
	if b.OperationID != "" {
		c.buf = append(c.buf[:base], "r:"...)
		c.buf = strconv.AppendInt(c.buf, int64(b.Step), 10)
		c.buf = append(c.buf, ':')
		c.buf = append(c.buf, b.OperationID...)
		c.keys = append(c.keys, string(c.buf))
		c.users = append(c.users, "")
		hash = string(b.Hash[:])
	}
	c.buf = append(c.buf[:base], "k:"...)
	c.plen = len(c.buf)
	if compact && isLone(b) {
		cmd := &b.Commands[0]
		if err := cmd.Validate(); err != nil {
			return fmt.Errorf("command 0 (%s): %w", cmd.Op, err)
		}
		w := &cmd.Windows[0]
		c.key(w.Key)
		c.spec = strconv.AppendInt(c.spec[:0], grace, 10)
		for _, v := range [...]int64{cmd.Cost, int64(w.Kind), w.Limit, w.WindowMs} {
			c.spec = strconv.AppendInt(append(c.spec, ' '), v, 10)
		}
		c.args = append(c.args, loneFormat, now, c.prefix, c.spec)
		return nil
	}
	// ARGV[3], the prefix, is set once the first record key is built.
	c.args = append(c.args, scriptFormat, now, nil, hash, replayTTLArg, grace, len(b.Commands))
	for i := range b.Commands {
		cmd := &b.Commands[i]
		err := cmd.Validate()
		if err == nil {
			err = c.command(cmd)
		}
		if err != nil {
			return fmt.Errorf("command %d (%s): %w", i, cmd.Op, err)
		}
	}
	if c.prefix == "" {
		c.prefix = string(c.buf[:c.plen])
	}
	c.args[2] = c.prefix
	return nil
}

// key returns the 1-based KEYS index of the record at user key k, adding
// it on first use.
func (c *call) key(k string) int {
	for i, u := range c.users {
		if u == k {
			return i + 1
		}
	}
	c.buf = append(c.buf[:c.plen], k...)
	rk := string(c.buf)
	if c.prefix == "" {
		c.prefix = rk[:c.plen]
	}
	c.keys = append(c.keys, rk)
	c.users = append(c.users, k)
	return len(c.keys)
}

// The script's op codes.
var opCodes = map[engine.Op]string{
	engine.OpHit: "hit", engine.OpGet: "get", engine.OpSet: "set", engine.OpDel: "del",
	engine.OpTTL: "ttl", engine.OpExpire: "expire", engine.OpIncr: "incr",
	engine.OpReserve: "reserve", engine.OpRefund: "refund",
	engine.OpAcquire: "acquire", engine.OpRenew: "renew", engine.OpRelease: "release",
	engine.OpPaceTake: "take", engine.OpPaceClaim: "claim", engine.OpPacePenalize: "penalize",
}

func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// command appends one command's op code and fields, in the order the
// script reads them.
func (c *call) command(cmd *engine.Command) error {
	code, ok := opCodes[cmd.Op]
	if !ok {
		return fmt.Errorf("%w: unknown op %q", engine.ErrInvalid, cmd.Op)
	}
	c.args = append(c.args, code)
	switch cmd.Op {
	case engine.OpHit:
		c.args = append(c.args, cmd.Cost, len(cmd.Windows))
		for _, w := range cmd.Windows {
			c.args = append(c.args, c.key(w.Key), int(w.Kind), w.Limit, w.WindowMs)
		}
	case engine.OpGet, engine.OpDel, engine.OpTTL, engine.OpRefund:
		c.args = append(c.args, c.key(cmd.Key))
	case engine.OpSet:
		mode := string(cmd.Mode)
		if cmd.Mode != engine.SetNX && cmd.Mode != engine.SetXX {
			mode = ""
		}
		c.args = append(c.args, c.key(cmd.Key), cmd.Value, mode, flag(cmd.KeepTTL), cmd.TTLMs)
	case engine.OpExpire:
		c.args = append(c.args, c.key(cmd.Key), cmd.TTLMs)
	case engine.OpIncr:
		// The delta spans int64: the script adds it as text, exactly.
		c.args = append(c.args, c.key(cmd.Key), strconv.FormatInt(cmd.Delta, 10), cmd.TTLMs)
	case engine.OpReserve:
		receipt := 0
		if cmd.Receipt != "" {
			receipt = c.key(cmd.Receipt)
		}
		c.args = append(c.args, receipt, cmd.Cost, len(cmd.Budgets))
		for _, b := range cmd.Budgets {
			c.args = append(c.args, c.key(b.Key), b.Limit, b.WindowMs, flag(b.Refundable))
		}
	case engine.OpAcquire:
		c.args = append(c.args, c.key(cmd.Key), cmd.Lease, cmd.Limit, cmd.TTLMs)
	case engine.OpRenew:
		c.args = append(c.args, c.key(cmd.Key), cmd.Lease, cmd.TTLMs)
	case engine.OpRelease:
		c.args = append(c.args, c.key(cmd.Key), cmd.Lease)
	case engine.OpPaceTake, engine.OpPaceClaim, engine.OpPacePenalize:
		refill := int64(algo.DefaultRefillPermille)
		if cmd.RefillPermille != nil {
			refill = *cmd.RefillPermille
		}
		c.args = append(c.args, c.key(cmd.Key), cmd.Limit, cmd.WindowMs, refill)
		switch cmd.Op {
		case engine.OpPaceTake:
			c.args = append(c.args, cmd.Cost, cmd.MaxWaitMs)
		case engine.OpPaceClaim:
			if cmd.At > maxExactMs {
				return fmt.Errorf("%w: claimed slot %d beyond 2^52 ms, outside the instants the Redis store computes exactly", engine.ErrInvalid, cmd.At)
			}
			c.args = append(c.args, cmd.Cost, cmd.MaxWaitMs, cmd.At)
		default:
			c.args = append(c.args, cmd.DelayMs)
		}
	}
	return nil
}
