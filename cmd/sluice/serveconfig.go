package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/sluicehq/sluice/server"
	"github.com/sluicehq/sluice/store/diskstore"
)

// The stores sluice serve can run on.
const (
	storeDisk   = "disk"
	storeMemory = "memory"
)

// maxStateRefresh bounds --state-refresh: how late a server may apply a stop
// made through another server sharing its store.
const maxStateRefresh = time.Minute

// The log formats.
const (
	logText = "text"
	logJSON = "json"
)

// serveConfig is everything sluice serve needs to start. Its zero values for
// Secrets and OperatorToken mean "from the data directory".
type serveConfig struct {
	// Addr is the listening address, host:port. Loopback by default.
	Addr string
	// DataDir holds the credential files and the embedded store.
	DataDir string
	// Secrets, when SecretsSet, replace the data directory's secret file:
	// the current secret first, then the previous one.
	Secrets    []string
	SecretsSet bool
	// OperatorToken, when OperatorTokenSet, replaces the data directory's
	// operator-token file.
	OperatorToken    string
	OperatorTokenSet bool
	// Pepper, when PepperSet, replaces the data directory's pepper file.
	Pepper    string
	PepperSet bool
	// LimitsKey, if set, is the bearer token granting /v1/limiters and
	// /v1/policies only.
	LimitsKey string
	// Store is storeDisk, storeMemory or a Redis URL (see
	// redisstore.ParseURL), configured further by Redis.
	Store string
	Redis redisFlags
	// Fsync is the embedded store's write-ahead log policy, and
	// FsyncInterval its period under the interval policy.
	Fsync         diskstore.SyncPolicy
	FsyncInterval time.Duration
	// LogLevel and LogFormat shape the logs written to standard error.
	LogLevel  slog.Level
	LogFormat string
	// TLSCert and TLSKey are PEM files; both or neither.
	TLSCert, TLSKey string
	// ShutdownTimeout bounds how long a graceful shutdown waits for
	// in-flight requests before closing their connections.
	ShutdownTimeout time.Duration
	// StateRefresh is how often the server reads again the stored state
	// other servers sharing the store may change: the stop fence, family
	// stops and fairness resets (server.Config.FenceRefresh and
	// admission.Config.StateRefresh). Zero reads it on every RPC.
	StateRefresh time.Duration
	// HTTP bounds what a client can hold of the server.
	HTTP server.HTTPConfig
	// Admission holds the family budgets and fairness settings as given;
	// a malformed one is not checked here but answered 503 on every RPC
	// (see admissionFlags).
	Admission admissionFlags
}

// defaultServeConfig is the zero-configuration server: loopback, the
// embedded store in ./sluice-data, fsync on every commit, text logs.
func defaultServeConfig() serveConfig {
	return serveConfig{
		Addr:            "127.0.0.1:7420",
		DataDir:         "sluice-data",
		Store:           storeDisk,
		Fsync:           diskstore.SyncAlways,
		FsyncInterval:   diskstore.DefaultConfig().SyncInterval,
		LogLevel:        slog.LevelInfo,
		LogFormat:       logText,
		ShutdownTimeout: 30 * time.Second,
		StateRefresh:    time.Second,
		HTTP:            server.DefaultHTTPConfig(),
		Admission:       defaultAdmissionFlags(),
		Redis:           defaultRedisFlags(),
	}
}

// Validate reports every problem that keeps c from starting at all. The
// credentials and the admission settings are not checked here: a server
// with bad ones starts and refuses every RPC with the reason (see
// server.Config.Validate).
func (c serveConfig) Validate() error {
	var errs []error
	if _, _, err := net.SplitHostPort(c.Addr); err != nil {
		errs = append(errs, fmt.Errorf("address %q: %w", c.Addr, err))
	}
	if c.DataDir == "" {
		errs = append(errs, errors.New("data directory is empty"))
	}
	switch {
	case c.Store == storeDisk, c.Store == storeMemory:
	case isRedisStore(c.Store):
		if _, _, err := c.Redis.options(c.Store); err != nil {
			errs = append(errs, err)
		}
	default:
		errs = append(errs, fmt.Errorf("store %q (want %s, %s or a Redis URL such as redis://host:6379)", c.Store, storeDisk, storeMemory))
	}
	switch c.Fsync {
	case diskstore.SyncAlways, diskstore.SyncOnInterval, diskstore.SyncNever:
	default:
		errs = append(errs, fmt.Errorf("fsync policy %q (want always, interval or never)", c.Fsync))
	}
	if c.FsyncInterval <= 0 {
		errs = append(errs, fmt.Errorf("fsync interval %s must be positive", c.FsyncInterval))
	}
	switch c.LogFormat {
	case logText, logJSON:
	default:
		errs = append(errs, fmt.Errorf("log format %q (want text or json)", c.LogFormat))
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		errs = append(errs, errors.New("--tls-cert and --tls-key go together"))
	}
	if c.ShutdownTimeout <= 0 {
		errs = append(errs, fmt.Errorf("shutdown timeout %s must be positive", c.ShutdownTimeout))
	}
	if c.StateRefresh < 0 || c.StateRefresh > maxStateRefresh {
		errs = append(errs, fmt.Errorf("state refresh %s outside 0…%s: a stop made through another server takes that long to apply here", c.StateRefresh, maxStateRefresh))
	}
	if err := c.HTTP.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// splitSecrets splits a comma list of secrets, trimming blanks around each.
// An empty list yields no secrets; an empty entry stays, for the server to
// refuse as too short.
func splitSecrets(list string) []string {
	if strings.TrimSpace(list) == "" {
		return nil
	}
	parts := strings.Split(list, ",")
	for i, p := range parts {
		parts[i] = strings.TrimSpace(p)
	}
	return parts
}

// isLoopback reports whether the host of addr is a loopback address or
// "localhost". An empty host listens on every interface.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
