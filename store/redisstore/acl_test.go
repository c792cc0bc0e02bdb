package redisstore_test

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/store/redisstore"
)

// aclUser and aclPassword are the user docs/operations.md sets up, and the
// password the tests write where the document writes "…".
const (
	aclUser     = "sluice"
	aclPassword = "acl-test-password"
)

// documentedACL returns the ACL SETUSER lines of docs/operations.md
// ("Functions and ACLs"), the one place that lists what the store's Redis
// user needs: the first, which every store needs, and the others by the
// condition their comment names ("with --redis-wait-replicas"). Each line
// is the arguments of one ACL command.
func documentedACL(t *testing.T) (base []any, extra map[string][]any) {
	t.Helper()
	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	extra = map[string][]any{}
	for line := range strings.SplitSeq(string(doc), "\n") {
		if !strings.HasPrefix(line, "ACL SETUSER "+aclUser+" ") {
			continue
		}
		rules, when, _ := strings.Cut(line, "#")
		var args []any
		for _, f := range strings.Fields(rules) {
			if f == ">…" {
				f = ">" + aclPassword
			}
			args = append(args, f)
		}
		if base == nil {
			base = args
			continue
		}
		extra[strings.TrimSpace(when)] = args
	}
	if base == nil {
		t.Fatal(`docs/operations.md has no "ACL SETUSER sluice" line`)
	}
	return base, extra
}

// setUser runs the documented base line and the extra lines of the
// conditions named on the server of c.
func setUser(t *testing.T, c *redis.Client, conditions ...string) {
	t.Helper()
	base, extra := documentedACL(t)
	lines := [][]any{base}
	for _, when := range conditions {
		line, ok := extra[when]
		if !ok {
			t.Fatalf("docs/operations.md has no ACL SETUSER line %q", when)
		}
		lines = append(lines, line)
	}
	for _, line := range lines {
		if err := c.Do(t.Context(), line...).Err(); err != nil {
			t.Fatalf("%v: %v", line, err)
		}
	}
	if err := c.Do(t.Context(), "acl", "log", "reset").Err(); err != nil {
		t.Fatal(err)
	}
}

// aclRefusals returns what ACL LOG recorded on the server of c: every
// command or key it refused, with where (top level or inside the batch
// code). CLIENT SETINFO and CLIENT MAINT_NOTIFICATIONS are left out: the
// client sends them on each connection and goes on without them.
func aclRefusals(t *testing.T, c *redis.Client) []string {
	t.Helper()
	entries, err := c.Do(t.Context(), "acl", "log").Slice()
	if err != nil {
		t.Fatal(err)
	}
	var refused []string
	for _, e := range entries {
		m, ok := e.(map[any]any)
		if !ok {
			t.Fatalf("ACL LOG entry %T, want a map (RESP3)", e)
		}
		object := fmt.Sprint(m["object"])
		if object == "client|setinfo" || object == "client|maint_notifications" {
			continue
		}
		refused = append(refused, fmt.Sprintf("%v %s in %v", m["reason"], object, m["context"]))
	}
	return refused
}

// aclOptions returns o logged in as the documented user.
func aclOptions(o *redis.Options) *redis.Options {
	o.Username, o.Password = aclUser, aclPassword
	return o
}

// exercise runs, on the store, what a server runs: a lone hit, a batch of
// several commands with an operation id, and (where the store joins) a
// joint step of two partitions; each must answer as on a store with every
// permission.
func exercise(t *testing.T, s *redisstore.Store) {
	t.Helper()
	eng := engine.New(s)
	// A sliding log, exact over any 60 s: the store reads Redis's own
	// clock, and a fixed window would start afresh if the three hits
	// straddled the turn of a minute.
	win := engine.Window{Key: "w", Kind: algo.KindLog, Limit: 2, WindowMs: 60_000}
	var out engine.StepResult
	for i, want := range []bool{true, true, false} {
		if err := eng.Apply(t.Context(), "p", &out, engine.Hit(1, win)); err != nil {
			t.Fatalf("lone hit %d: %v", i, err)
		}
		if out.Results[0].Allowed != want {
			t.Fatalf("lone hit %d: allowed %t, want %t", i, out.Results[0].Allowed, want)
		}
	}
	req := &engine.Request{OperationID: "op", Steps: []engine.Step{{Partition: "q", Commands: []engine.Command{
		engine.Incr("n", 2, 60_000), engine.Get("n"), engine.Del("gone"),
		engine.Reserve("r", 1, engine.Budget{Key: "b", Limit: 5, WindowMs: 60_000, Refundable: true}),
	}}}}
	for _, replay := range []bool{false, true} {
		resp, err := eng.Do(t.Context(), req)
		if err != nil {
			t.Fatalf("batch (replay %t): %v", replay, err)
		}
		st := resp.Steps[0]
		if st.Replayed != replay || st.Results[1].Value != "2" || !st.Results[3].Allowed {
			t.Fatalf("batch (replay %t): replayed %t, %+v", replay, st.Replayed, st.Results)
		}
	}
	if !s.Joins() {
		return
	}
	bs := []*engine.Batch{
		{Partition: "src", Commands: []engine.Command{engine.Reserve("", 1, engine.Budget{Key: "b", Limit: 1, WindowMs: 60_000})}},
		{Partition: "who", Commands: []engine.Command{engine.Reserve("", 1, engine.Budget{Key: "b", Limit: 1, WindowMs: 60_000})}},
	}
	for i, want := range []bool{false, true} {
		outs := make([]engine.StepResult, 2)
		if err := s.ApplyJoint(t.Context(), bs, outs); err != nil {
			t.Fatalf("joint step %d: %v", i, err)
		}
		if outs[0].Denied != want || outs[1].Denied != want {
			t.Fatalf("joint step %d: denied %t and %t, want %t", i, outs[0].Denied, outs[1].Denied, want)
		}
	}
}

// exerciseAs opens a store with opts (the documented user's) and cfg, runs
// exercise on it, and fails if admin's ACL LOG holds any refusal.
func exerciseAs(t *testing.T, admin *redis.Client, opts *redis.Options, cfg redisstore.Config) {
	t.Helper()
	s, err := redisstore.New(redis.NewClient(opts), cfg)
	if err != nil {
		t.Fatalf("New as the documented user: %v", err)
	}
	defer s.Close()
	exercise(t, s)
	if refused := aclRefusals(t, admin); len(refused) > 0 {
		t.Fatalf("ACL LOG: %v", refused)
	}
}

// TestACLDocumented runs the store as a Redis user holding exactly what
// docs/operations.md ("Functions and ACLs") lists — the test runs the
// document's own ACL SETUSER lines — and shows that it is enough: New
// succeeds, and a lone hit, a batch with an operation id and its replay,
// and a joint step answer as they would with every permission, by
// functions and by scripts. It is also no more than the store needs to run
// as designed: ACL LOG records no refusal, not even one the store works
// around (an FCALL refused would send every batch to scripts, and pass
// otherwise). The conditional lines are run where their condition holds:
// WAIT on a primary with a replica, CLUSTER SLOTS on a cluster, SELECT and
// CLIENT SETNAME with a database and a client name.
func TestACLDocumented(t *testing.T) {
	t.Run("single node", func(t *testing.T) {
		srv := redistest.Start(t)
		admin := srv.Client(t)
		setUser(t, admin)
		for _, scripts := range []bool{false, true} {
			cfg := freshConfig(nil)
			cfg.Prefix = "sluice"
			if err := admin.FlushAll(t.Context()).Err(); err != nil {
				t.Fatal(err)
			}
			s, err := redisstore.New(redis.NewClient(aclOptions(srv.Options())), cfg)
			if err != nil {
				t.Fatalf("New as the documented user: %v", err)
			}
			if scripts {
				redisstore.UseScripts(s)
			}
			exercise(t, s)
			s.Close()
		}
		if refused := aclRefusals(t, admin); len(refused) > 0 {
			t.Fatalf("ACL LOG: %v", refused)
		}
	})
	t.Run("database and client name", func(t *testing.T) {
		srv := redistest.Start(t)
		admin := srv.Client(t)
		setUser(t, admin, "with a database number in the URL", "with client_name in the URL")
		opts := aclOptions(srv.Options())
		opts.DB, opts.ClientName = 1, "sluice-test"
		cfg := freshConfig(nil)
		cfg.Prefix = "sluice"
		exerciseAs(t, admin, opts, cfg)
	})
	t.Run("wait replicas", func(t *testing.T) {
		r := redistest.StartReplicated(t)
		admin := r.Primary.Client(t)
		setUser(t, admin, "with --redis-wait-replicas")
		cfg := waitConfig()
		cfg.Prefix = "sluice"
		cfg.WaitTimeout = 3 * time.Second // as in TestWaitReplicas: a busy machine may be slow to acknowledge
		exerciseAs(t, admin, aclOptions(r.Primary.Options()), cfg)
	})
	t.Run("cluster", func(t *testing.T) {
		cl := redistest.StartCluster(t, 3)
		for _, m := range cl.Masters {
			setUser(t, m.Client(t), "on a Redis Cluster")
		}
		opts := cl.Options()
		opts.Username, opts.Password = aclUser, aclPassword
		cfg := freshConfig(nil)
		cfg.Prefix = "sluice"
		s, err := redisstore.New(redis.NewClusterClient(opts), cfg)
		if err != nil {
			t.Fatalf("New as the documented user: %v", err)
		}
		defer s.Close()
		exercise(t, s)
		for _, m := range cl.Masters {
			if refused := aclRefusals(t, m.Client(t)); len(refused) > 0 {
				t.Fatalf("ACL LOG of %s: %v", m.Addr, refused)
			}
		}
	})
}

// TestACLRefusalNamed runs the store as users lacking one thing the
// batch code needs — the clock (TIME), reading (GET), the prefix's keys —
// and shows that every batch then fails with ErrUnavailable saying that
// the ACL refused it, with no result, and that the store still calls its
// function library afterwards: a refusal inside the library, or of a key,
// is no sign that functions are missing, and must not send the store to
// scripts for good (hiding the cause behind a fallback). A joint step
// meets the same refusal the same way. A user refused FCALL itself, by
// contrast, runs every batch as a script, and answers.
func TestACLRefusalNamed(t *testing.T) {
	base, _ := documentedACL(t)
	without := func(rule string) []any {
		var line []any
		for _, a := range base {
			if a != rule {
				line = append(line, a)
			}
		}
		if len(line) == len(base) {
			t.Fatalf("the documented line has no %s", rule)
		}
		return line
	}
	for _, tc := range []struct {
		name    string
		line    []any
		refused bool // batches fail: the refusal is no sign of missing functions
	}{
		{"no TIME", without("+time"), true},
		{"no GET", without("+get"), true},
		{"other keys", append(without("~sluice:*"), "~other:*"), true},
		{"no FCALL", without("+fcall"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			admin := srv.Client(t)
			if err := admin.Do(t.Context(), tc.line...).Err(); err != nil {
				t.Fatal(err)
			}
			cfg := freshConfig(nil)
			cfg.Prefix = "sluice"
			hook := &batchCalls{}
			client := redis.NewClient(aclOptions(srv.Options()))
			client.AddHook(hook)
			s, err := redisstore.New(client, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			eng := engine.New(s)
			win := engine.Window{Key: "w", Kind: algo.KindFixed, Limit: 5, WindowMs: 60_000}
			for i := range 2 {
				var out engine.StepResult
				err := eng.Apply(t.Context(), "p", &out, engine.Hit(1, win), engine.Get("k"))
				calls := hook.take()
				if len(calls) == 0 {
					t.Fatalf("batch %d: no call of the batch code sent (%v)", i, err)
				}
				last := calls[len(calls)-1].name
				if !tc.refused {
					if err != nil || !out.Results[0].Allowed {
						t.Fatalf("batch %d without FCALL: %v %+v, want it run as a script", i, err, out.Results)
					}
					if i > 0 && (len(calls) != 1 || last != "evalsha") {
						t.Fatalf("batch %d without FCALL: sent %+v, want one EVALSHA", i, calls)
					}
					continue
				}
				if !errors.Is(err, engine.ErrUnavailable) || !strings.Contains(err.Error(), "the ACL refuses") || len(out.Results) != 0 {
					t.Fatalf("batch %d: %v with %d results, want ErrUnavailable naming the ACL and none", i, err, len(out.Results))
				}
				for _, c := range calls {
					if c.name != "fcall" {
						t.Fatalf("batch %d: sent %+v after an ACL refusal, want the function library alone", i, calls)
					}
				}
			}
			if !tc.refused {
				return
			}
			bs := []*engine.Batch{
				{Partition: "src", Commands: []engine.Command{engine.Reserve("", 1, engine.Budget{Key: "b", Limit: 1, WindowMs: 60_000})}},
				{Partition: "who", Commands: []engine.Command{engine.Reserve("", 1, engine.Budget{Key: "b", Limit: 1, WindowMs: 60_000})}},
			}
			outs := make([]engine.StepResult, 2)
			err = s.ApplyJoint(t.Context(), bs, outs)
			if !errors.Is(err, engine.ErrUnavailable) || !strings.Contains(err.Error(), "the ACL refuses") || len(outs[0].Results)+len(outs[1].Results) != 0 {
				t.Fatalf("joint step: %v, %+v; want ErrUnavailable naming the ACL and no results", err, outs)
			}
		})
	}
}
