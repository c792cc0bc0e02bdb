package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/pflag"

	"github.com/sluicehq/sluice/store/redisstore"
)

// redisFlags are the settings of the Redis store beyond its URL (--store).
// The passwords may come from here rather than the URL, so that they need
// not sit in a process listing; the TLS files come only from here.
type redisFlags struct {
	TLS              redisstore.TLSFiles
	Password         string
	SentinelPassword string
	Prefix           string
	Timeout          time.Duration
	AllowEviction    bool
	WaitReplicas     int
	WaitTimeout      time.Duration
	Pipeline         int
}

func defaultRedisFlags() redisFlags {
	d := redisstore.DefaultConfig()
	return redisFlags{Prefix: d.Prefix, Timeout: d.Timeout, WaitTimeout: redisstore.DefaultWaitTimeout, Pipeline: d.Pipeline}
}

// addFlags declares the Redis flags and their variables on fs.
func (r *redisFlags) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&r.Password, "redis-password", "", "password of the Redis servers, when the --store URL has none (prefer the variable)")
	fs.StringVar(&r.SentinelPassword, "redis-sentinel-password", "", "password of the sentinels of a redis+sentinel:// store (prefer the variable)")
	fs.StringVar(&r.Prefix, "redis-prefix", r.Prefix, "prefix of every key the Redis store writes")
	fs.DurationVar(&r.Timeout, "redis-timeout", r.Timeout, "bound on every Redis store call; past it the call fails and nothing is admitted")
	fs.BoolVar(&r.AllowEviction, "redis-allow-eviction", false, "start on a Redis whose maxmemory-policy is not noeviction (an evicted window admits beyond its limit)")
	fs.IntVar(&r.WaitReplicas, "redis-wait-replicas", 0, "replicas that must acknowledge every batch (Redis WAIT) before it is answered; unacknowledged batches fail, so a failover loses no answered admission")
	fs.DurationVar(&r.WaitTimeout, "redis-wait-timeout", r.WaitTimeout, "how long a batch waits for --redis-wait-replicas; shorter than --redis-timeout")
	fs.IntVar(&r.Pipeline, "redis-pipeline", r.Pipeline, "Redis round trips in flight before concurrent batches queue and go out together as one pipeline; -1 sends every batch alone")
	fs.StringVar(&r.TLS.CAFile, "redis-tls-ca", "", "PEM bundle of the authorities of a rediss:// store's certificates, instead of the system roots")
	fs.StringVar(&r.TLS.CertFile, "redis-tls-cert", "", "PEM client certificate presented to a rediss:// store (mutual TLS), with --redis-tls-key")
	fs.StringVar(&r.TLS.KeyFile, "redis-tls-key", "", "PEM private key of --redis-tls-cert")
	fs.StringVar(&r.TLS.ServerName, "redis-tls-server-name", "", "name every Redis server's certificate must carry, instead of the host or address dialled")
	for name, env := range map[string]string{
		"redis-wait-replicas":     "SLUICE_REDIS_WAIT_REPLICAS",
		"redis-wait-timeout":      "SLUICE_REDIS_WAIT_TIMEOUT",
		"redis-pipeline":          "SLUICE_REDIS_PIPELINE",
		"redis-password":          "SLUICE_REDIS_PASSWORD",
		"redis-sentinel-password": "SLUICE_REDIS_SENTINEL_PASSWORD",
		"redis-prefix":            "SLUICE_REDIS_PREFIX",
		"redis-timeout":           "SLUICE_REDIS_TIMEOUT",
		"redis-allow-eviction":    "SLUICE_REDIS_ALLOW_EVICTION",
		"redis-tls-ca":            "SLUICE_REDIS_TLS_CA",
		"redis-tls-cert":          "SLUICE_REDIS_TLS_CERT",
		"redis-tls-key":           "SLUICE_REDIS_TLS_KEY",
		"redis-tls-server-name":   "SLUICE_REDIS_TLS_SERVER_NAME",
	} {
		bindEnv(fs, name, env)
	}
}

// redisStartTimeout bounds the first contact with Redis at start: a
// connection, perhaps TLS, perhaps found through the sentinels.
const redisStartTimeout = 10 * time.Second

// isRedisStore reports whether the --store value is a URL, which only the
// Redis store takes.
func isRedisStore(store string) bool { return strings.Contains(store, "://") }

// options returns the client options of the store URL with the passwords
// and TLS files of r (read here, so that a missing or malformed file stops
// the start), and the store configuration.
func (r redisFlags) options(storeURL string) (*redis.UniversalOptions, redisstore.Config, error) {
	var errs []error
	opts, err := redisstore.ParseURL(storeURL)
	if err != nil {
		errs = append(errs, err)
	} else {
		if r.Password != "" {
			if opts.Password != "" {
				errs = append(errs, errors.New("the Redis password is given twice: in the --store URL and by --redis-password ($SLUICE_REDIS_PASSWORD)"))
			}
			opts.Password = r.Password
		}
		if r.SentinelPassword != "" {
			if opts.MasterName == "" {
				errs = append(errs, errors.New("--redis-sentinel-password ($SLUICE_REDIS_SENTINEL_PASSWORD) is set, but the --store URL is not redis+sentinel://"))
			}
			opts.SentinelPassword = r.SentinelPassword
		}
		if err := r.TLS.Apply(opts); err != nil {
			errs = append(errs, fmt.Errorf("%w (--redis-tls-*, $SLUICE_REDIS_TLS_*)", err))
		}
	}
	// redisstore.Config reads a zero Prefix, Timeout, Pipeline or
	// WaitTimeout as "the default"; given here, each is what the operator
	// set, so it is refused rather than replaced.
	if r.Prefix == "" {
		errs = append(errs, errors.New("--redis-prefix ($SLUICE_REDIS_PREFIX) is empty"))
	}
	if r.Timeout == 0 {
		errs = append(errs, fmt.Errorf("--redis-timeout ($SLUICE_REDIS_TIMEOUT) is 0 (want a positive duration up to %s)", redisstore.MaxTimeout))
	}
	if r.Pipeline == 0 {
		errs = append(errs, fmt.Errorf("--redis-pipeline ($SLUICE_REDIS_PIPELINE) is 0 (want 1…%d, or -1 to send every batch alone)", redisstore.MaxPipeline))
	}
	if r.WaitTimeout == 0 {
		errs = append(errs, errors.New("--redis-wait-timeout ($SLUICE_REDIS_WAIT_TIMEOUT) is 0 (want a positive duration shorter than --redis-timeout)"))
	}
	cfg := redisstore.Config{Prefix: r.Prefix, Timeout: r.Timeout, AllowEviction: r.AllowEviction,
		WaitReplicas: r.WaitReplicas, WaitTimeout: r.WaitTimeout, Pipeline: r.Pipeline}
	if err := cfg.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("the Redis store settings (--redis-*): %w", err))
	}
	return opts, cfg, errors.Join(errs...)
}

// open connects to the Redis store of storeURL. The client returned is
// the store's, for its connection pool's metrics.
func (r redisFlags) open(storeURL string, log *slog.Logger) (*redisstore.Store, redis.UniversalClient, error) {
	opts, cfg, err := r.options(storeURL)
	if err != nil {
		return nil, nil, err
	}
	client := redis.NewUniversalClient(opts)
	// A Redis that cannot be reached fails the start, rather than every
	// RPC after it (New reaches it only to check the eviction policy).
	ctx, cancel := context.WithTimeout(context.Background(), redisStartTimeout)
	err = client.Ping(ctx).Err()
	cancel()
	var st *redisstore.Store
	if err == nil {
		st, err = redisstore.New(client, cfg)
	}
	if err != nil {
		_ = client.Close()
		var evicts *redisstore.EvictionError
		if errors.As(err, &evicts) {
			return nil, nil, fmt.Errorf("opening the Redis store %s: its maxmemory-policy is %q, which may evict keys, and an evicted window admits beyond its limit: "+
				"set maxmemory-policy noeviction, or start with --redis-allow-eviction ($SLUICE_REDIS_ALLOW_EVICTION) to accept that", redisstore.RedactURL(storeURL), evicts.Policy)
		}
		return nil, nil, fmt.Errorf("opening the Redis store %s: %w", redisstore.RedactURL(storeURL), err)
	}
	if cfg.AllowEviction {
		log.Warn("the Redis store does not check maxmemory-policy: a Redis that evicts keys can admit beyond a limit")
	}
	return st, client, nil
}
