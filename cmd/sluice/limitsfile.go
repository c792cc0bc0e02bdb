package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/goccy/go-yaml"
	"github.com/tailscale/hujson"

	"github.com/sluicehq/sluice/pace"
	"github.com/sluicehq/sluice/wire"
)

// A limits file holds one entry per upstream limit, under "limiters", by
// limiter name. It is YAML (.yaml, .yml) or JSON with comments (.json,
// .jsonc), and decoded strictly: an unknown field, a duplicate name, a
// fraction where a whole number belongs or a quoted number is an error.
// limitPerWindow and windowMs are required; the other fields default as
// pace.DefaultConfig does. An optional "routes" holds one entry per route
// quota policy (package httplimit), by policy name: limit and windowMs
// (whole seconds) are required, kind defaults to fixed. See
// docs/operations.md.

// defaultLimitsFile is the limits file the commands use without -f.
const defaultLimitsFile = "sluice-limits.yaml"

// maxLimitsFile bounds the size of a limits file read.
const maxLimitsFile = 4 << 20

// limitsFormat is the syntax of a limits file.
type limitsFormat int

const (
	formatYAML limitsFormat = iota
	formatJSONC
)

// formatOf returns the format a file's extension names.
func formatOf(path string) (limitsFormat, error) {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".yaml", ".yml":
		return formatYAML, nil
	case ".json", ".jsonc":
		return formatJSONC, nil
	}
	return 0, fmt.Errorf("%s: a limits file ends in .yaml, .yml, .json or .jsonc", path)
}

// limits are the configurations a limits file gives, by limiter name.
type limits map[string]wire.LimiterConfig

// names returns the limiter names, sorted.
func (l limits) names() []string {
	names := make([]string, 0, len(l))
	for n := range l {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// routes are the route quota policies a limits file gives, by policy name.
type routes map[string]wire.PolicyConfig

// names returns the policy names, sorted.
func (r routes) names() []string { return slices.Sorted(maps.Keys(r)) }

// scalar is a value of a limits file as written: a whole number (int64), a
// number with a fraction or an exponent (float64), or anything else (kept
// for the error). It is checked once its limiter and field are known.
type scalar struct{ v any }

func (s *scalar) UnmarshalYAML(unmarshal func(any) error) error {
	if err := unmarshal(&s.v); err != nil {
		return err
	}
	switch n := s.v.(type) {
	case uint64: // YAML decodes a positive whole number as a uint64
		if n <= math.MaxInt64 {
			s.v = int64(n)
		} else {
			s.v = float64(n)
		}
	case int:
		s.v = int64(n)
	}
	return nil
}

func (s *scalar) UnmarshalJSON(b []byte) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&s.v); err != nil {
		return err
	}
	if n, ok := s.v.(json.Number); ok {
		if i, err := strconv.ParseInt(n.String(), 10, 64); err == nil {
			s.v = i
		} else if f, err := n.Float64(); err == nil {
			s.v = f
		}
	}
	return nil
}

// limiterName is a key of "limiters". YAML reads an unquoted 1.0, 0x10,
// true or null as something other than a string; such a name is refused
// rather than renamed.
type limiterName string

func (n *limiterName) UnmarshalYAML(unmarshal func(any) error) error {
	var v any
	if err := unmarshal(&v); err != nil {
		return err
	}
	s, ok := v.(string)
	if !ok {
		return fmt.Errorf("limiter name %v is read as a %T, not a name: quote it", v, v)
	}
	*n = limiterName(s)
	return nil
}

// fileEntry is one entry of a limits file as written; nil fields are
// absent.
type fileEntry struct {
	LimitPerWindow *scalar    `yaml:"limitPerWindow" json:"limitPerWindow"`
	WindowMs       *scalar    `yaml:"windowMs" json:"windowMs"`
	Concurrency    *scalar    `yaml:"concurrency" json:"concurrency"`
	LeaseTTLMs     *scalar    `yaml:"leaseTtlMs" json:"leaseTtlMs"`
	RefillFraction *scalar    `yaml:"refillFraction" json:"refillFraction"`
	MaxWaitMs      *scalar    `yaml:"maxWaitMs" json:"maxWaitMs"`
	StartTolerance *scalar    `yaml:"startToleranceMs" json:"startToleranceMs"`
	Retry          *fileRetry `yaml:"retry" json:"retry"`
}

type fileRetry struct {
	Attempts  *scalar `yaml:"attempts" json:"attempts"`
	FloorMs   *scalar `yaml:"floorMs" json:"floorMs"`
	CeilingMs *scalar `yaml:"ceilingMs" json:"ceilingMs"`
	Factor    *scalar `yaml:"factor" json:"factor"`
}

// fileRoute is one route quota policy of a limits file as written; nil
// fields are absent.
type fileRoute struct {
	Limit    *scalar `yaml:"limit" json:"limit"`
	WindowMs *scalar `yaml:"windowMs" json:"windowMs"`
	Kind     *scalar `yaml:"kind" json:"kind"`
}

// fileDoc is a limits file as written.
type fileDoc struct {
	Limiters map[limiterName]fileEntry `yaml:"limiters" json:"limiters"`
	Routes   map[limiterName]fileRoute `yaml:"routes" json:"routes"`
}

// parsedLimits is a limits file read and checked.
type parsedLimits struct {
	format limitsFormat
	raw    []byte
	limits limits
	routes routes
	// comments are the YAML file's comments by path, carried over when
	// the file is rewritten.
	comments yaml.CommentMap
	// jsonc is the JSONC file's syntax tree, edited in place when the file
	// is rewritten.
	jsonc hujson.Value
}

// readLimitsFile reads and checks the limits file at path. The error names
// every problem at once, each with its limiter and field.
func readLimitsFile(path string) (*parsedLimits, error) {
	format, err := formatOf(path)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	raw, err := io.ReadAll(io.LimitReader(f, maxLimitsFile+1))
	if err != nil {
		return nil, err
	}
	if len(raw) > maxLimitsFile {
		return nil, fmt.Errorf("%s: over %d MiB", path, maxLimitsFile>>20)
	}
	p, err := parseLimits(format, raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}

// parseLimits decodes and checks the limits file raw.
func parseLimits(format limitsFormat, raw []byte) (*parsedLimits, error) {
	p := &parsedLimits{format: format, raw: raw}
	var doc fileDoc
	switch format {
	case formatYAML:
		p.comments = yaml.CommentMap{}
		if err := yaml.UnmarshalWithOptions(raw, &doc, yaml.Strict(), yaml.CommentToMap(p.comments)); err != nil {
			return nil, err
		}
	case formatJSONC:
		v, err := hujson.Parse(raw)
		if err != nil {
			return nil, err
		}
		if err := checkDuplicateNames(raw, &v); err != nil {
			return nil, err
		}
		p.jsonc = v
		// Standardizing blanks the comments in place: do it on a copy.
		std, err := hujson.Standardize(bytes.Clone(raw))
		if err != nil {
			return nil, err
		}
		dec := json.NewDecoder(bytes.NewReader(std))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&doc); err != nil {
			return nil, err
		}
	}
	if doc.Limiters == nil && doc.Routes == nil {
		return nil, errors.New(`no "limiters" nor "routes" (see "sluice limits sample")`)
	}
	p.limits = make(limits, len(doc.Limiters))
	var errs []error
	for name, e := range doc.Limiters {
		cfg, err := e.resolve()
		if err == nil {
			err = wire.ValidateLimiterName(string(name))
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("limiter %q: %s", name, strings.ReplaceAll(err.Error(), "\n", "; ")))
			continue
		}
		p.limits[string(name)] = cfg
	}
	p.routes = make(routes, len(doc.Routes))
	for name, e := range doc.Routes {
		cfg, err := e.resolve()
		if err == nil {
			err = wire.ValidatePolicyName(string(name))
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("route %q: %s", name, strings.ReplaceAll(err.Error(), "\n", "; ")))
			continue
		}
		p.routes[string(name)] = cfg
	}
	slices.SortFunc(errs, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
	return p, errors.Join(errs...)
}

// checkDuplicateNames refuses an object of a JSONC file naming a member
// twice, which a JSON decoder would silently resolve to the last.
func checkDuplicateNames(raw []byte, v *hujson.Value) error {
	for v := range v.All() {
		obj, ok := v.Value.(*hujson.Object)
		if !ok {
			continue
		}
		seen := make(map[string]bool, len(obj.Members))
		for _, m := range obj.Members {
			lit, ok := m.Name.Value.(hujson.Literal)
			if !ok {
				continue
			}
			name := lit.String()
			if seen[name] {
				return fmt.Errorf("line %d: %q is named twice in one object", 1+bytes.Count(raw[:m.Name.StartOffset], []byte("\n")), name)
			}
			seen[name] = true
		}
	}
	return nil
}

// resolve returns the configuration e gives, with the defaults of the
// fields it leaves out, and every problem of its fields.
func (e fileEntry) resolve() (wire.LimiterConfig, error) {
	def := pace.DefaultConfig()
	var errs []error
	whole := func(field string, s *scalar, def int64, required bool) int64 {
		switch {
		case s == nil && required:
			errs = append(errs, fmt.Errorf("%s is required", field))
			return 0
		case s == nil:
			return def
		}
		if n, ok := s.v.(int64); ok {
			return n
		}
		errs = append(errs, fmt.Errorf("%s %s is not a whole number", field, describe(s.v)))
		return 0
	}
	fraction := func(field string, s *scalar, def float64) float64 {
		if s == nil {
			return def
		}
		switch n := s.v.(type) {
		case int64:
			return float64(n)
		case float64:
			return n
		}
		errs = append(errs, fmt.Errorf("%s %s is not a number", field, describe(s.v)))
		return 0
	}
	c := wire.LimiterConfig{
		LimitPerWindow: whole("limitPerWindow", e.LimitPerWindow, 0, true),
		WindowMs:       whole("windowMs", e.WindowMs, 0, true),
		Concurrency:    whole("concurrency", e.Concurrency, int64(def.Concurrency), false),
		LeaseTTLMs:     whole("leaseTtlMs", e.LeaseTTLMs, def.LeaseTTL.Milliseconds(), false),
		RefillFraction: fraction("refillFraction", e.RefillFraction, def.RefillFraction),
		MaxWaitMs:      whole("maxWaitMs", e.MaxWaitMs, def.MaxWait.Milliseconds(), false),
		StartToleranceMs: whole("startToleranceMs", e.StartTolerance,
			def.StartTolerance.Milliseconds(), false),
	}
	if r := e.Retry; r != nil {
		c.Retry = wire.LimiterRetry{
			Attempts:  whole("retry.attempts", r.Attempts, 0, false),
			FloorMs:   whole("retry.floorMs", r.FloorMs, 0, false),
			CeilingMs: whole("retry.ceilingMs", r.CeilingMs, 0, false),
			Factor:    fraction("retry.factor", r.Factor, 0),
		}
	}
	if len(errs) > 0 {
		return c, errors.Join(errs...)
	}
	return c, c.Validate()
}

// resolve returns the quota e gives, kind fixed when it names none, and
// every problem of its fields.
func (e fileRoute) resolve() (wire.PolicyConfig, error) {
	var errs []error
	whole := func(field string, s *scalar) int64 {
		if s == nil {
			errs = append(errs, fmt.Errorf("%s is required", field))
			return 0
		}
		if n, ok := s.v.(int64); ok {
			return n
		}
		errs = append(errs, fmt.Errorf("%s %s is not a whole number", field, describe(s.v)))
		return 0
	}
	c := wire.PolicyConfig{Limit: whole("limit", e.Limit), WindowMs: whole("windowMs", e.WindowMs), Kind: "fixed"}
	if e.Kind != nil {
		k, ok := e.Kind.v.(string)
		if !ok {
			errs = append(errs, fmt.Errorf("kind %s is not fixed, sliding, log or gcra", describe(e.Kind.v)))
		}
		c.Kind = k
	}
	if len(errs) > 0 {
		return c, errors.Join(errs...)
	}
	return c, c.Validate()
}

// describe renders a value of the wrong kind for an error.
func describe(v any) string {
	switch v := v.(type) {
	case string:
		return strconv.Quote(v)
	case float64:
		return strconv.FormatFloat(v, 'g', -1, 64)
	case nil:
		return "null"
	}
	return fmt.Sprintf("%v", v)
}

// decimal is a number written in the shortest form that reads back the
// same, without a trailing ".0".
type decimal float64

func (d decimal) MarshalYAML() ([]byte, error) {
	return []byte(strconv.FormatFloat(float64(d), 'f', -1, 64)), nil
}

// outEntry is one entry of a limits file as sluice writes it: every field,
// in this order, and retry only with the fields that do not take their
// default.
type outEntry struct {
	LimitPerWindow int64     `yaml:"limitPerWindow" json:"limitPerWindow"`
	WindowMs       int64     `yaml:"windowMs" json:"windowMs"`
	Concurrency    int64     `yaml:"concurrency" json:"concurrency"`
	LeaseTTLMs     int64     `yaml:"leaseTtlMs" json:"leaseTtlMs"`
	RefillFraction decimal   `yaml:"refillFraction" json:"refillFraction"`
	MaxWaitMs      int64     `yaml:"maxWaitMs" json:"maxWaitMs"`
	StartTolerance int64     `yaml:"startToleranceMs" json:"startToleranceMs"`
	Retry          *outRetry `yaml:"retry,omitempty" json:"retry,omitempty"`
}

type outRetry struct {
	Attempts  int64   `yaml:"attempts,omitempty" json:"attempts,omitempty"`
	FloorMs   int64   `yaml:"floorMs,omitempty" json:"floorMs,omitempty"`
	CeilingMs int64   `yaml:"ceilingMs,omitempty" json:"ceilingMs,omitempty"`
	Factor    decimal `yaml:"factor,omitempty" json:"factor,omitempty"`
}

func outOf(c wire.LimiterConfig) outEntry {
	e := outEntry{
		LimitPerWindow: c.LimitPerWindow, WindowMs: c.WindowMs, Concurrency: c.Concurrency,
		LeaseTTLMs: c.LeaseTTLMs, RefillFraction: decimal(c.RefillFraction), MaxWaitMs: c.MaxWaitMs,
		StartTolerance: c.StartToleranceMs,
	}
	if c.Retry != (wire.LimiterRetry{}) {
		e.Retry = &outRetry{Attempts: c.Retry.Attempts, FloorMs: c.Retry.FloorMs, CeilingMs: c.Retry.CeilingMs, Factor: decimal(c.Retry.Factor)}
	}
	return e
}

// outRoute is one route quota policy as sluice writes it: every field, in
// this order.
type outRoute struct {
	Limit    int64  `yaml:"limit" json:"limit"`
	WindowMs int64  `yaml:"windowMs" json:"windowMs"`
	Kind     string `yaml:"kind" json:"kind"`
}

func outRouteOf(c wire.PolicyConfig) outRoute {
	return outRoute{Limit: c.Limit, WindowMs: c.WindowMs, Kind: c.Kind}
}

// outName is a limiter or policy name as sluice writes it.
type outName string

// MarshalYAML writes the name bare when YAML reads it back as that name,
// and quoted otherwise: the YAML encoder quotes a name it would read as a
// number or a boolean, but not .inf, .nan or "...".
func (n outName) MarshalYAML() ([]byte, error) {
	var v any
	if err := yaml.Unmarshal([]byte(n), &v); err == nil && v == any(string(n)) {
		return []byte(n), nil
	}
	return []byte(strconv.Quote(string(n))), nil
}

// outDoc is a limits file as sluice writes it: "routes" only when there
// are some.
type outDoc struct {
	Limiters map[outName]outEntry `yaml:"limiters" json:"limiters"`
	Routes   map[outName]outRoute `yaml:"routes,omitempty" json:"routes,omitempty"`
}

func outDocOf(state limits, rts routes) outDoc {
	doc := outDoc{Limiters: make(map[outName]outEntry, len(state))}
	for name, c := range state {
		doc.Limiters[outName(name)] = outOf(c)
	}
	if len(rts) > 0 {
		doc.Routes = make(map[outName]outRoute, len(rts))
		for name, c := range rts {
			doc.Routes[outName(name)] = outRouteOf(c)
		}
	}
	return doc
}

// newFileHeader heads a limits file written where there was none.
var newFileHeader = []string{
	" Paced-call limits: one entry per upstream limit (see \"sluice limits sample\").",
	" Apply with \"sluice limits apply -f FILE\"; read back with \"sluice limits stats --save -f FILE\".",
}

// renderLimits returns the limits file describing state. old is the file
// being rewritten, or nil for a new one. A file that already describes
// state comes back byte for byte, whatever its layout; otherwise a YAML
// file is written in the canonical layout — the order and form of this
// package's output — with its comments kept at their paths, and a JSONC
// file is edited in place, value by value, so its comments and layout
// stay wherever nothing changed.
func renderLimits(format limitsFormat, old *parsedLimits, state limits, rts routes) ([]byte, error) {
	if old != nil && maps.Equal(old.limits, state) && maps.Equal(old.routes, rts) {
		return old.raw, nil
	}
	out, err := render(format, old, state, rts)
	if err != nil {
		return nil, err
	}
	// What is written must read back as what the server holds.
	back, err := parseLimits(format, out)
	if err != nil {
		return nil, fmt.Errorf("the rewritten file does not read back: %w", err)
	}
	if !maps.Equal(back.limits, state) || !maps.Equal(back.routes, rts) {
		return nil, errors.New("the rewritten file does not read back as the server's limiters and policies")
	}
	return out, nil
}

func render(format limitsFormat, old *parsedLimits, state limits, rts routes) ([]byte, error) {
	switch format {
	case formatJSONC:
		if old == nil {
			b, err := json.Marshal(outDocOf(state, rts))
			if err != nil {
				return nil, err
			}
			header := "// " + strings.TrimSpace(newFileHeader[0]) + "\n// " + strings.TrimSpace(newFileHeader[1]) + "\n"
			return hujson.Format(append([]byte(header), b...))
		}
		return patchJSONC(old, state, rts)
	default:
		cm := yaml.CommentMap{}
		if old != nil {
			cm = old.comments
		} else {
			cm["$.limiters"] = []*yaml.Comment{yaml.HeadComment(newFileHeader...)}
		}
		return yaml.MarshalWithOptions(outDocOf(state, rts), yaml.WithComment(cm))
	}
}

// patchJSONC edits the JSONC file old into one describing state, value by
// value (a JSON Patch applied to its syntax tree), so the comments and
// layout of what did not change stay as they were. A file that gained
// members is formatted, to lay them out.
func patchJSONC(old *parsedLimits, state limits, rts routes) ([]byte, error) {
	v := old.jsonc.Clone()
	type op struct {
		Op    string `json:"op"`
		Path  string `json:"path"`
		Value any    `json:"value,omitempty"`
	}
	var ops []op
	added := false
	if v.Find("/limiters") == nil && len(state) > 0 {
		ops = append(ops, op{Op: "add", Path: "/limiters", Value: map[string]any{}})
	}
	for _, name := range old.limits.names() {
		if _, ok := state[name]; !ok {
			ops = append(ops, op{Op: "remove", Path: "/limiters/" + name})
		}
	}
	for _, name := range state.names() {
		c, entry := state[name], "/limiters/"+name
		cur, ok := old.limits[name]
		switch {
		case !ok:
			ops = append(ops, op{Op: "add", Path: entry, Value: outOf(c)})
			added = true
			continue
		case cur == c:
			continue
		}
		want := outOf(c)
		for _, f := range []struct {
			key     string
			differs bool
			value   any
		}{
			{"limitPerWindow", cur.LimitPerWindow != c.LimitPerWindow, want.LimitPerWindow},
			{"windowMs", cur.WindowMs != c.WindowMs, want.WindowMs},
			{"concurrency", cur.Concurrency != c.Concurrency, want.Concurrency},
			{"leaseTtlMs", cur.LeaseTTLMs != c.LeaseTTLMs, want.LeaseTTLMs},
			{"refillFraction", cur.RefillFraction != c.RefillFraction, want.RefillFraction},
			{"maxWaitMs", cur.MaxWaitMs != c.MaxWaitMs, want.MaxWaitMs},
			{"startToleranceMs", cur.StartToleranceMs != c.StartToleranceMs, want.StartTolerance},
			{"retry", cur.Retry != c.Retry, want.Retry},
		} {
			if !f.differs {
				continue
			}
			path := entry + "/" + f.key
			present := v.Find(path) != nil
			switch {
			case f.key == "retry" && want.Retry == nil:
				if present {
					ops = append(ops, op{Op: "remove", Path: path})
				}
			case present:
				ops = append(ops, op{Op: "replace", Path: path, Value: f.value})
			default:
				ops = append(ops, op{Op: "add", Path: path, Value: f.value})
				added = true
			}
		}
	}
	// The routes: the whole section when the file has none, else entry by
	// entry and field by field as for the limiters.
	switch {
	case v.Find("/routes") == nil && len(rts) > 0:
		section := make(map[string]outRoute, len(rts))
		for name, c := range rts {
			section[name] = outRouteOf(c)
		}
		ops = append(ops, op{Op: "add", Path: "/routes", Value: section})
		added = true
	case v.Find("/routes") != nil:
		for _, name := range old.routes.names() {
			if _, ok := rts[name]; !ok {
				ops = append(ops, op{Op: "remove", Path: "/routes/" + name})
			}
		}
		for _, name := range rts.names() {
			c, entry := rts[name], "/routes/"+name
			cur, ok := old.routes[name]
			switch {
			case !ok:
				ops = append(ops, op{Op: "add", Path: entry, Value: outRouteOf(c)})
				added = true
				continue
			case cur == c:
				continue
			}
			for _, f := range []struct {
				key     string
				differs bool
				value   any
			}{
				{"limit", cur.Limit != c.Limit, c.Limit},
				{"windowMs", cur.WindowMs != c.WindowMs, c.WindowMs},
				{"kind", cur.Kind != c.Kind, c.Kind},
			} {
				if !f.differs {
					continue
				}
				path := entry + "/" + f.key
				if v.Find(path) != nil {
					ops = append(ops, op{Op: "replace", Path: path, Value: f.value})
				} else {
					ops = append(ops, op{Op: "add", Path: path, Value: f.value})
					added = true
				}
			}
		}
	}
	patch, err := json.Marshal(ops)
	if err != nil {
		return nil, err
	}
	if err := v.Patch(patch); err != nil {
		return nil, fmt.Errorf("editing the file: %w", err)
	}
	if added {
		v.Format()
	}
	return v.Pack(), nil
}

// sampleYAML is what "sluice limits sample" writes to a YAML file. It is in
// the canonical layout, so --save rewrites it as it is.
const sampleYAML = `# Paced-call limits of this fleet: one entry per upstream limit, named as the
# code names its limiter (pace.Define). Apply with "sluice limits apply -f FILE";
# read back with "sluice limits stats --save -f FILE".
#
# limitPerWindow and windowMs are the upstream's limit, verbatim: "100 calls
# a minute" is 100 and 60000. The other fields may be left out:
#   concurrency     calls in flight at once, across every process; 0: no cap
#   leaseTtlMs      how soon a crashed caller's slot frees (default 30000)
#   refillFraction  the share of the limit a window reopens with after an
#                   upstream 429, 0 to 1 in thousandths (default 0.5)
#   maxWaitMs       the longest a call waits for its slot (default 300000)
#   startToleranceMs  how late after its slot a call may still start; windows
#                   of starts then hold the limit exactly, at the cost of
#                   windowMs/(windowMs+startToleranceMs) of it (default 100;
#                   0: windows of granted slots only)
#   retry           attempts, floorMs, ceilingMs and factor of the backoff of
#                   failed calls (defaults 4, 500, 30000 and 2)
limiters:
  # The billing API allows 100 calls a minute, 10 at a time.
  billing-api:
    limitPerWindow: 100
    windowMs: 60000
    concurrency: 10
    leaseTtlMs: 30000
    refillFraction: 0.5
    maxWaitMs: 300000
    startToleranceMs: 100
    retry:
      attempts: 4
      floorMs: 500
      ceilingMs: 30000
      factor: 2
  # The geocoder allows 5 calls a second; a caller waits at most 2 s.
  geocoder:
    limitPerWindow: 5
    windowMs: 1000
    concurrency: 0
    leaseTtlMs: 30000
    refillFraction: 0.25
    maxWaitMs: 2000
    startToleranceMs: 100
# Route quotas of the HTTP stages: one entry per policy, named as the code
# names it (httplimit.Policies.Policy). A client may make limit requests per
# windowMs, in whole seconds; kind is fixed, sliding, log or gcra (default
# fixed). The stages enforce a change within their refresh interval.
routes:
  # Sign-in: 10 attempts a minute per client.
  login:
    limit: 10
    windowMs: 60000
    kind: sliding
`

// sampleJSONC is what "sluice limits sample" writes to a JSON file. It is
// laid out as hujson.Format lays out a file, so a file that gains a
// limiter is reformatted only where it changed.
const sampleJSONC = `// Paced-call limits of this fleet: one entry per upstream limit, named as the
// code names its limiter (pace.Define). Apply with "sluice limits apply -f FILE";
// read back with "sluice limits stats --save -f FILE".
//
// limitPerWindow and windowMs are the upstream's limit, verbatim: "100 calls
// a minute" is 100 and 60000. The other fields may be left out:
//   concurrency     calls in flight at once, across every process; 0: no cap
//   leaseTtlMs      how soon a crashed caller's slot frees (default 30000)
//   refillFraction  the share of the limit a window reopens with after an
//                   upstream 429, 0 to 1 in thousandths (default 0.5)
//   maxWaitMs       the longest a call waits for its slot (default 300000)
//   startToleranceMs  how late after its slot a call may still start; windows
//                   of starts then hold the limit exactly, at the cost of
//                   windowMs/(windowMs+startToleranceMs) of it (default 100;
//                   0: windows of granted slots only)
//   retry           attempts, floorMs, ceilingMs and factor of the backoff of
//                   failed calls (defaults 4, 500, 30000 and 2)
{
	"limiters": {
		// The billing API allows 100 calls a minute, 10 at a time.
		"billing-api": {
			"limitPerWindow":   100,
			"windowMs":         60000,
			"concurrency":      10,
			"leaseTtlMs":       30000,
			"refillFraction":   0.5,
			"maxWaitMs":        300000,
			"startToleranceMs": 100,
			"retry":            {"attempts": 4, "floorMs": 500, "ceilingMs": 30000, "factor": 2},
		},
		// The geocoder allows 5 calls a second; a caller waits at most 2 s.
		"geocoder": {
			"limitPerWindow":   5,
			"windowMs":         1000,
			"concurrency":      0,
			"leaseTtlMs":       30000,
			"refillFraction":   0.25,
			"maxWaitMs":        2000,
			"startToleranceMs": 100,
		},
	},
	// Route quotas of the HTTP stages: one entry per policy, named as the code
	// names it (httplimit.Policies.Policy). A client may make limit requests per
	// windowMs, in whole seconds; kind is fixed, sliding, log or gcra (default
	// fixed). The stages enforce a change within their refresh interval.
	"routes": {
		// Sign-in: 10 attempts a minute per client.
		"login": {"limit": 10, "windowMs": 60000, "kind": "sliding"},
	},
}
`
