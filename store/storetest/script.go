package storetest

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/engine"
)

// DefaultEpoch is the instant every script starts at unless it names another
// with an epoch line: 2024-01-01T00:00:00Z in Unix milliseconds. It is a
// whole number of days since the Unix epoch, so every fixed or sliding
// window whose length divides a day starts a bucket at the script epoch.
const DefaultEpoch int64 = 1_704_067_200_000

// script is a parsed testdata script.
type script struct {
	name    string
	epoch   int64
	actions []action
}

type actionKind uint8

const (
	actAt      actionKind = iota + 1 // set the clock to epoch+ms
	actAdvance                       // move the clock by ms
	actRequest                       // run req
)

type action struct {
	line int
	kind actionKind
	ms   int64
	req  *requestSpec
}

type requestSpec struct {
	line    int
	oneLine bool // written as "PARTITION: command": takes no more steps or commands
	opID    string
	mode    engine.Mode
	steps   []*stepSpec
}

type stepSpec struct {
	line      int
	partition string
	skipped   bool
	replayed  bool
	cmds      []*commandSpec
}

type commandSpec struct {
	line int
	cmd  engine.Command
	want *want // nil: no expectation
}

// want is the expected outcome of one command.
type want struct {
	line    int
	errName string // non-empty: the request fails at this command
	err     error
	res     engine.Result
	windows bool // res.Windows was given explicitly
}

// errorNames maps the error words of the script format to sentinels.
var errorNames = map[string]error{
	"invalid":     engine.ErrInvalid,
	"wrong_type":  engine.ErrWrongType,
	"overflow":    engine.ErrOverflow,
	"conflict":    engine.ErrOperationConflict,
	"capacity":    engine.ErrCapacity,
	"corrupt":     engine.ErrCorrupt,
	"closed":      engine.ErrClosed,
	"unavailable": engine.ErrUnavailable,
}

var knownOps = map[engine.Op]bool{
	engine.OpHit: true, engine.OpGet: true, engine.OpSet: true, engine.OpDel: true,
	engine.OpTTL: true, engine.OpExpire: true, engine.OpIncr: true,
	engine.OpReserve: true, engine.OpRefund: true,
	engine.OpAcquire: true, engine.OpRenew: true, engine.OpRelease: true,
	engine.OpPaceTake: true, engine.OpPaceClaim: true, engine.OpPacePenalize: true,
}

// parser holds the state of one parse.
type parser struct {
	s    *script
	line int
	req  *requestSpec // the open do block, if any
	last *commandSpec // the command a "->" continuation extends
}

// parseScript parses the text of a script named name.
func parseScript(name, text string) (*script, error) {
	p := &parser{s: &script{name: name, epoch: DefaultEpoch}}
	for i, raw := range strings.Split(text, "\n") {
		p.line = i + 1
		toks, err := tokenize(raw)
		if err == nil && len(toks) > 0 {
			err = p.parseLine(toks)
		}
		if err != nil {
			return nil, locate(name, p.line, err)
		}
	}
	if err := p.closeRequest(); err != nil {
		return nil, locate(name, p.line, err)
	}
	return p.s, nil
}

// lineError is an error about one line of a script.
type lineError struct {
	line int
	err  error
}

func (e *lineError) Error() string { return fmt.Sprintf("line %d: %v", e.line, e.err) }
func (e *lineError) Unwrap() error { return e.err }

// atLine returns an error about the given line.
func atLine(line int, format string, args ...any) error {
	return &lineError{line: line, err: fmt.Errorf(format, args...)}
}

// locate prefixes err with the script's name and the line it is about:
// its own, if it names one, or else line.
func locate(name string, line int, err error) error {
	var le *lineError
	if errors.As(err, &le) {
		line, err = le.line, le.err
	}
	return fmt.Errorf("%s:%d: %w", name, line, err)
}

func (p *parser) parseLine(toks []string) error {
	head, rest := toks[0], toks[1:]
	switch {
	case head == "->":
		if p.last == nil {
			return errors.New("-> continues no command")
		}
		return p.addWant(p.last, rest)
	case head == "step":
		return p.parseStep(rest)
	case strings.Contains(head, ".") && !strings.HasSuffix(head, ":"):
		if p.req == nil || p.req.oneLine {
			return errors.New("a command outside a do block needs a partition: PARTITION: command")
		}
		return p.parseCommand(toks)
	}
	// Every other line ends an open do block.
	if err := p.closeRequest(); err != nil {
		return err
	}
	switch {
	case head == "epoch":
		if len(p.s.actions) > 0 || len(rest) != 1 {
			return errors.New("epoch takes one Unix millisecond and must come first")
		}
		ms, err := strconv.ParseInt(rest[0], 10, 64)
		if err != nil {
			return fmt.Errorf("epoch: %w", err)
		}
		p.s.epoch = ms
	case head == "at" || head == "advance":
		if len(rest) != 1 {
			return fmt.Errorf("%s takes one duration", head)
		}
		ms, err := parseMillis(rest[0])
		if err != nil {
			return err
		}
		kind := actAt
		if head == "advance" {
			kind = actAdvance
		}
		p.s.actions = append(p.s.actions, action{line: p.line, kind: kind, ms: ms})
	case head == "do":
		p.req = &requestSpec{line: p.line}
		for _, tok := range rest {
			name, val, _ := strings.Cut(tok, "=")
			switch name {
			case "op":
				var err error
				if p.req.opID, err = unquote(val); err != nil {
					return fmt.Errorf("op: %w", err)
				}
			case "mode":
				p.req.mode = engine.Mode(val)
			default:
				return fmt.Errorf("do takes op= and mode=, not %q", tok)
			}
		}
	case strings.HasSuffix(head, ":") && len(head) > 1:
		// A one-line request: one step of one command.
		p.req = &requestSpec{line: p.line, oneLine: true}
		p.req.steps = append(p.req.steps, &stepSpec{line: p.line, partition: strings.TrimSuffix(head, ":")})
		if len(rest) == 0 {
			return errors.New("a one-line request needs a command")
		}
		return p.parseCommand(rest)
	default:
		return fmt.Errorf("unknown directive %q", head)
	}
	return nil
}

func (p *parser) parseStep(toks []string) error {
	if p.req == nil || p.req.oneLine {
		return errors.New("step outside a do block")
	}
	if len(toks) == 0 {
		return errors.New("step needs a partition")
	}
	st := &stepSpec{line: p.line, partition: toks[0]}
	toks = toks[1:]
	if len(toks) > 0 {
		if toks[0] != "->" || len(toks) != 2 {
			return errors.New("a step line is: step PARTITION [-> skipped|replayed]")
		}
		switch toks[1] {
		case "skipped":
			st.skipped = true
		case "replayed":
			st.replayed = true
		default:
			return fmt.Errorf("a step is expected skipped or replayed, not %q", toks[1])
		}
	}
	p.req.steps = append(p.req.steps, st)
	p.last = nil
	return nil
}

func (p *parser) parseCommand(toks []string) error {
	if p.req == nil || len(p.req.steps) == 0 {
		return errors.New("a command needs a step")
	}
	st := p.req.steps[len(p.req.steps)-1]
	cs := &commandSpec{line: p.line}
	cmdToks, wantToks, hasWant := cutArrow(toks)
	if err := p.parseFields(&cs.cmd, cmdToks); err != nil {
		return err
	}
	st.cmds = append(st.cmds, cs)
	p.last = cs
	if hasWant {
		return p.addWant(cs, wantToks)
	}
	return nil
}

func cutArrow(toks []string) (before, after []string, found bool) {
	for i, t := range toks {
		if t == "->" {
			return toks[:i], toks[i+1:], true
		}
	}
	return toks, nil, false
}

// parseFields fills c from an op name followed by fields.
func (p *parser) parseFields(c *engine.Command, toks []string) error {
	c.Op = engine.Op(toks[0])
	if !knownOps[c.Op] {
		return fmt.Errorf("unknown command %q", toks[0])
	}
	for _, tok := range toks[1:] {
		name, val, hasVal := strings.Cut(tok, "=")
		val, err := unquote(val)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if !hasVal && name != "keepTtl" {
			return fmt.Errorf("field %q needs a value", name)
		}
		switch name {
		case "key":
			c.Key = val
		case "value":
			c.Value = val
		case "mode":
			c.Mode = engine.SetMode(val)
		case "keepTtl":
			if hasVal {
				return errors.New("keepTtl is a flag")
			}
			c.KeepTTL = true
		case "receipt":
			c.Receipt = val
		case "lease":
			c.Lease = val
		case "cost":
			c.Cost, err = strconv.ParseInt(val, 10, 64)
		case "delta":
			c.Delta, err = strconv.ParseInt(val, 10, 64)
		case "limit":
			c.Limit, err = strconv.ParseInt(val, 10, 64)
		case "ttl":
			c.TTLMs, err = parseMillis(val)
		case "maxWait":
			c.MaxWaitMs, err = parseMillis(val)
		case "delay":
			c.DelayMs, err = parseMillis(val)
		case "at":
			c.At, err = p.parseInstant(val)
		case "win":
			var w engine.Window
			w, err = parseWindow(val)
			c.Windows = append(c.Windows, w)
		case "budget":
			var b engine.Budget
			b, err = parseBudget(val)
			c.Budgets = append(c.Budgets, b)
		case "pace":
			err = parsePace(c, val)
		default:
			return fmt.Errorf("unknown field %q", name)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}

// parseWindow parses KEY/KIND/LIMIT/WINDOW.
func parseWindow(s string) (engine.Window, error) {
	parts := strings.Split(s, "/")
	if len(parts) != 4 {
		return engine.Window{}, fmt.Errorf("%q is not KEY/KIND/LIMIT/WINDOW", s)
	}
	kind, err := algo.ParseKind(parts[1])
	if err != nil {
		return engine.Window{}, err
	}
	limit, err := strconv.ParseInt(parts[2], 10, 64)
	if err != nil {
		return engine.Window{}, err
	}
	ms, err := parseMillis(parts[3])
	if err != nil {
		return engine.Window{}, err
	}
	return engine.Window{Key: parts[0], Kind: kind, Limit: limit, WindowMs: ms}, nil
}

// parseBudget parses KEY/LIMIT/WINDOW[/refundable].
func parseBudget(s string) (engine.Budget, error) {
	parts := strings.Split(s, "/")
	if len(parts) != 3 && (len(parts) != 4 || parts[3] != "refundable") {
		return engine.Budget{}, fmt.Errorf("%q is not KEY/LIMIT/WINDOW[/refundable]", s)
	}
	limit, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil {
		return engine.Budget{}, err
	}
	ms, err := parseMillis(parts[2])
	if err != nil {
		return engine.Budget{}, err
	}
	return engine.Budget{Key: parts[0], Limit: limit, WindowMs: ms, Refundable: len(parts) == 4}, nil
}

// parsePace parses KEY/LIMIT/WINDOW[/REFILL‰] into c.
func parsePace(c *engine.Command, s string) error {
	parts := strings.Split(s, "/")
	if len(parts) != 3 && len(parts) != 4 {
		return fmt.Errorf("%q is not KEY/LIMIT/WINDOW[/REFILL]", s)
	}
	limit, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil {
		return err
	}
	ms, err := parseMillis(parts[2])
	if err != nil {
		return err
	}
	c.Key, c.Limit, c.WindowMs = parts[0], limit, ms
	if len(parts) == 4 {
		refill, err := strconv.ParseInt(parts[3], 10, 64)
		if err != nil {
			return err
		}
		c.RefillPermille = &refill
	}
	return nil
}

func (p *parser) addWant(cs *commandSpec, toks []string) error {
	w := cs.want
	if w == nil {
		if len(toks) == 0 {
			return errors.New("an expectation starts with ok, denied or error")
		}
		w = &want{line: p.line}
		switch toks[0] {
		case "ok":
			w.res.Allowed = true
		case "denied":
		case "error":
			if len(toks) != 2 {
				return errors.New("error takes exactly one name")
			}
			w.errName = toks[1]
			if w.err = errorNames[w.errName]; w.err == nil {
				return fmt.Errorf("unknown error %q", w.errName)
			}
			cs.want = w
			return nil
		default:
			return fmt.Errorf("an expectation starts with ok, denied or error, not %q", toks[0])
		}
		toks = toks[1:]
		cs.want = w
	} else if w.err != nil {
		return errors.New("an error expectation takes nothing more")
	}
	r := &w.res
	for _, tok := range toks {
		name, val, hasVal := strings.Cut(tok, "=")
		val, err := unquote(val)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if !hasVal && name != "found" {
			return fmt.Errorf("%q needs a value", name)
		}
		switch name {
		case "found":
			if hasVal {
				return errors.New("found is a flag")
			}
			r.Found = true
		case "value":
			r.Value = val
		case "int":
			r.Int, err = strconv.ParseInt(val, 10, 64)
		case "ttl":
			r.TTLMs, err = parseMillis(val)
		case "remaining":
			r.Remaining, err = strconv.ParseInt(val, 10, 64)
		case "resetAt":
			r.ResetAt, err = p.parseInstant(val)
		case "retryAfter":
			r.RetryAfterMs, err = parseMillis(val)
		case "at":
			r.At, err = p.parseInstant(val)
		case "win":
			var wr engine.WindowResult
			wr, err = p.parseWindowResult(val)
			r.Windows = append(r.Windows, wr)
			w.windows = true
		default:
			return fmt.Errorf("unknown result field %q", name)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}

// parseWindowResult parses ok|denied/REMAINING/RESETAT[/RETRYAFTER].
func (p *parser) parseWindowResult(s string) (engine.WindowResult, error) {
	var wr engine.WindowResult
	parts := strings.Split(s, "/")
	if len(parts) != 3 && len(parts) != 4 {
		return wr, fmt.Errorf("%q is not ok|denied/REMAINING/RESETAT[/RETRYAFTER]", s)
	}
	switch parts[0] {
	case "ok":
		wr.Allowed = true
	case "denied":
	default:
		return wr, fmt.Errorf("%q is neither ok nor denied", parts[0])
	}
	var err error
	if wr.Remaining, err = strconv.ParseInt(parts[1], 10, 64); err != nil {
		return wr, err
	}
	if wr.ResetAt, err = p.parseInstant(parts[2]); err != nil {
		return wr, err
	}
	if len(parts) == 4 {
		if wr.RetryAfterMs, err = parseMillis(parts[3]); err != nil {
			return wr, err
		}
	}
	return wr, nil
}

// parseInstant parses an instant written as a duration after the script
// epoch and returns it in Unix milliseconds.
func (p *parser) parseInstant(s string) (int64, error) {
	ms, err := parseMillis(s)
	if err != nil {
		return 0, err
	}
	return p.s.epoch + ms, nil
}

// parseMillis parses a Go duration ("0", "1500ms", "1m30s", "-1ms") that is a
// whole number of milliseconds.
func parseMillis(s string) (int64, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, err
	}
	if d%time.Millisecond != 0 {
		return 0, fmt.Errorf("%s is not a whole number of milliseconds", s)
	}
	return d.Milliseconds(), nil
}

// unquote returns the text a field's value stands for: a double-quoted
// string in Go syntax, N*"S" for N repetitions of the quoted string S (a
// value or key at the edge of its bound), or else the word as written.
func unquote(s string) (string, error) {
	if strings.HasPrefix(s, `"`) {
		return strconv.Unquote(s)
	}
	if n, q, ok := strings.Cut(s, "*"); ok && strings.HasPrefix(q, `"`) {
		count, err := strconv.Atoi(n)
		if err != nil || count < 0 {
			return "", fmt.Errorf("%q is not N*\"TEXT\"", s)
		}
		text, err := strconv.Unquote(q)
		if err != nil {
			return "", err
		}
		return strings.Repeat(text, count), nil
	}
	return s, nil
}

// tokenize splits a line into whitespace-separated tokens. A double-quoted
// part of a token (Go syntax) may hold spaces and '#'; an unquoted '#' at the
// start of a token begins a comment.
func tokenize(line string) ([]string, error) {
	var toks []string
	var cur strings.Builder
	inTok, inQuote, escaped := false, false, false
	for _, r := range line {
		switch {
		case inQuote:
			cur.WriteRune(r)
			switch {
			case escaped:
				escaped = false
			case r == '\\':
				escaped = true
			case r == '"':
				inQuote = false
			}
		case r == ' ' || r == '\t' || r == '\r':
			if inTok {
				toks = append(toks, cur.String())
				cur.Reset()
				inTok = false
			}
		case r == '#' && !inTok:
			return toks, nil
		default:
			inTok = true
			cur.WriteRune(r)
			inQuote = r == '"'
		}
	}
	if inQuote {
		return nil, errors.New("unterminated quote")
	}
	if inTok {
		toks = append(toks, cur.String())
	}
	return toks, nil
}

// closeRequest checks the open do block, if any, and appends it to the
// script.
func (p *parser) closeRequest() error {
	req := p.req
	p.req, p.last = nil, nil
	if req == nil {
		return nil
	}
	if err := req.check(); err != nil {
		var le *lineError
		if !errors.As(err, &le) {
			err = atLine(req.line, "%w", err)
		}
		return err
	}
	p.s.actions = append(p.s.actions, action{line: req.line, kind: actRequest, req: req})
	return nil
}

// check enforces that every command that runs has an expectation and that
// nothing that cannot run has one: after a command expected to fail, no
// other command of the request has an outcome (a failed step returns no
// results, and later steps do not run), and an invalid request runs no step
// at all.
func (r *requestSpec) check() error {
	if len(r.steps) == 0 {
		return errors.New("a request needs a step")
	}
	errStep, invalid := -1, false
	for i, st := range r.steps {
		if len(st.cmds) == 0 {
			return atLine(st.line, "a step needs a command")
		}
		for _, cs := range st.cmds {
			if cs.want != nil && cs.want.err != nil {
				if errStep >= 0 {
					return errors.New("a request fails at most once")
				}
				errStep, invalid = i, cs.want.err == engine.ErrInvalid
			}
		}
	}
	for i, st := range r.steps {
		if st.skipped && st.replayed {
			return atLine(st.line, "a step cannot be both skipped and replayed")
		}
		for _, cs := range st.cmds {
			hasWant := cs.want != nil
			failing := hasWant && cs.want.err != nil
			switch {
			case errStep >= 0 && (i > errStep || invalid && i < errStep), st.skipped:
				if hasWant {
					return atLine(cs.line, "a command that does not run has no expectation")
				}
			case i == errStep:
				if hasWant && !failing {
					return atLine(cs.line, "a step that fails returns no results; only its failing command has an expectation")
				}
			case !hasWant:
				return atLine(cs.line, "command has no expectation")
			}
			if hasWant && !failing && !cs.want.windows {
				if n := len(cs.cmd.Windows) + len(cs.cmd.Budgets); n > 1 {
					return atLine(cs.line, "list the outcome of each of the %d windows with win=", n)
				}
			}
		}
		if errStep >= 0 && (i > errStep || invalid) && (st.skipped || st.replayed) {
			return atLine(st.line, "a step that does not run is neither skipped nor replayed")
		}
	}
	return nil
}
