package main

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/redistest"
)

func TestServeConfigRedisStore(t *testing.T) {
	for _, store := range []string{
		"redis://127.0.0.1:6400",
		"rediss://u:pw@cache.internal:6380/2?dial_timeout=2s",
		"redis+cluster://a:7000,b:7001",
		"redis+sentinel://s1:26379,s2:26379/mymaster",
	} {
		c := defaultServeConfig()
		c.Store = store
		if err := c.Validate(); err != nil {
			t.Errorf("store %s: %v", store, err)
		}
	}
	for _, tc := range []struct {
		name   string
		modify func(*serveConfig)
		want   string
	}{
		{"malformed URL", func(c *serveConfig) { c.Store = "redis://u:Secret1@h:x" }, `port "x"`},
		{"unknown scheme", func(c *serveConfig) { c.Store = "postgres://u:Secret1@h" }, "scheme"},
		{"password twice", func(c *serveConfig) {
			c.Store, c.Redis.Password = "redis://:Secret1@h", "Secret2"
		}, "given twice"},
		{"sentinel password without sentinel", func(c *serveConfig) {
			c.Store, c.Redis.SentinelPassword = "redis://h", "Secret2"
		}, "not redis+sentinel"},
		{"brace in prefix", func(c *serveConfig) { c.Store, c.Redis.Prefix = "redis://h", "a{b" }, "brace"},
		{"zero timeout", func(c *serveConfig) { c.Store, c.Redis.Timeout = "redis://h", -time.Second }, "Timeout"},
		{"wait longer than the timeout", func(c *serveConfig) {
			c.Store, c.Redis.WaitReplicas, c.Redis.WaitTimeout = "redis://h", 1, time.Second
		}, "WaitTimeout"},
		{"pipeline below -1", func(c *serveConfig) { c.Store, c.Redis.Pipeline = "redis://h", -2 }, "Pipeline"},
		// Zero is the library's "default"; given as a setting it is what
		// the operator asked for, and refused rather than replaced.
		{"empty prefix", func(c *serveConfig) { c.Store, c.Redis.Prefix = "redis://h", "" }, "--redis-prefix"},
		{"timeout of zero", func(c *serveConfig) { c.Store, c.Redis.Timeout = "redis://h", 0 }, "--redis-timeout"},
		{"pipeline of zero", func(c *serveConfig) { c.Store, c.Redis.Pipeline = "redis://h", 0 }, "--redis-pipeline"},
		{"wait of zero", func(c *serveConfig) {
			c.Store, c.Redis.WaitReplicas, c.Redis.WaitTimeout = "redis://h", 1, 0
		}, "--redis-wait-timeout"},
		{"TLS files without TLS", func(c *serveConfig) {
			c.Store, c.Redis.TLS.CAFile = "redis://:Secret1@h", "ca.pem"
		}, "does not use TLS"},
		{"missing CA file", func(c *serveConfig) {
			c.Store, c.Redis.TLS.CAFile = "rediss://:Secret1@h", "/nonexistent/ca.pem"
		}, "/nonexistent/ca.pem"},
		{"client certificate without key", func(c *serveConfig) {
			c.Store, c.Redis.TLS.CertFile = "rediss://h", "client.pem"
		}, "go together"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := defaultServeConfig()
			tc.modify(&c)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one about %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "Secret") {
				t.Errorf("the error quotes a password: %v", err)
			}
		})
	}
}

// sluice serve refuses a malformed store URL from the environment before
// it touches anything, and says so without the password.
func TestServeRefusesABadStoreURL(t *testing.T) {
	dir := t.TempDir()
	_, err := runSluice(t, map[string]string{"SLUICE_STORE": "redis+sentinel://:Secret1@s1", "SLUICE_DATA_DIR": dir + "/data"}, "serve")
	if err == nil || !strings.Contains(err.Error(), "primary's name") {
		t.Fatalf("serve: %v, want a refusal of the store URL", err)
	}
	if strings.Contains(err.Error(), "Secret1") {
		t.Errorf("the error quotes the password: %v", err)
	}
}

// An empty SLUICE_REDIS_PREFIX counts as set, as every variable does: the
// server refuses it at start rather than writing under the default prefix,
// which another deployment on the same Redis may be using.
func TestServeRefusesAnEmptyRedisPrefix(t *testing.T) {
	dir := t.TempDir()
	_, err := runSluice(t, map[string]string{"SLUICE_STORE": "redis://127.0.0.1:1", "SLUICE_REDIS_PREFIX": "", "SLUICE_DATA_DIR": dir + "/data"}, "serve")
	if err == nil || !strings.Contains(err.Error(), "--redis-prefix") {
		t.Fatalf("serve: %v, want a refusal of the empty prefix", err)
	}
}

// The password may come from --redis-password (SLUICE_REDIS_PASSWORD)
// instead of the URL; without it a server that requires one is refused at
// start, as is an address where no Redis answers.
func TestRedisStoreOpens(t *testing.T) {
	srv := redistest.Start(t, "--requirepass", "pw-from-env")
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	url := "redis://" + srv.Addr

	r := defaultRedisFlags()
	if st, _, err := r.open(url, log); err == nil {
		st.Close()
		t.Fatal("opened a Redis requiring a password without one")
	}
	r.Password = "pw-from-env"
	st, client, err := r.open(url, log)
	if err != nil {
		t.Fatal(err)
	}
	// The pool's metrics read the store's own client: it holds the
	// connection that checked the server at the start.
	reg := prometheus.NewRegistry()
	reg.MustRegister(redisPoolCollector{client})
	if conns := metricValue(t, reg, "sluice_redis_pool_connections"); conns < 1 {
		t.Errorf("sluice_redis_pool_connections = %v after the start's check, want 1 at least", conns)
	}
	if err := st.Close(); err != nil {
		t.Error(err)
	}
	if st, _, err := defaultRedisFlags().open("redis://:pw-from-env@"+srv.Addr, log); err != nil {
		t.Errorf("password in the URL: %v", err)
	} else {
		st.Close()
	}
	if _, _, err := defaultRedisFlags().open("redis://127.0.0.1:1", log); err == nil || !strings.Contains(err.Error(), "opening the Redis store") {
		t.Errorf("no Redis at the address: %v", err)
	}
}

// serveUntilListening runs sluice serve with env and the flags args until
// it logs that it is listening, then stops it as SIGINT would, and returns
// serve's error: nil when it started and stopped cleanly, the reason when
// it did not start.
func serveUntilListening(t *testing.T, env map[string]string, args ...string) error {
	t.Helper()
	_, err := serveLogUntilListening(t, env, args...)
	return err
}

// serveLogUntilListening is serveUntilListening, returning serve's log too.
func serveLogUntilListening(t *testing.T, env map[string]string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	root := newRootCmd(mapEnv(env))
	pr, pw := io.Pipe()
	root.SetOut(io.Discard)
	root.SetErr(pw)
	root.SetArgs(append([]string{"serve"}, args...))
	done := make(chan error, 1)
	go func() {
		err := root.ExecuteContext(ctx)
		pw.Close()
		done <- err
	}()
	var log strings.Builder
	sc := bufio.NewScanner(pr)
	for sc.Scan() {
		log.WriteString(sc.Text() + "\n")
		if strings.Contains(sc.Text(), "msg=listening") {
			cancel()
		}
	}
	err := <-done
	if err == nil && !strings.Contains(log.String(), "msg=listening") {
		t.Fatalf("serve ended without error and without listening:\n%s", log.String())
	}
	return log.String(), err
}

// The --redis-tls-* settings, given by their variables, reach the store:
// sluice serve starts on a Redis over mutual TLS with a private
// authority, and refuses to start without the client certificate or with
// a CA file holding no certificate.
func TestServeRedisTLSFromEnv(t *testing.T) {
	ca := redistest.NewCA(t, "sluice test CA")
	srv := redistest.StartTLS(t, ca, "redis.internal")
	cert, key := ca.Issue(t, "sluice")
	dir := t.TempDir()
	env := func(mod map[string]string) map[string]string {
		e := map[string]string{
			"SLUICE_STORE":                 "rediss://" + srv.Addr,
			"SLUICE_ADDR":                  "127.0.0.1:0",
			"SLUICE_DATA_DIR":              filepath.Join(dir, "data"),
			"SLUICE_REDIS_TIMEOUT":         "10s",
			"SLUICE_REDIS_TLS_CA":          ca.CertFile,
			"SLUICE_REDIS_TLS_CERT":        cert,
			"SLUICE_REDIS_TLS_KEY":         key,
			"SLUICE_REDIS_TLS_SERVER_NAME": "redis.internal",
		}
		for k, v := range mod {
			if v == "" {
				delete(e, k)
			} else {
				e[k] = v
			}
		}
		return e
	}
	if err := serveUntilListening(t, env(nil)); err != nil {
		t.Fatalf("serve on Redis over mutual TLS: %v", err)
	}
	err := serveUntilListening(t, env(map[string]string{"SLUICE_REDIS_TLS_CERT": "", "SLUICE_REDIS_TLS_KEY": ""}))
	if err == nil || !strings.Contains(err.Error(), "opening the Redis store") || !strings.Contains(err.Error(), "certificate required") {
		t.Errorf("serve without a client certificate: %v, want the server's refusal", err)
	}
	err = serveUntilListening(t, env(map[string]string{"SLUICE_REDIS_TLS_SERVER_NAME": ""}))
	if err == nil || !strings.Contains(err.Error(), "127.0.0.1") {
		t.Errorf("serve without the server name: %v, want the certificate refused for the address", err)
	}
	err = serveUntilListening(t, env(map[string]string{"SLUICE_REDIS_TLS_CA": key}))
	if err == nil || !strings.Contains(err.Error(), "holds no PEM certificate") {
		t.Errorf("serve with a key as the CA file: %v, want the file refused", err)
	}
}

// sluice serve refuses to start on a Redis whose maxmemory-policy may evict
// keys, saying which policy it found and how to start anyway; with
// --redis-allow-eviction, or its variable, it starts, and stops cleanly.
func TestServeRefusesEvictingRedis(t *testing.T) {
	srv := redistest.Start(t, "--maxmemory-policy", "allkeys-lru")
	dir := t.TempDir()
	env := map[string]string{
		"SLUICE_STORE":         "redis://" + srv.Addr,
		"SLUICE_ADDR":          "127.0.0.1:0",
		"SLUICE_DATA_DIR":      filepath.Join(dir, "data"),
		"SLUICE_REDIS_TIMEOUT": "10s",
	}
	err := serveUntilListening(t, env)
	if err == nil {
		t.Fatal("serve started on a Redis with maxmemory-policy allkeys-lru")
	}
	for _, want := range []string{"allkeys-lru", "--redis-allow-eviction"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("serve on allkeys-lru: %v, want the refusal to name %s", err, want)
		}
	}
	if err := serveUntilListening(t, env, "--redis-allow-eviction"); err != nil {
		t.Errorf("serve --redis-allow-eviction: %v", err)
	}
	env["SLUICE_REDIS_ALLOW_EVICTION"] = "true"
	if err := serveUntilListening(t, env); err != nil {
		t.Errorf("serve with SLUICE_REDIS_ALLOW_EVICTION=true: %v", err)
	}
}
