package engine

import "github.com/sluicehq/sluice/algo"

// Op names a command. The names are the wire names.
type Op string

// The commands. See the package documentation for their semantics.
const (
	OpHit          Op = "win.hit"
	OpGet          Op = "kv.get"
	OpSet          Op = "kv.set"
	OpDel          Op = "kv.del"
	OpTTL          Op = "kv.ttl"
	OpExpire       Op = "kv.expire"
	OpIncr         Op = "kv.incr"
	OpReserve      Op = "res.reserve"
	OpRefund       Op = "res.refund"
	OpAcquire      Op = "gate.acquire"
	OpRenew        Op = "gate.renew"
	OpRelease      Op = "gate.release"
	OpPaceTake     Op = "pace.take"
	OpPaceClaim    Op = "pace.claim"
	OpPacePenalize Op = "pace.penalize"
)

// SetMode is the condition of a kv.set.
type SetMode string

// The kv.set conditions.
const (
	SetAlways SetMode = ""   // set unconditionally (the wire also accepts "always")
	SetNX     SetMode = "nx" // set only if the key holds no live record
	SetXX     SetMode = "xx" // set only if the key holds a live record
)

// Window is one window of a win.hit.
type Window struct {
	Key      string    `json:"key"`
	Kind     algo.Kind `json:"kind"`
	Limit    int64     `json:"limit"`
	WindowMs int64     `json:"windowMs"`
}

func (w Window) limit() algo.Limit {
	return algo.Limit{Kind: w.Kind, Limit: w.Limit, Window: w.WindowMs}
}

// Budget is one budget of a res.reserve: a counter at Key admitting at most
// Limit units per window of WindowMs anchored at its first reservation.
// Refundable budgets are the ones a res.refund of the receipt returns.
type Budget struct {
	Key        string `json:"key"`
	Limit      int64  `json:"limit"`
	WindowMs   int64  `json:"windowMs"`
	Refundable bool   `json:"refundable,omitempty"`
}

// Command is one command of a batch. Which fields apply depends on Op; the
// constructors (Hit, Get, Set, …) fill the right ones, and Validate rejects
// a command that sets a field its Op does not use.
type Command struct {
	Op  Op     `json:"op"`
	Key string `json:"key,omitempty"` // kv.*, gate.*, pace.*; the receipt of res.refund

	Windows []Window `json:"windows,omitempty"` // win.hit
	Budgets []Budget `json:"budgets,omitempty"` // res.reserve
	Receipt string   `json:"receipt,omitempty"` // res.reserve: where the receipt is kept
	Cost    int64    `json:"cost,omitempty"`    // win.hit, res.reserve, pace.take, pace.claim

	Value   string  `json:"value,omitempty"`   // kv.set
	Mode    SetMode `json:"mode,omitempty"`    // kv.set
	KeepTTL bool    `json:"keepTtl,omitempty"` // kv.set
	TTLMs   int64   `json:"ttlMs,omitempty"`   // kv.set, kv.expire, kv.incr, gate.acquire, gate.renew
	Delta   int64   `json:"delta,omitempty"`   // kv.incr

	Limit          int64  `json:"limit,omitempty"`          // gate.acquire, pace.*
	Lease          string `json:"lease,omitempty"`          // gate.*
	WindowMs       int64  `json:"windowMs,omitempty"`       // pace.*
	RefillPermille *int64 `json:"refillPermille,omitempty"` // pace.*; nil means algo.DefaultRefillPermille
	MaxWaitMs      int64  `json:"maxWaitMs,omitempty"`      // pace.take, pace.claim
	At             int64  `json:"at,omitempty"`             // pace.claim: the slot being claimed
	DelayMs        int64  `json:"delayMs,omitempty"`        // pace.penalize
}

// Hit returns a win.hit of cost over the given windows.
func Hit(cost int64, windows ...Window) Command {
	return Command{Op: OpHit, Cost: cost, Windows: windows}
}

// Get returns a kv.get.
func Get(key string) Command { return Command{Op: OpGet, Key: key} }

// Set returns an unconditional kv.set with a TTL in milliseconds.
func Set(key, value string, ttlMs int64) Command {
	return Command{Op: OpSet, Key: key, Value: value, TTLMs: ttlMs}
}

// SetIf returns a conditional kv.set.
func SetIf(key, value string, ttlMs int64, mode SetMode) Command {
	return Command{Op: OpSet, Key: key, Value: value, TTLMs: ttlMs, Mode: mode}
}

// Del returns a kv.del.
func Del(key string) Command { return Command{Op: OpDel, Key: key} }

// TTL returns a kv.ttl.
func TTL(key string) Command { return Command{Op: OpTTL, Key: key} }

// Expire returns a kv.expire.
func Expire(key string, ttlMs int64) Command { return Command{Op: OpExpire, Key: key, TTLMs: ttlMs} }

// Incr returns a kv.incr; ttlMs applies only if the counter is created.
func Incr(key string, delta, ttlMs int64) Command {
	return Command{Op: OpIncr, Key: key, Delta: delta, TTLMs: ttlMs}
}

// Reserve returns a res.reserve of cost on every budget, keeping its receipt
// at receipt.
func Reserve(receipt string, cost int64, budgets ...Budget) Command {
	return Command{Op: OpReserve, Receipt: receipt, Cost: cost, Budgets: budgets}
}

// Refund returns a res.refund of the receipt at key.
func Refund(receipt string) Command { return Command{Op: OpRefund, Key: receipt} }

// Acquire returns a gate.acquire of lease on the gate at key.
func Acquire(key, lease string, limit, ttlMs int64) Command {
	return Command{Op: OpAcquire, Key: key, Lease: lease, Limit: limit, TTLMs: ttlMs}
}

// Renew returns a gate.renew.
func Renew(key, lease string, ttlMs int64) Command {
	return Command{Op: OpRenew, Key: key, Lease: lease, TTLMs: ttlMs}
}

// Release returns a gate.release.
func Release(key, lease string) Command { return Command{Op: OpRelease, Key: key, Lease: lease} }

// Pace describes a paced limiter for the pace.* commands.
type Pace struct {
	Key            string
	Limit          int64
	WindowMs       int64
	RefillPermille *int64
}

func (p Pace) cmd(op Op) Command {
	return Command{Op: op, Key: p.Key, Limit: p.Limit, WindowMs: p.WindowMs, RefillPermille: p.RefillPermille}
}

// Take returns a pace.take of cost grants, reserving a future slot if one is
// free within maxWaitMs.
func (p Pace) Take(cost, maxWaitMs int64) Command {
	c := p.cmd(OpPaceTake)
	c.Cost, c.MaxWaitMs = cost, maxWaitMs
	return c
}

// Claim returns a pace.claim of the slot at at.
func (p Pace) Claim(at, cost, maxWaitMs int64) Command {
	c := p.cmd(OpPaceClaim)
	c.At, c.Cost, c.MaxWaitMs = at, cost, maxWaitMs
	return c
}

// Penalize returns a pace.penalize holding every caller for delayMs.
func (p Pace) Penalize(delayMs int64) Command {
	c := p.cmd(OpPacePenalize)
	c.DelayMs = delayMs
	return c
}

func (c *Command) paceLimit() algo.PaceLimit {
	refill := int64(algo.DefaultRefillPermille)
	if c.RefillPermille != nil {
		refill = *c.RefillPermille
	}
	return algo.PaceLimit{Limit: c.Limit, Window: c.WindowMs, RefillPermille: refill}
}
