package redisstore

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/engine"
)

func TestPartitionBase(t *testing.T) {
	for partition, want := range map[string]string{
		"p":       "sluice:{p}:",
		"a}b":     "sluice:{a%7Db}:",
		"%7D":     "sluice:{%257D}:",
		"{x}":     "sluice:{{x%7D}:",
		"\x00adm": "sluice:{\x00adm}:",
	} {
		if got := string(partitionBase(nil, "sluice", partition)); got != want {
			t.Errorf("partitionBase(%q) = %q, want %q", partition, got, want)
		}
	}
	// Escaping is injective: distinct partitions never share a tag.
	seen := map[string]string{}
	for _, p := range []string{"a}", "a%7D", "a%", "a%25", "a}}", "a%7D%7D", "a}%7D", "}", "%"} {
		tag := string(appendTag(nil, p))
		if strings.Contains(tag, "}") {
			t.Errorf("tag of %q holds a brace: %q", p, tag)
		}
		if q, ok := seen[tag]; ok {
			t.Errorf("partitions %q and %q share the tag %q", p, q, tag)
		}
		seen[tag] = p
	}
}

func TestEncodeKeys(t *testing.T) {
	cfg := DefaultConfig()
	b := &engine.Batch{
		Partition:   "p",
		OperationID: "op",
		Step:        3,
		Commands: []engine.Command{
			engine.Hit(1, engine.Window{Key: "w", Kind: algo.KindFixed, Limit: 1, WindowMs: 1000}),
			engine.Incr("w2", 1, 1000),
			engine.Get("w"),
			engine.Reserve("r", 1, engine.Budget{Key: "b", Limit: 1, WindowMs: 1000, Refundable: true}),
		},
	}
	var c call
	if err := c.encode(b, &cfg, true); err != nil {
		t.Fatal(err)
	}
	want := []string{"sluice:{p}:r:3:op", "sluice:{p}:k:w", "sluice:{p}:k:w2", "sluice:{p}:k:r", "sluice:{p}:k:b"}
	if strings.Join(c.keys, " ") != strings.Join(want, " ") {
		t.Fatalf("keys %q, want %q (each once, the replay record first)", c.keys, want)
	}
	if c.args[2] != "sluice:{p}:k:" {
		t.Errorf("record key prefix (ARGV[3]) %q", c.args[2])
	}
	fc := c.fcallArgs()
	if len(fc) != 3+len(c.keys)+len(c.args) || fc[0] != "fcall" || fc[1] != functionName || fc[2] != len(c.keys) || fc[3] != want[0] || fc[3+len(c.keys)] != scriptFormat {
		t.Errorf("FCALL command %q", fc)
	}
}

// TestEncodeRefuses checks the bounds the store adds to the engine's, and
// that it validates what it is given even without the engine.
func TestEncodeRefuses(t *testing.T) {
	cfg := DefaultConfig()
	p := engine.Pace{Key: "k", Limit: 1, WindowMs: 1000}
	for name, cmds := range map[string][]engine.Command{
		"slot beyond 2^52": {p.Claim(1<<52+1, 1, 0)},
		"limit above max":  {engine.Hit(1, engine.Window{Key: "w", Kind: algo.KindGCRA, Limit: algo.MaxLimit + 1, WindowMs: 1000})},
		"no command":       nil,
	} {
		var c call
		if err := c.encode(&engine.Batch{Partition: "p", Commands: cmds}, &cfg, true); !errors.Is(err, engine.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
}

// TestDecodeReply feeds replies of every wrong shape: each is an error
// wrapping ErrUnavailable, never a result, and a well-formed one decodes.
func TestDecodeReply(t *testing.T) {
	b := &engine.Batch{Partition: "p", Commands: []engine.Command{engine.Get("k")}}
	good := func() []any {
		return []any{int64(0), int64(0), int64(0), []any{int64(1), int64(1), int64(2), int64(3), int64(4), int64(5), int64(6), "-7", "v", []any{}}}
	}
	var out engine.StepResult
	if err := decodeReply(good(), b, &out); err != nil {
		t.Fatal(err)
	}
	r := out.Results[0]
	if !r.Allowed || !r.Found || r.Remaining != 2 || r.ResetAt != 3 || r.RetryAfterMs != 4 || r.At != 5 || r.TTLMs != 6 || r.Int != -7 || r.Value != "v" {
		t.Fatalf("decoded %+v", r)
	}
	mutate := func(f func(a []any) any) any { return f(good()) }
	result := func(a []any) []any { return a[3].([]any) }
	for name, reply := range map[string]any{
		"nil":              nil,
		"string":           "OK",
		"empty":            []any{},
		"status type":      []any{"0"},
		"short":            mutate(func(a []any) any { return a[:3] }),
		"long":             mutate(func(a []any) any { return append(a, a[3]) }),
		"replayed 2":       mutate(func(a []any) any { a[1] = int64(2); return a }),
		"denied string":    mutate(func(a []any) any { a[2] = "0"; return a }),
		"result scalar":    mutate(func(a []any) any { a[3] = int64(1); return a }),
		"result short":     mutate(func(a []any) any { a[3] = result(a)[:9]; return a }),
		"allowed 7":        mutate(func(a []any) any { result(a)[0] = int64(7); return a }),
		"remaining string": mutate(func(a []any) any { result(a)[2] = "2"; return a }),
		"int not a number": mutate(func(a []any) any { result(a)[7] = "x"; return a }),
		"int overflow":     mutate(func(a []any) any { result(a)[7] = "9223372036854775808"; return a }),
		"value number":     mutate(func(a []any) any { result(a)[8] = int64(1); return a }),
		"windows 3":        mutate(func(a []any) any { result(a)[9] = []any{int64(1), int64(2), int64(3)}; return a }),
		"window string":    mutate(func(a []any) any { result(a)[9] = []any{int64(1), "2", int64(3), int64(4)}; return a }),
		"unknown failure":  []any{int64(99), int64(1), "x"},
		"failure short":    []any{int64(1), int64(1)},
		"failure types":    []any{int64(1), "1", int64(2)},
	} {
		out = engine.StepResult{Results: []engine.Result{{Allowed: true}}}
		out.Results = out.Results[:0]
		err := decodeReply(reply, b, &out)
		if !errors.Is(err, engine.ErrUnavailable) {
			t.Errorf("%s: %v, want ErrUnavailable", name, err)
		}
	}
	for code, want := range map[int64]error{1: engine.ErrWrongType, 2: engine.ErrOverflow, 3: engine.ErrOperationConflict, 4: engine.ErrCorrupt, 5: engine.ErrInvalid} {
		err := decodeReply([]any{code, int64(1), "msg"}, b, &out)
		if !errors.Is(err, want) {
			t.Errorf("failure %d: %v, want %v", code, err, want)
		}
	}
}

// TestDecodeLoneReply checks the compact reply of a lone hit of one window:
// it decodes into the result the full reply would give, and a reply of any
// other shape is an error wrapping ErrUnavailable. A lone hit with an
// operation id, or of two windows, takes the full reply.
func TestDecodeLoneReply(t *testing.T) {
	hit := engine.Hit(1, engine.Window{Key: "w", Kind: algo.KindGCRA, Limit: 10, WindowMs: 1000})
	b := &engine.Batch{Partition: "p", Commands: []engine.Command{hit}}
	if !isLone(b) {
		t.Fatal("a lone hit of one window is not lone")
	}
	two := engine.Hit(1, hit.Windows[0], engine.Window{Key: "v", Kind: algo.KindFixed, Limit: 10, WindowMs: 1000})
	for name, other := range map[string]*engine.Batch{
		"operation id": {Partition: "p", OperationID: "op", Commands: []engine.Command{hit}},
		"two windows":  {Partition: "p", Commands: []engine.Command{two}},
		"two commands": {Partition: "p", Commands: []engine.Command{hit, hit}},
		"a get":        {Partition: "p", Commands: []engine.Command{engine.Get("k")}},
	} {
		if isLone(other) {
			t.Errorf("%s: lone", name)
		}
	}
	good := func() []any {
		return []any{int64(0), int64(0), int64(3), int64(1700000000000), int64(250)}
	}
	// A reused StepResult with a previous result and window in it.
	out := engine.StepResult{Results: []engine.Result{{Found: true, Int: 9, Windows: []engine.WindowResult{{Allowed: true}}}}}
	resetStep(&out)
	if err := decodeReply(good(), b, &out); err != nil {
		t.Fatal(err)
	}
	want := engine.Result{Remaining: 3, ResetAt: 1700000000000, RetryAfterMs: 250,
		Windows: []engine.WindowResult{{Remaining: 3, ResetAt: 1700000000000, RetryAfterMs: 250}}}
	if !out.Denied || out.Replayed || len(out.Results) != 1 || !reflect.DeepEqual(out.Results[0], want) {
		t.Fatalf("decoded %+v, want denied and %+v", out, want)
	}
	// The hit's figures are the window's as a hit of one window bounds
	// them (cmdHit in lua/windows.lua): remaining at most MaxLimit, resetAt
	// and retryAfter at least 0.
	edge := []any{int64(0), int64(1), algo.MaxLimit + 1, int64(-5), int64(-7)}
	resetStep(&out)
	if err := decodeReply(edge, b, &out); err != nil {
		t.Fatal(err)
	}
	want = engine.Result{Allowed: true, Remaining: algo.MaxLimit, ResetAt: 0, RetryAfterMs: 0,
		Windows: []engine.WindowResult{{Allowed: true, Remaining: algo.MaxLimit + 1, ResetAt: -5, RetryAfterMs: -7}}}
	if out.Denied || len(out.Results) != 1 || !reflect.DeepEqual(out.Results[0], want) {
		t.Fatalf("decoded %+v, want %+v", out, want)
	}
	for name, reply := range map[string]any{
		"full reply":     []any{int64(0), int64(0), int64(0), []any{int64(1), int64(0), int64(2), int64(3), int64(4), int64(0), int64(0), "0", "", []any{int64(1), int64(2), int64(3), int64(4)}}},
		"short":          good()[:4],
		"long":           append(good(), int64(1)),
		"allowed 2":      func() any { a := good(); a[1] = int64(2); return a }(),
		"window string":  func() any { a := good(); a[3] = "1"; return a }(),
		"eight elements": append(good(), int64(4), int64(1700000000001), int64(251)),
		"status 1, long": func() any { a := good(); a[0] = int64(1); return a }(),
	} {
		out := engine.StepResult{}
		if err := decodeReply(reply, b, &out); !errors.Is(err, engine.ErrUnavailable) {
			t.Errorf("%s: %v, want ErrUnavailable", name, err)
		}
	}
}

// TestScriptParts checks that the script is every file under lua/, each
// once.
func TestScriptParts(t *testing.T) {
	files, err := luaFiles.ReadDir("lua")
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, p := range scriptParts {
		listed[p+".lua"] = true
	}
	for _, f := range files {
		if !listed[f.Name()] {
			t.Errorf("lua/%s is not part of the script", f.Name())
		}
		delete(listed, f.Name())
	}
	if len(listed) != 0 || len(files) != len(scriptParts) {
		t.Errorf("script parts %v, files %d", scriptParts, len(files))
	}
}

// TestDecodeJointReply checks the reply of a joint step: each batch's
// reply decoded into its result, a failure naming its batch, and a reply
// of any other shape — or one whose denial disagrees with its batches' —
// an error wrapping ErrUnavailable.
func TestDecodeJointReply(t *testing.T) {
	bs := []*engine.Batch{
		{Partition: "p", Commands: []engine.Command{engine.Get("k")}},
		{Partition: "q", Commands: []engine.Command{engine.Get("k")}},
	}
	result := func(allowed int64) []any {
		return []any{allowed, int64(1), int64(2), int64(3), int64(4), int64(5), int64(6), "-7", "v", []any{}}
	}
	batch := func(denied int64) []any {
		allowed := 1 - denied
		return []any{int64(0), int64(0), denied, result(allowed)}
	}
	outs := make([]engine.StepResult, 2)
	if err := decodeJoint([]any{int64(0), int64(1), batch(0), batch(1)}, bs, outs); err != nil {
		t.Fatal(err)
	}
	if outs[0].Denied || !outs[1].Denied || outs[0].Results[0].Value != "v" || outs[1].Results[0].Int != -7 {
		t.Fatalf("decoded %+v", outs)
	}
	for name, reply := range map[string]any{
		"nil":                   nil,
		"empty":                 []any{},
		"one batch of two":      []any{int64(0), int64(0), batch(0)},
		"three batches of two":  []any{int64(0), int64(0), batch(0), batch(0), batch(0)},
		"denied string":         []any{int64(0), "0", batch(0), batch(0)},
		"denied, none denying":  []any{int64(0), int64(1), batch(0), batch(0)},
		"allowed, one denying":  []any{int64(0), int64(0), batch(0), batch(1)},
		"a batch malformed":     []any{int64(0), int64(0), batch(0), []any{int64(0)}},
		"failure without batch": []any{int64(1), int64(1), "x"},
		"failure in batch 3":    []any{int64(1), int64(1), "x", int64(3)},
		"failure in batch 0":    []any{int64(1), int64(1), "x", int64(0)},
	} {
		for i := range outs {
			resetStep(&outs[i])
		}
		if err := decodeJoint(reply, bs, outs); !errors.Is(err, engine.ErrUnavailable) {
			t.Errorf("%s: %v, want ErrUnavailable", name, err)
		}
	}
	err := decodeJoint([]any{int64(1), int64(1), "planted", int64(2)}, bs, outs)
	if !errors.Is(err, engine.ErrWrongType) || !strings.Contains(err.Error(), "command 0 (kv.get)") {
		t.Errorf("a failure in batch 2: %v, want ErrWrongType at its command 0", err)
	}
}
