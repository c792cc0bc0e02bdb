package engine

import (
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/sluicehq/sluice/algo"
)

// Bounds of a request. They are enforced by Validate before any store is
// called, by every client before sending and by the server on receipt.
const (
	MaxSteps           = 16
	MaxCommandsPerStep = 8
	MaxCommands        = 32
	MaxWindowsPerHit   = 4
	MaxBudgets         = 4
	MaxValueBytes      = 2 << 10
	MaxKeyBytes        = 512
	MaxOperationID     = 128
	MinTTLMs           = int64(time.Second / time.Millisecond)
	MaxTTLMs           = algo.MaxWindow
	// ReplayTTL is how long a replay record is kept: it covers the ±60 s
	// signature skew on both sides with room to spare.
	ReplayTTL = 180 * time.Second
)

// Validate checks every bound of r and of each of its commands. It is cheap
// and allocation-free for valid input.
func (r *Request) Validate() error {
	switch r.Mode {
	case "", Sequential, All:
	default:
		return invalid("mode %q (want sequential or all)", r.Mode)
	}
	if len(r.OperationID) > MaxOperationID {
		return invalid("operation id of %d bytes (max %d)", len(r.OperationID), MaxOperationID)
	}
	if !utf8.ValidString(r.OperationID) {
		return invalid("operation id is not valid UTF-8")
	}
	if len(r.Steps) == 0 || len(r.Steps) > MaxSteps {
		return invalid("%d steps (want 1…%d)", len(r.Steps), MaxSteps)
	}
	total := 0
	for i := range r.Steps {
		if err := r.Steps[i].Validate(); err != nil {
			return fmt.Errorf("step %d: %w", i, err)
		}
		total += len(r.Steps[i].Commands)
	}
	if total > MaxCommands {
		return invalid("%d commands (max %d)", total, MaxCommands)
	}
	return nil
}

// Validate checks the bounds of one step.
func (s *Step) Validate() error {
	if err := checkKey("partition", s.Partition); err != nil {
		return err
	}
	if len(s.Commands) == 0 || len(s.Commands) > MaxCommandsPerStep {
		return invalid("%d commands in a step (want 1…%d)", len(s.Commands), MaxCommandsPerStep)
	}
	for i := range s.Commands {
		if err := s.Commands[i].Validate(); err != nil {
			return fmt.Errorf("command %d: %w", i, err)
		}
	}
	return nil
}

// Validate checks one command: its Op is known, every field it uses is in
// bounds and no field it does not use is set.
func (c *Command) Validate() error {
	var used fields
	switch c.Op {
	case OpHit:
		used = fWindows | fCost
		if len(c.Windows) == 0 || len(c.Windows) > MaxWindowsPerHit {
			return invalid("%s with %d windows (want 1…%d)", c.Op, len(c.Windows), MaxWindowsPerHit)
		}
		for i, w := range c.Windows {
			if err := checkKey("window key", w.Key); err != nil {
				return err
			}
			// By position, never by key: a key is often a raw
			// identifier, and errors reach logs.
			for j, o := range c.Windows[:i] {
				if o.Key == w.Key {
					return invalid("windows %d and %d of one hit share a key", j, i)
				}
			}
			l := w.limit()
			if err := l.Validate(); err != nil {
				return wrapAlgo(err)
			}
			if err := l.ValidateCost(c.Cost); err != nil {
				return wrapAlgo(err)
			}
		}
	case OpGet, OpDel, OpTTL:
		used = fKey
	case OpSet:
		used = fKey | fValue | fMode | fKeepTTL | fTTL
		if len(c.Value) > MaxValueBytes {
			return invalid("value of %d bytes (max %d)", len(c.Value), MaxValueBytes)
		}
		if !utf8.ValidString(c.Value) {
			return invalid("value is not valid UTF-8")
		}
		switch c.Mode {
		case SetAlways, SetNX, SetXX, "always":
		default:
			return invalid("set mode %q (want always, nx or xx)", c.Mode)
		}
		if err := checkTTL(c.TTLMs); err != nil {
			return err
		}
	case OpExpire:
		used = fKey | fTTL
		if err := checkTTL(c.TTLMs); err != nil {
			return err
		}
	case OpIncr:
		used = fKey | fDelta | fTTL
		if err := checkTTL(c.TTLMs); err != nil {
			return err
		}
	case OpReserve:
		used = fBudgets | fReceipt | fCost
		if err := c.validateReserve(); err != nil {
			return err
		}
	case OpRefund:
		used = fKey
	case OpAcquire:
		used = fKey | fLease | fLimit | fTTL
		if c.Limit < 1 || c.Limit > algo.MaxGateLimit {
			return invalid("gate limit %d outside 1…%d", c.Limit, algo.MaxGateLimit)
		}
		if err := checkLease(c.Lease); err != nil {
			return err
		}
		if err := checkTTL(c.TTLMs); err != nil {
			return err
		}
	case OpRenew:
		used = fKey | fLease | fTTL
		if err := checkLease(c.Lease); err != nil {
			return err
		}
		if err := checkTTL(c.TTLMs); err != nil {
			return err
		}
	case OpRelease:
		used = fKey | fLease
		if err := checkLease(c.Lease); err != nil {
			return err
		}
	case OpPaceTake, OpPaceClaim, OpPacePenalize:
		used = fKey | fPace
		if err := wrapAlgo(c.paceLimit().Validate()); err != nil {
			return err
		}
		switch c.Op {
		case OpPaceTake, OpPaceClaim:
			used |= fCost | fMaxWait
			if c.Cost < 1 || c.Cost > c.Limit {
				return invalid("pace cost %d outside 1…%d", c.Cost, c.Limit)
			}
			if c.MaxWaitMs < 0 || c.MaxWaitMs > MaxTTLMs {
				return invalid("max wait %d ms outside 0…%d", c.MaxWaitMs, MaxTTLMs)
			}
			if c.Op == OpPaceClaim {
				used |= fAt
				if c.At < 1 {
					return invalid("claimed slot %d must be positive", c.At)
				}
			}
		case OpPacePenalize:
			used |= fDelay
			if c.DelayMs < 1 || c.DelayMs > MaxTTLMs {
				return invalid("penalty %d ms outside 1…%d", c.DelayMs, MaxTTLMs)
			}
		}
	default:
		return invalid("unknown op %q", c.Op)
	}
	if used&fKey != 0 {
		if err := checkKey("key", c.Key); err != nil {
			return err
		}
	}
	if stray := c.set() &^ used; stray != 0 {
		return invalid("%s does not take %s", c.Op, stray)
	}
	return nil
}

func (c *Command) validateReserve() error {
	if len(c.Budgets) == 0 || len(c.Budgets) > MaxBudgets {
		return invalid("%s with %d budgets (want 1…%d)", c.Op, len(c.Budgets), MaxBudgets)
	}
	refundable := false
	for i, b := range c.Budgets {
		if err := checkKey("budget key", b.Key); err != nil {
			return err
		}
		// By position, never by key, as for windows.
		if b.Key == c.Receipt {
			return invalid("budget %d's key is also the receipt", i)
		}
		for j, o := range c.Budgets[:i] {
			if o.Key == b.Key {
				return invalid("budgets %d and %d of one reservation share a key", j, i)
			}
		}
		if err := (algo.Budget{Limit: b.Limit, Window: b.WindowMs}).Validate(); err != nil {
			return wrapAlgo(err)
		}
		if b.WindowMs < MinTTLMs {
			return invalid("budget window %d ms under %d", b.WindowMs, MinTTLMs)
		}
		if c.Cost < 1 || c.Cost > b.Limit {
			return invalid("cost %d outside 1…%d", c.Cost, b.Limit)
		}
		refundable = refundable || b.Refundable
	}
	if refundable || c.Receipt != "" {
		if err := checkKey("receipt", c.Receipt); err != nil {
			return err
		}
		if !refundable {
			return invalid("a receipt without a refundable budget")
		}
	}
	return nil
}

func checkKey(what, k string) error {
	if len(k) == 0 || len(k) > MaxKeyBytes {
		return invalid("%s of %d bytes (want 1…%d)", what, len(k), MaxKeyBytes)
	}
	if k[0] == 0 {
		return invalid("%s starts with a NUL byte (reserved)", what)
	}
	if !utf8.ValidString(k) {
		// The wire (JSON) would map distinct invalid sequences to
		// one string.
		return invalid("%s is not valid UTF-8", what)
	}
	return nil
}

func checkTTL(ms int64) error {
	if ms < MinTTLMs || ms > MaxTTLMs {
		return invalid("ttl %d ms outside %d…%d", ms, MinTTLMs, MaxTTLMs)
	}
	return nil
}

func checkLease(id string) error {
	if len(id) == 0 || len(id) > algo.MaxLeaseID {
		return invalid("lease id of %d bytes (want 1…%d)", len(id), algo.MaxLeaseID)
	}
	if !utf8.ValidString(id) {
		return invalid("lease id is not valid UTF-8")
	}
	return nil
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}

func wrapAlgo(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, algo.ErrInvalid):
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	case errors.Is(err, algo.ErrOverflow):
		return fmt.Errorf("%w: %w", ErrOverflow, err)
	case errors.Is(err, algo.ErrCorrupt):
		return fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	return err
}

// fields is a set of Command fields, used to reject fields an Op ignores.
type fields uint32

const (
	fKey fields = 1 << iota
	fWindows
	fBudgets
	fReceipt
	fCost
	fValue
	fMode
	fKeepTTL
	fTTL
	fDelta
	fLimit
	fLease
	fPace // limit, windowMs, refillPermille
	fMaxWait
	fAt
	fDelay
)

var fieldNames = [...]string{"key", "windows", "budgets", "receipt", "cost", "value", "mode", "keepTtl", "ttlMs", "delta", "limit", "lease", "limit/windowMs/refillPermille", "maxWaitMs", "at", "delayMs"}

func (f fields) String() string {
	for i, name := range fieldNames {
		if f&(1<<i) != 0 {
			return name
		}
	}
	return "?"
}

// set returns the fields of c holding a non-zero value.
func (c *Command) set() fields {
	var f fields
	flag := func(b bool, v fields) {
		if b {
			f |= v
		}
	}
	flag(c.Key != "", fKey)
	flag(len(c.Windows) > 0, fWindows)
	flag(len(c.Budgets) > 0, fBudgets)
	flag(c.Receipt != "", fReceipt)
	flag(c.Cost != 0, fCost)
	flag(c.Value != "", fValue)
	flag(c.Mode != "", fMode)
	flag(c.KeepTTL, fKeepTTL)
	flag(c.TTLMs != 0, fTTL)
	flag(c.Delta != 0, fDelta)
	flag(c.Lease != "", fLease)
	flag(c.MaxWaitMs != 0, fMaxWait)
	flag(c.At != 0, fAt)
	flag(c.DelayMs != 0, fDelay)
	if c.Op == OpAcquire {
		flag(c.Limit != 0, fLimit)
		flag(c.WindowMs != 0 || c.RefillPermille != nil, fPace)
	} else {
		flag(c.Limit != 0 || c.WindowMs != 0 || c.RefillPermille != nil, fPace)
	}
	return f
}
