package redisstore_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/store/redisstore"
)

func TestConfigValidate(t *testing.T) {
	valid := func(mut func(*redisstore.Config)) redisstore.Config {
		c := redisstore.DefaultConfig()
		mut(&c)
		return c
	}
	for name, c := range map[string]redisstore.Config{
		"brace in prefix": valid(func(c *redisstore.Config) { c.Prefix = "a{b" }),
		"closing brace":   valid(func(c *redisstore.Config) { c.Prefix = "a}" }),
		"long prefix":     valid(func(c *redisstore.Config) { c.Prefix = strings.Repeat("p", 65) }),
		"negative time":   valid(func(c *redisstore.Config) { c.Timeout = -time.Second }),
		"timeout too big": valid(func(c *redisstore.Config) { c.Timeout = time.Hour }),
		"negative wait":   valid(func(c *redisstore.Config) { c.WaitReplicas = -1 }),
		"too many waits":  valid(func(c *redisstore.Config) { c.WaitReplicas = redisstore.MaxWaitReplicas + 1 }),
		"wait too long": valid(func(c *redisstore.Config) {
			c.WaitReplicas, c.WaitTimeout = 1, c.Timeout
		}),
		"wait under 1ms":    valid(func(c *redisstore.Config) { c.WaitReplicas, c.WaitTimeout = 1, time.Microsecond }),
		"negative pipeline": valid(func(c *redisstore.Config) { c.Pipeline = -2 }),
		"pipeline too big":  valid(func(c *redisstore.Config) { c.Pipeline = redisstore.MaxPipeline + 1 }),
	} {
		if err := c.Validate(); !errors.Is(err, engine.ErrInvalid) {
			t.Errorf("%s: Validate = %v, want ErrInvalid", name, err)
		}
	}
	if err := (redisstore.Config{}).Validate(); err != nil {
		t.Errorf("the zero Config (all defaults): %v", err)
	}
	if err := redisstore.DefaultConfig().Validate(); err != nil {
		t.Errorf("DefaultConfig: %v", err)
	}
	if err := (redisstore.Config{WaitReplicas: 1}).Validate(); err != nil {
		t.Errorf("WaitReplicas with the default WaitTimeout: %v", err)
	}
}

// TestNewRefusesEviction checks that New refuses a server that may evict
// keys, on a single node and on one master of a cluster, unless told to
// allow it.
func TestNewRefusesEviction(t *testing.T) {
	srv := redistest.Start(t, "--maxmemory-policy", "allkeys-lru")
	_, err := redisstore.New(redis.NewClient(srv.Options()), freshConfig(nil))
	var evicts *redisstore.EvictionError
	if !errors.Is(err, engine.ErrInvalid) || !strings.Contains(err.Error(), "allkeys-lru") || !errors.As(err, &evicts) || evicts.Policy != "allkeys-lru" {
		t.Fatalf("New on allkeys-lru: %v, want ErrInvalid and an EvictionError naming the policy", err)
	}
	cfg := freshConfig(nil)
	cfg.AllowEviction = true
	s, err := redisstore.New(redis.NewClient(srv.Options()), cfg)
	if err != nil {
		t.Fatalf("New with AllowEviction: %v", err)
	}
	s.Close()

	cl := redistest.StartCluster(t, 3)
	last := cl.Masters[2].Client(t)
	if err := last.ConfigSet(t.Context(), "maxmemory-policy", "volatile-ttl").Err(); err != nil {
		t.Fatal(err)
	}
	_, err = redisstore.New(redis.NewClusterClient(cl.Options()), freshConfig(nil))
	if !errors.Is(err, engine.ErrInvalid) || !errors.As(err, &evicts) || evicts.Policy != "volatile-ttl" {
		t.Fatalf("New on a cluster with one evicting master: %v, want ErrInvalid and an EvictionError naming volatile-ttl", err)
	}
}

// TestNewRefusesClientWithoutDeadlines checks that New refuses a go-redis
// client that would let a call outlive the store's timeout.
func TestNewRefusesClientWithoutDeadlines(t *testing.T) {
	srv := redistest.Start(t)
	opts := srv.Options()
	opts.ContextTimeoutEnabled = false
	c := redis.NewClient(opts)
	defer c.Close()
	if _, err := redisstore.New(c, freshConfig(nil)); !errors.Is(err, engine.ErrInvalid) {
		t.Fatalf("New with ContextTimeoutEnabled off: %v, want ErrInvalid", err)
	}
	if _, err := redisstore.New(nil, freshConfig(nil)); !errors.Is(err, engine.ErrInvalid) {
		t.Fatalf("New(nil): %v, want ErrInvalid", err)
	}
}

// TestCodeReloaded checks that a batch loads its code where the server
// lacks it — on a fresh server, and after FUNCTION FLUSH or SCRIPT FLUSH —
// and that later batches call it without loading: the function library by
// FUNCTION LOAD then FCALL, and, on a store running scripts, the script by
// EVAL after EVALSHA answered NOSCRIPT.
func TestCodeReloaded(t *testing.T) {
	for _, tc := range []struct {
		name        string
		scripts     bool
		flush       func(ctx context.Context, c *redis.Client) error
		call, load  string
		callsOnLoad int64 // calls of the call command in a batch that loads
	}{
		{"functions", false, func(ctx context.Context, c *redis.Client) error { return c.FunctionFlush(ctx).Err() }, "fcall", "function|load", 2},
		{"scripts", true, func(ctx context.Context, c *redis.Client) error { return c.ScriptFlush(ctx).Err() }, "evalsha", "eval", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			raw := srv.Client(t)
			s := openStore(t, srv, freshConfig(nil))
			if tc.scripts {
				redisstore.UseScripts(s)
			}
			eng := engine.New(s)
			var out engine.StepResult
			incr := engine.Incr("n", 1, 60_000)
			for i, flush := range []bool{true, false, true, false} {
				if flush {
					if err := tc.flush(t.Context(), raw); err != nil {
						t.Fatal(err)
					}
				}
				if err := raw.ConfigResetStat(t.Context()).Err(); err != nil {
					t.Fatal(err)
				}
				if err := eng.Apply(t.Context(), "p", &out, incr); err != nil {
					t.Fatalf("batch %d: %v", i, err)
				}
				if got := out.Results[0].Int; got != int64(i+1) {
					t.Fatalf("batch %d counted %d, want %d: the batch ran other than once", i, got, i+1)
				}
				loads, calls := commandCalls(t, raw, tc.load), commandCalls(t, raw, tc.call)
				wantLoads, wantCalls := int64(0), int64(1)
				if flush {
					wantLoads, wantCalls = 1, tc.callsOnLoad
				}
				if loads != wantLoads || calls != wantCalls {
					t.Errorf("batch %d (flushed %t): %d %s and %d %s calls, want %d and %d", i, flush, loads, tc.load, calls, tc.call, wantLoads, wantCalls)
				}
			}
		})
	}
}

// TestServerWithoutFunctions runs batches on a server where FCALL does not
// exist (renamed away, as on Redis before 7): the store turns to scripts
// for good after its first call and answers every batch.
func TestServerWithoutFunctions(t *testing.T) {
	srv := redistest.Start(t, "--rename-command", "FCALL", "")
	raw := srv.Client(t)
	s := openStore(t, srv, freshConfig(nil))
	eng := engine.New(s)
	var out engine.StepResult
	for i := range 3 {
		if err := eng.Apply(t.Context(), "p", &out, engine.Incr("n", 1, 60_000)); err != nil {
			t.Fatalf("batch %d: %v", i, err)
		}
		if got := out.Results[0].Int; got != int64(i+1) {
			t.Fatalf("batch %d counted %d, want %d", i, got, i+1)
		}
	}
	if n := commandCalls(t, raw, "evalsha"); n != 3 {
		t.Errorf("%d EVALSHA calls, want one per batch", n)
	}
}

// commandCalls returns the calls of cmd since the last CONFIG RESETSTAT.
func commandCalls(t *testing.T, c *redis.Client, cmd string) int64 {
	t.Helper()
	info, err := c.Info(t.Context(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(info, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":calls="); ok {
			n, _, _ := strings.Cut(rest, ",")
			v, err := strconv.ParseInt(n, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
	}
	return 0
}

// TestOutOfMemory fills Redis to its maxmemory under noeviction: a batch
// that would write fails with ErrUnavailable and admits nothing, a batch
// that only reads still answers, and the limit holds once memory is back.
func TestOutOfMemory(t *testing.T) {
	srv := redistest.Start(t)
	raw := srv.Client(t)
	s := openStore(t, srv, freshConfig(nil))
	eng := engine.New(s)
	win := engine.Window{Key: "w", Kind: algo.KindFixed, Limit: 3, WindowMs: 3_600_000}
	var out engine.StepResult
	if err := eng.Apply(t.Context(), "p", &out, engine.Hit(1, win)); err != nil {
		t.Fatal(err)
	}
	if err := raw.ConfigSet(t.Context(), "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	err := eng.Apply(t.Context(), "p", &out, engine.Hit(1, win))
	if !errors.Is(err, engine.ErrUnavailable) || !strings.Contains(err.Error(), "OOM") {
		t.Fatalf("hit over maxmemory: %v, want ErrUnavailable (OOM)", err)
	}
	if len(out.Results) != 0 {
		t.Fatalf("a failed hit left %d results", len(out.Results))
	}
	if err := eng.Apply(t.Context(), "p", &out, engine.Get("missing")); err != nil {
		t.Fatalf("read-only batch over maxmemory: %v", err)
	}
	if err := raw.ConfigSet(t.Context(), "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	// One hit was charged before the refusal: two remain, then none.
	for i, want := range []bool{true, true, false} {
		if err := eng.Apply(t.Context(), "p", &out, engine.Hit(1, win)); err != nil {
			t.Fatal(err)
		}
		if got := out.Results[0].Allowed; got != want {
			t.Fatalf("hit %d after the refusal: allowed %t, want %t", i, got, want)
		}
	}
}

// TestLibraryLoadOverMaxmemory starts a store on a fresh server already
// over its maxmemory, where FUNCTION LOAD is refused (OOM): a read-only
// batch still answers, run as a script, and once memory is back the next
// batch loads the library and calls it. A refusal for the moment must not
// send the store to scripts for good.
func TestLibraryLoadOverMaxmemory(t *testing.T) {
	srv := redistest.Start(t)
	raw := srv.Client(t)
	if err := raw.ConfigSet(t.Context(), "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	s := openStore(t, srv, freshConfig(nil))
	eng := engine.New(s)
	var out engine.StepResult
	if err := eng.Apply(t.Context(), "p", &out, engine.Get("missing")); err != nil {
		t.Fatalf("read-only batch over maxmemory on a fresh server: %v", err)
	}
	if err := raw.ConfigSet(t.Context(), "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	for i, wantLoads := range []int64{1, 0} {
		if err := raw.ConfigResetStat(t.Context()).Err(); err != nil {
			t.Fatal(err)
		}
		if err := eng.Apply(t.Context(), "p", &out, engine.Incr("n", 1, 60_000)); err != nil {
			t.Fatalf("batch %d with memory back: %v", i, err)
		}
		loads, scripts := commandCalls(t, raw, "function|load"), commandCalls(t, raw, "evalsha")+commandCalls(t, raw, "eval")
		if loads != wantLoads || scripts != 0 || commandCalls(t, raw, "fcall") == 0 {
			t.Fatalf("batch %d with memory back: %d library loads and %d script calls, want %d and none", i, loads, scripts, wantLoads)
		}
	}
}

// TestRedisDown checks that a store whose Redis has gone answers every call
// with ErrUnavailable and no result.
func TestRedisDown(t *testing.T) {
	srv := redistest.Start(t)
	s := openStore(t, srv, freshConfig(nil))
	srv.Stop()
	var out engine.StepResult
	err := engine.New(s).Apply(t.Context(), "p", &out, engine.Hit(1, engine.Window{Key: "w", Kind: algo.KindGCRA, Limit: 1, WindowMs: 1000}))
	if !errors.Is(err, engine.ErrUnavailable) || len(out.Results) != 0 {
		t.Fatalf("hit on a stopped Redis: %v with %d results, want ErrUnavailable and none", err, len(out.Results))
	}
}

// TestBudgetRange pins how the script evaluates a budget whose counter was
// set by hand far outside any limit: at or above −2^52 exactly as algo
// does, any value above every limit denied (algo's int64 sum would wrap for
// the largest), and below −2^52 refused with ErrOverflow, changing nothing.
func TestBudgetRange(t *testing.T) {
	srv := redistest.Start(t)
	s := openStore(t, srv, freshConfig(nil))
	eng := engine.New(s)
	reserve := engine.Reserve("", 1, engine.Budget{Key: "b", Limit: 10, WindowMs: 60_000})
	for _, c := range []struct {
		value     string
		allowed   bool
		remaining int64
		err       error
	}{
		{"-4503599627370496", true, 4503599627370505, nil},
		{"4503599627370497", false, 0, nil},
		{"9223372036854775807", false, 0, nil},
		{"-4503599627370497", false, 0, engine.ErrOverflow},
	} {
		var out engine.StepResult
		if err := eng.Apply(t.Context(), "p", &out, engine.Set("b", c.value, 60_000)); err != nil {
			t.Fatal(err)
		}
		err := eng.Apply(t.Context(), "p", &out, reserve)
		if !errors.Is(err, c.err) || (err == nil) != (c.err == nil) {
			t.Fatalf("budget at %s: %v, want %v", c.value, err, c.err)
		}
		if err == nil && (out.Results[0].Allowed != c.allowed || out.Results[0].Windows[0].Remaining != c.remaining) {
			t.Fatalf("budget at %s: allowed %t remaining %d, want %t %d", c.value, out.Results[0].Allowed, out.Results[0].Windows[0].Remaining, c.allowed, c.remaining)
		}
		if c.allowed {
			continue
		}
		if err := eng.Apply(t.Context(), "p", &out, engine.Get("b")); err != nil || out.Results[0].Value != c.value {
			t.Fatalf("budget at %s reads %q (%v) after a refused reservation", c.value, out.Results[0].Value, err)
		}
	}
}

// TestLoneHitKeepsExpiry checks the physical expiry of a window's record
// across lone hits: the first sets it to the record's expiry, and each
// later hit in the same bucket, which leaves that expiry as it was and
// keeps the key's (KEEPTTL), leaves the key expiring at the window's reset,
// as a hit that set it again would.
func TestLoneHitKeepsExpiry(t *testing.T) {
	srv := redistest.Start(t)
	raw := srv.Client(t)
	cfg := freshConfig(nil)
	s := openStore(t, srv, cfg)
	eng := engine.New(s)
	var out engine.StepResult
	for _, kind := range []algo.Kind{algo.KindFixed, algo.KindSliding} {
		w := engine.Window{Key: "w" + strconv.Itoa(int(kind)), Kind: kind, Limit: 100, WindowMs: 3_600_000}
		for i := range 3 {
			if err := eng.Apply(t.Context(), "p", &out, engine.Hit(1, w)); err != nil {
				t.Fatal(err)
			}
			if r := out.Results[0]; !r.Allowed || r.Remaining != int64(99-i) {
				t.Fatalf("%v hit %d: %+v", kind, i, r)
			}
			reset := out.Results[0].ResetAt
			at, err := raw.Time(t.Context()).Result()
			if err != nil {
				t.Fatal(err)
			}
			pttl, err := raw.PTTL(t.Context(), cfg.Prefix+":{p}:k:"+w.Key).Result()
			if err != nil {
				t.Fatal(err)
			}
			// The key expires at the window's reset (its record's expiry),
			// give or take the milliseconds between the reads.
			if expiry := at.UnixMilli() + pttl.Milliseconds(); pttl <= 0 || expiry < reset-1000 || expiry > reset+1000 {
				t.Fatalf("%v hit %d: key expires in %v, at %d; the window resets at %d", kind, i, pttl, expiry, reset)
			}
		}
	}
}

// TestArgumentMemo runs more distinct limits than the batch code memoises
// arguments for (1024), as lone hits and as batches of two hits, then the
// first ones again: every result is the one its own limit gives, whether
// its arguments were memoised, new, or met again after the memo was
// emptied.
func TestArgumentMemo(t *testing.T) {
	srv := redistest.Start(t)
	s := openStore(t, srv, freshConfig(nil))
	eng := engine.New(s)
	var out engine.StepResult
	win := func(k string, limit int64) engine.Window {
		return engine.Window{Key: k, Kind: algo.KindFixed, Limit: limit, WindowMs: 3_600_000}
	}
	const n = 1100
	for round := range 2 {
		for i := range n {
			if round == 1 && i == 20 {
				break
			}
			id := strconv.Itoa(i)
			if err := eng.Apply(t.Context(), "p", &out, engine.Hit(1, win("one"+id, int64(1000+i)))); err != nil {
				t.Fatal(err)
			}
			if r := out.Results[0]; !r.Allowed || r.Remaining != int64(999+i-round) {
				t.Fatalf("round %d, lone hit %d: %+v", round, i, r)
			}
			if err := eng.Apply(t.Context(), "p", &out, engine.Hit(1, win("a"+id, int64(5000+i))), engine.Hit(2, win("b"+id, int64(7000+i)))); err != nil {
				t.Fatal(err)
			}
			if a, b := out.Results[0], out.Results[1]; !a.Allowed || a.Remaining != int64(4999+i-round) || !b.Allowed || b.Remaining != int64(6998+i-2*round) {
				t.Fatalf("round %d, batch %d: %+v, %+v", round, i, a, b)
			}
		}
	}
}
