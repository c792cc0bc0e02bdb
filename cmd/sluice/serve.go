package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/server"
	"github.com/sluicehq/sluice/store/diskstore"
	"github.com/sluicehq/sluice/store/memstore"
	"github.com/sluicehq/sluice/store/redisstore"
)

func newServeCmd() *cobra.Command {
	cfg := defaultServeConfig()
	var secrets, fsync, logLevel string
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the Sluice server",
		Long: `Run the Sluice server: the signed RPC, the operator endpoints and health
checks, on the embedded durable store.

With no configuration it listens on 127.0.0.1:7420 and keeps everything in
./sluice-data. On its first start it creates that directory (mode 0700) with a
signing secret, a key pepper and an operator token (files "secret", "pepper"
and "operator-token", mode 0600), so it is authenticated from its first
second; later starts reuse them. --secrets, --operator-token and --pepper
replace the files.

With --store redis://host:6379 (or rediss://, redis+cluster://host1:port,
host2:port, redis+sentinel://host:26379/mastername, and rediss+cluster://
and rediss+sentinel:// over TLS) the quotas, replay records, the stop
fence and the admission state live in Redis, and any number of servers
given the same URL, --secrets and --operator-token share them. Prefer $SLUICE_REDIS_PASSWORD to a password in the URL. A rediss://
store of a private authority, or requiring client certificates, takes
--redis-tls-ca, --redis-tls-cert and --redis-tls-key.

Every RPC names an admission family and spends its daily budget
(--daily-budget, split by --family-budgets or equally among --families).
RPCs of --fair-families also spend per-source, per-prefix and per-principal
quotas, each a share of the family budget (--shares, --family-shares).

GET /metrics serves Prometheus metrics (the server's, the store's, the
process's), behind the operator token.

A configuration the server can run but must not trust (a secret under 32
characters, an operator token equal to a secret, no secret at all, a
malformed admission setting) does not stop it: every RPC is then answered
503 guard_unavailable with the reason. SIGINT or SIGTERM drains in-flight
requests, then closes the store.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fl := cmd.Flags()
			if fl.Changed("secrets") {
				cfg.Secrets, cfg.SecretsSet = splitSecrets(secrets), true
			}
			cfg.OperatorTokenSet = fl.Changed("operator-token")
			cfg.PepperSet = fl.Changed("pepper")
			cfg.Fsync = diskstore.SyncPolicy(fsync)
			if err := cfg.LogLevel.UnmarshalText([]byte(logLevel)); err != nil {
				return fmt.Errorf("log level %q (want debug, info, warn or error)", logLevel)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			// After the first signal, a second one ends the process at
			// once instead of waiting for the drain.
			context.AfterFunc(ctx, stop)
			return runServe(ctx, cfg, cmd.ErrOrStderr())
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&cfg.Addr, "addr", cfg.Addr, "listening address; a non-loopback address exposes the server (use TLS)")
	fl.StringVar(&cfg.DataDir, "data-dir", cfg.DataDir, "directory of the credential files and the embedded store")
	fl.StringVar(&secrets, "secrets", "", "signing secrets, comma-separated, current first (default: the data directory's secret file)")
	fl.StringVar(&cfg.OperatorToken, "operator-token", "", "bearer token of the operator endpoints (default: the data directory's operator-token file)")
	fl.StringVar(&cfg.Pepper, "pepper", "", "the clients' key-hashing pepper, which /v1/limiters and /v1/policies need (default: the data directory's pepper file)")
	fl.StringVar(&cfg.LimitsKey, "limits-key", "", "bearer token granting /v1/limiters and /v1/policies only (default: none; the operator token grants them too)")
	fl.StringVar(&cfg.Store, "store", cfg.Store, "store: disk (embedded, durable), memory (lost on exit), or a Redis URL: redis://, rediss://, redis+cluster://, rediss+cluster://, redis+sentinel://, rediss+sentinel:// (see docs/operations.md)")
	fl.StringVar(&fsync, "fsync", string(cfg.Fsync), "write-ahead log fsync policy of the disk store: always (answers wait for an fsync), interval (answers wait for the write; fsync every --fsync-interval) or never")
	fl.DurationVar(&cfg.FsyncInterval, "fsync-interval", cfg.FsyncInterval, "fsync period under --fsync interval")
	fl.StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fl.StringVar(&cfg.LogFormat, "log-format", cfg.LogFormat, "log format: text or json")
	fl.StringVar(&cfg.TLSCert, "tls-cert", "", "PEM certificate chain; serves HTTPS with --tls-key")
	fl.StringVar(&cfg.TLSKey, "tls-key", "", "PEM private key of --tls-cert")
	fl.DurationVar(&cfg.ShutdownTimeout, "shutdown-timeout", cfg.ShutdownTimeout, "how long a graceful shutdown waits for in-flight requests")
	fl.DurationVar(&cfg.StateRefresh, "state-refresh", cfg.StateRefresh, "how often to read again the stop fence, family stops and fairness resets other servers on the store may change (0: on every RPC)")
	cfg.Admission.addFlags(fl)
	cfg.Redis.addFlags(fl)
	for name, env := range map[string]string{
		"addr":             "SLUICE_ADDR",
		"data-dir":         "SLUICE_DATA_DIR",
		"secrets":          "SLUICE_SECRETS",
		"operator-token":   "SLUICE_OPERATOR_TOKEN",
		"pepper":           "SLUICE_PEPPER",
		"limits-key":       "SLUICE_LIMITS_KEY",
		"store":            "SLUICE_STORE",
		"fsync":            "SLUICE_FSYNC",
		"fsync-interval":   "SLUICE_FSYNC_INTERVAL",
		"log-level":        "SLUICE_LOG_LEVEL",
		"log-format":       "SLUICE_LOG_FORMAT",
		"tls-cert":         "SLUICE_TLS_CERT",
		"tls-key":          "SLUICE_TLS_KEY",
		"shutdown-timeout": "SLUICE_SHUTDOWN_TIMEOUT",
		"state-refresh":    "SLUICE_STATE_REFRESH",
	} {
		bindEnv(fl, name, env)
	}
	return cmd
}

// runServe runs the server of cfg until ctx is done, then drains in-flight
// requests and closes the store. It logs to stderr.
func runServe(ctx context.Context, cfg serveConfig, stderr io.Writer) (err error) {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("invalid serve configuration: %s", strings.ReplaceAll(err.Error(), "\n", "; "))
	}
	log := newLogger(stderr, cfg.LogLevel, cfg.LogFormat)

	var tlsConfig *tls.Config
	if cfg.TLSCert != "" {
		cert, err := tls.LoadX509KeyPair(cfg.TLSCert, cfg.TLSKey)
		if err != nil {
			return fmt.Errorf("loading the TLS key pair: %w", err)
		}
		tlsConfig = &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
	}
	creds, err := resolveCredentials(cfg, log)
	if err != nil {
		return err
	}

	st, storeMetrics, err := openStore(cfg, log)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := st.Close(); cerr != nil {
			log.Error("closing the store", "err", cerr)
			err = errors.Join(err, fmt.Errorf("closing the store: %w", cerr))
		}
	}()

	eng := engine.New(st)
	reg := newRegistry(storeMetrics)
	admCfg := cfg.Admission.config()
	admCfg.Logger = log.With("component", "admission")
	admCfg.StateRefresh = cfg.StateRefresh
	logAdmission(log, admCfg)
	srvCfg := server.Config{
		Secrets:       creds.Secrets,
		OperatorToken: creds.OperatorToken,
		Pepper:        creds.Pepper,
		LimitsKey:     cfg.LimitsKey,
		FenceRefresh:  cfg.StateRefresh,
		Version:       version(),
		Logger:        log,
		Admission:     admission.New(eng, admCfg),
		Registerer:    reg,
		Gatherer:      reg,
	}
	for _, p := range creds.Problems {
		srvCfg.AddProblem(p)
	}
	srv := server.New(eng, srvCfg)
	tracker := newRequestTracker()
	httpCfg := cfg.HTTP
	httpCfg.Logger = log.With("component", "http")
	hs, err := server.NewHTTPServer(tracker.wrap(srv), httpCfg)
	if err != nil {
		return err
	}
	hs.TLSConfig = tlsConfig

	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return err
	}
	log.Info("listening", "addr", ln.Addr().String(), "tls", tlsConfig != nil,
		"store", redisstore.RedactURL(cfg.Store), "fsync", cfg.Fsync, "data_dir", absPath(cfg.DataDir))
	if tlsConfig == nil && !isLoopback(cfg.Addr) {
		log.Warn("serving plain HTTP beyond loopback: signed requests cannot be replayed, but they can be read; use --tls-cert and --tls-key", "addr", cfg.Addr)
	}

	served := make(chan error, 1)
	go func() {
		if tlsConfig != nil {
			served <- hs.ServeTLS(ln, "", "")
		} else {
			served <- hs.Serve(ln)
		}
	}()
	select {
	case err := <-served:
		return fmt.Errorf("serving: %w", err)
	case <-ctx.Done():
	}

	log.Info("shutting down: draining in-flight requests", "timeout", cfg.ShutdownTimeout)
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		log.Warn("requests outlived the shutdown timeout; closing their connections", "err", err)
		_ = hs.Close()
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		log.Error("serving", "err", err)
	}
	// Connections are closed; wait for any handler still running before
	// the store goes away under it.
	tracker.wait()
	log.Info("stopped")
	return nil
}

// resolveCredentials returns the credentials of cfg: those given by flag or
// environment, and the rest from the data directory, created there on the
// first start.
func resolveCredentials(cfg serveConfig, log *slog.Logger) (credentials, error) {
	var c credentials
	if err := ensureDataDir(cfg.DataDir, log); err != nil {
		return c, err
	}
	var created []string
	load := func(name string) ([]string, error) {
		values, isNew, err := loadOrCreate(cfg.DataDir, name, log)
		if isNew {
			created = append(created, name)
		}
		return values, err
	}
	if cfg.SecretsSet {
		c.Secrets = cfg.Secrets
	} else {
		v, err := load(secretFile)
		if err != nil {
			return c, err
		}
		c.Secrets = v
	}
	// The pepper and the operator token are one value each: an empty file
	// or one of several lines is reported, never a server without a
	// pepper, with a pepper other than the one the clients read, or with
	// a token picked from several.
	one := func(name string, values []string) string {
		path := filepath.Join(cfg.DataDir, name)
		switch len(values) {
		case 0:
			c.Problems = append(c.Problems, fmt.Errorf("%s is empty", path))
			return ""
		case 1:
			return values[0]
		}
		c.Problems = append(c.Problems, fmt.Errorf("%s holds %d lines (want one value)", path, len(values)))
		return ""
	}
	if cfg.PepperSet {
		c.Pepper = cfg.Pepper
	} else {
		peppers, err := load(pepperFile)
		if err != nil {
			return c, err
		}
		c.Pepper = one(pepperFile, peppers)
	}
	if cfg.OperatorTokenSet {
		c.OperatorToken = cfg.OperatorToken
	} else {
		v, err := load(operatorTokenFile)
		if err != nil {
			return c, err
		}
		c.OperatorToken = one(operatorTokenFile, v)
	}
	dir := absPath(cfg.DataDir)
	if len(created) > 0 {
		log.Info("created credentials; clients and operators read them from these files",
			"dir", dir, "files", strings.Join(created, ", "))
	}
	log.Info("credentials", "secrets", source(cfg.SecretsSet, filepath.Join(dir, secretFile)),
		"operator_token", source(cfg.OperatorTokenSet, filepath.Join(dir, operatorTokenFile)),
		"pepper", source(cfg.PepperSet, filepath.Join(dir, pepperFile)))
	return c, nil
}

func source(fromFlag bool, file string) string {
	if fromFlag {
		return "flag or environment"
	}
	return file
}

// openStore opens the store cfg names, and returns with it the collector
// of its metrics.
func openStore(cfg serveConfig, log *slog.Logger) (engine.Store, prometheus.Collector, error) {
	switch {
	case isRedisStore(cfg.Store):
		st, client, err := cfg.Redis.open(cfg.Store, log)
		if err != nil {
			return nil, nil, err
		}
		return st, redisPoolCollector{client}, nil
	case cfg.Store == storeMemory:
		log.Warn("memory store: every quota and record is lost when the process exits")
		st, err := memstore.New(memstore.DefaultConfig())
		if err != nil {
			return nil, nil, err
		}
		return st, memstoreCollector{st}, nil
	default:
		dc := diskstore.DefaultConfig()
		dc.Dir = filepath.Join(cfg.DataDir, storeDir)
		dc.Sync, dc.SyncInterval = cfg.Fsync, cfg.FsyncInterval
		dc.Logger = log.With("component", "diskstore")
		st, err := diskstore.Open(dc)
		if errors.Is(err, syscall.EAGAIN) {
			// Pebble holds a lock on the store while it is open: the lock
			// is taken, by another process.
			return nil, nil, fmt.Errorf("the disk store in %s is in use by another process, such as a sluice serve already running on %s: only one server may use a data directory at a time (%w)",
				dc.Dir, absPath(cfg.DataDir), err)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("opening the disk store in %s: %w", dc.Dir, err)
		}
		return st, diskstoreCollector{st}, nil
	}
}

// newLogger returns the logger of sluice serve: text or JSON on w.
func newLogger(w io.Writer, level slog.Level, format string) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	if format == logJSON {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

func absPath(p string) string {
	if abs, err := filepath.Abs(p); err == nil {
		return abs
	}
	return p
}

// requestTracker counts the requests being handled, so the store is closed
// only after the last handler using it has returned. A request costs two
// atomic adds; only a request ending while wait waits takes mu.
type requestTracker struct {
	n       atomic.Int64
	waiting atomic.Bool
	mu      sync.Mutex
	idle    *sync.Cond // signalled when n drops to zero while waiting
}

func newRequestTracker() *requestTracker {
	t := &requestTracker{}
	t.idle = sync.NewCond(&t.mu)
	return t
}

// wrap returns h counting its requests.
func (t *requestTracker) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.n.Add(1)
		defer t.done()
		h.ServeHTTP(w, r)
	})
}

// done ends one request. A request ending at zero while wait waits wakes
// it: wait sets waiting before it reads n, so either it reads the zero or
// this reads waiting.
func (t *requestTracker) done() {
	if t.n.Add(-1) == 0 && t.waiting.Load() {
		t.mu.Lock()
		t.idle.Broadcast()
		t.mu.Unlock()
	}
}

// wait returns once no request is being handled.
func (t *requestTracker) wait() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.waiting.Store(true)
	for t.n.Load() > 0 {
		t.idle.Wait()
	}
}
