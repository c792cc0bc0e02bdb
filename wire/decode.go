package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/engine"
)

// DecodeRequest decodes an RPC body into r strictly: unknown fields and
// data after the object are errors, as are values of the wrong type. It
// does not validate bounds (see Request.Validate).
//
// Bodies as Sluice's clients write them take a fast path without
// reflection; anything else — any JSON the fast path does not handle, valid
// or not — is decoded by encoding/json with unknown fields disallowed and
// then checked by CheckStrict, which together decide: a member named in
// another case or given twice, and a string that is not UTF-8, are
// refused. Both paths decode the same bytes to the same Request and refuse
// the same bodies.
func DecodeRequest(body []byte, r *Request) error {
	*r = Request{}
	s := scanner{data: body}
	if s.request(r) && s.end() {
		return nil
	}
	*r = Request{}
	return decodeRequestSlow(body, r)
}

// decodeRequestSlow is DecodeRequest by encoding/json alone.
func decodeRequestSlow(body []byte, r *Request) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(r); err != nil {
		return fmt.Errorf("malformed JSON: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("malformed JSON: data after the request object")
	}
	if err := CheckStrict(body, r); err != nil {
		return fmt.Errorf("malformed JSON: %w", err)
	}
	return nil
}

// The fields of each object, as bits, to refuse duplicates.
const (
	fOperationID = 1 << iota
	fFamily
	fSource
	fPrincipal
	fSourceTiers
	fMode
	fSteps
)

func (s *scanner) request(r *Request) bool {
	return s.object(func(k []byte) (f uint, ok bool) {
		switch string(k) {
		case "operationId":
			f = fOperationID
			r.OperationID, ok = s.str()
		case "family":
			f = fFamily
			r.Family, ok = s.str()
		case "source":
			f = fSource
			r.Source, ok = s.str()
		case "principal":
			f = fPrincipal
			r.Principal, ok = s.str()
		case "sourceTiers":
			f = fSourceTiers
			r.SourceTiers, ok = s.tiers()
		case "mode":
			f = fMode
			var raw []byte
			raw, ok = s.rawString()
			r.Mode = requestMode(raw)
		case "steps":
			f = fSteps
			r.Steps, ok = s.steps()
		}
		return f, ok // an unknown field: f 0, ok false
	})
}

func (s *scanner) tiers() (map[string]string, bool) {
	ok, empty := s.objectStart()
	if !ok {
		return nil, false
	}
	m := make(map[string]string, 3)
	if empty {
		return m, true
	}
	for {
		k, ok := s.key()
		if !ok {
			return nil, false
		}
		if _, dup := m[string(k)]; dup || !utf8.Valid(k) {
			return nil, false
		}
		v, ok := s.str()
		if !ok {
			return nil, false
		}
		m[string(k)] = v
		more, ok := s.more('}')
		if !ok || !more {
			return m, ok
		}
	}
}

// steps reads the steps of a request. The commands of every step share one
// backing array, and the windows and budgets of every command another:
// each step's and command's slice is capped at its own length, so appending
// to one never writes into another.
func (s *scanner) steps() ([]engine.Step, bool) {
	// Size the backing arrays from the body: a command takes some 100
	// bytes or more of JSON.
	hint := min(max(s.requestLeft()/100, 1), engine.MaxCommands)
	d := stepDecoder{hint: hint}
	var steps []engine.Step
	return list(s, &steps, min(hint, engine.MaxSteps), func(st *engine.Step) bool { return d.step(s, st) })
}

// stepDecoder holds the backing arrays of one request's steps, made on
// first use with room for hint elements.
type stepDecoder struct {
	hint    int
	cmds    []engine.Command
	windows []engine.Window
	budgets []engine.Budget
}

func (d *stepDecoder) step(s *scanner, st *engine.Step) bool {
	return s.object(func(k []byte) (f uint, ok bool) {
		switch string(k) {
		case "partition":
			f = 1
			st.Partition, ok = s.str()
		case "commands":
			f = 2
			st.Commands, ok = d.commands(s)
		}
		return f, ok
	})
}

func (d *stepDecoder) commands(s *scanner) ([]engine.Command, bool) {
	return list(s, &d.cmds, d.hint, func(c *engine.Command) bool { return d.command(s, c) })
}

// The fields of a command, as bits, to refuse duplicates.
const (
	cOp = 1 << iota
	cKey
	cWindows
	cBudgets
	cReceipt
	cCost
	cValue
	cMode
	cKeepTTL
	cTTL
	cDelta
	cLimit
	cLease
	cWindowMs
	cRefill
	cMaxWait
	cAt
	cDelay
)

func (d *stepDecoder) command(s *scanner, c *engine.Command) bool {
	return s.object(func(k []byte) (f uint, ok bool) {
		switch string(k) {
		case "op":
			f = cOp
			var raw []byte
			raw, ok = s.rawString()
			c.Op = op(raw)
		case "key":
			f = cKey
			c.Key, ok = s.str()
		case "windows":
			f = cWindows
			c.Windows, ok = d.windowList(s)
		case "budgets":
			f = cBudgets
			c.Budgets, ok = d.budgetList(s)
		case "receipt":
			f = cReceipt
			c.Receipt, ok = s.str()
		case "cost":
			f = cCost
			c.Cost, ok = s.int64()
		case "value":
			f = cValue
			c.Value, ok = s.str()
		case "mode":
			f = cMode
			var raw []byte
			raw, ok = s.rawString()
			c.Mode = setMode(raw)
		case "keepTtl":
			f = cKeepTTL
			c.KeepTTL, ok = s.bool()
		case "ttlMs":
			f = cTTL
			c.TTLMs, ok = s.int64()
		case "delta":
			f = cDelta
			c.Delta, ok = s.int64()
		case "limit":
			f = cLimit
			c.Limit, ok = s.int64()
		case "lease":
			f = cLease
			c.Lease, ok = s.str()
		case "windowMs":
			f = cWindowMs
			c.WindowMs, ok = s.int64()
		case "refillPermille":
			f = cRefill
			var v int64
			if v, ok = s.int64(); ok {
				c.RefillPermille = &v
			}
		case "maxWaitMs":
			f = cMaxWait
			c.MaxWaitMs, ok = s.int64()
		case "at":
			f = cAt
			c.At, ok = s.int64()
		case "delayMs":
			f = cDelay
			c.DelayMs, ok = s.int64()
		}
		return f, ok
	})
}

func (d *stepDecoder) windowList(s *scanner) ([]engine.Window, bool) {
	return list(s, &d.windows, d.hint, s.window)
}

func (s *scanner) window(w *engine.Window) bool {
	return s.object(func(k []byte) (f uint, ok bool) {
		switch string(k) {
		case "key":
			f = 1
			w.Key, ok = s.str()
		case "kind":
			f = 2
			var raw []byte
			if raw, ok = s.rawString(); ok {
				w.Kind, ok = kind(raw)
			}
		case "limit":
			f = 4
			w.Limit, ok = s.int64()
		case "windowMs":
			f = 8
			w.WindowMs, ok = s.int64()
		}
		return f, ok
	})
}

func (d *stepDecoder) budgetList(s *scanner) ([]engine.Budget, bool) {
	return list(s, &d.budgets, engine.MaxBudgets, s.budget)
}

func (s *scanner) budget(b *engine.Budget) bool {
	return s.object(func(k []byte) (f uint, ok bool) {
		switch string(k) {
		case "key":
			f = 1
			b.Key, ok = s.str()
		case "limit":
			f = 2
			b.Limit, ok = s.int64()
		case "windowMs":
			f = 4
			b.WindowMs, ok = s.int64()
		case "refundable":
			f = 8
			b.Refundable, ok = s.bool()
		}
		return f, ok
	})
}

// The names that decode to constants rather than fresh strings.
var (
	ops = [...]engine.Op{
		engine.OpHit, engine.OpGet, engine.OpSet, engine.OpDel, engine.OpTTL, engine.OpExpire, engine.OpIncr,
		engine.OpReserve, engine.OpRefund, engine.OpAcquire, engine.OpRenew, engine.OpRelease,
		engine.OpPaceTake, engine.OpPaceClaim, engine.OpPacePenalize,
	}
	kinds = [...]algo.Kind{algo.KindFixed, algo.KindSliding, algo.KindLog, algo.KindGCRA}
)

func op(raw []byte) engine.Op {
	for _, o := range ops {
		if string(raw) == string(o) {
			return o
		}
	}
	return engine.Op(raw)
}

// kind parses a window kind as algo.Kind's UnmarshalText does; an unknown
// name goes to encoding/json, which reports it.
func kind(raw []byte) (algo.Kind, bool) {
	for _, k := range kinds {
		if string(raw) == k.String() {
			return k, true
		}
	}
	return 0, false
}

func requestMode(raw []byte) engine.Mode {
	switch string(raw) {
	case "":
		return ""
	case string(engine.Sequential):
		return engine.Sequential
	case string(engine.All):
		return engine.All
	}
	return engine.Mode(raw)
}

func setMode(raw []byte) engine.SetMode {
	switch string(raw) {
	case "":
		return engine.SetAlways
	case string(engine.SetNX):
		return engine.SetNX
	case string(engine.SetXX):
		return engine.SetXX
	}
	return engine.SetMode(raw)
}
