package redisstore

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/engine"
)

// The deployment forms a store URL names.
const (
	defaultPort         = "6379"
	defaultSentinelPort = "26379"
)

// ParseURL parses a store URL into options for redis.NewUniversalClient,
// which returns the client of the form the URL names:
//
//	redis://[user[:password]@]host[:port][/db][?options]           one server
//	rediss://…                                                     the same over TLS
//	redis+cluster://[user[:password]@]host:port[,host:port…][?options]
//	                                                               Redis Cluster, by seed nodes
//	redis+sentinel://[user[:password]@]host:port[,host:port…]/master[/db][?options]
//	                                                               a primary watched by Sentinel
//	rediss+cluster://…, rediss+sentinel://…                        the same over TLS
//
// The port defaults to 6379 (26379 for the sentinels); an IPv6 address is
// written in brackets. The user and password, percent-encoded, are those
// of the Redis servers (for Sentinel, of the primary and its replicas; the
// sentinels' own credentials are SentinelUsername and SentinelPassword of
// the options). A Redis Cluster has only database 0, so its URL has no
// path. TLS verifies each server's certificate against the system roots,
// for the name or address the client dials; a private authority, a client
// certificate and a pinned server name are files, applied to the options
// by TLSFiles.Apply.
//
// Options, all optional: dial_timeout, read_timeout, write_timeout,
// pool_timeout and conn_max_idle_time (durations such as 500ms or 3s),
// pool_size, min_idle_conns and max_idle_conns (counts), protocol (2 or
// 3) and client_name. Any other is an error, as is any part of the URL that
// does not fit its form.
//
// The options honour context deadlines and never retry a command
// (ContextTimeoutEnabled, MaxRetries -1), as New requires. Errors wrap
// engine.ErrInvalid and never quote the password.
func ParseURL(rawURL string) (*redis.UniversalOptions, error) {
	o, err := parseURL(rawURL)
	if err != nil {
		return nil, fmt.Errorf("%w: redis store URL %s: %w", engine.ErrInvalid, RedactURL(rawURL), err)
	}
	return o, nil
}

// form is a deployment form a URL scheme names.
type form int

const (
	single form = iota
	cluster
	sentinel
)

var schemes = map[string]struct {
	form form
	tls  bool
}{
	"redis":           {single, false},
	"rediss":          {single, true},
	"redis+cluster":   {cluster, false},
	"rediss+cluster":  {cluster, true},
	"redis+sentinel":  {sentinel, false},
	"rediss+sentinel": {sentinel, true},
}

func parseURL(rawURL string) (*redis.UniversalOptions, error) {
	scheme, rest, ok := strings.Cut(rawURL, "://")
	if !ok {
		return nil, errors.New("not a URL: want redis://, rediss://, redis+cluster:// or redis+sentinel://")
	}
	kind, ok := schemes[strings.ToLower(scheme)]
	if !ok {
		return nil, fmt.Errorf("scheme %q (want redis, rediss, redis+cluster, rediss+cluster, redis+sentinel or rediss+sentinel)", scheme)
	}
	o := &redis.UniversalOptions{ContextTimeoutEnabled: true, MaxRetries: -1}
	// The credentials end at the last '@', so that a password holding '/',
	// '?' or '#' unencoded is still read as a password, never as a host or
	// a path that an error message would quote.
	if at := strings.LastIndexByte(rest, '@'); at >= 0 {
		user, pass, hasPass := strings.Cut(rest[:at], ":")
		var err error
		if o.Username, err = url.PathUnescape(user); err != nil {
			return nil, errors.New("user name: malformed percent-encoding")
		}
		if hasPass {
			if o.Password, err = url.PathUnescape(pass); err != nil {
				return nil, errors.New("password: malformed percent-encoding")
			}
		}
		rest = rest[at+1:]
	}
	if strings.Contains(rest, "#") {
		return nil, errors.New("a fragment (#…) has no meaning here")
	}
	rest, rawQuery, _ := strings.Cut(rest, "?")
	authority, path, _ := strings.Cut(rest, "/")

	port := defaultPort
	if kind.form == sentinel {
		port = defaultSentinelPort
	}
	for h := range strings.SplitSeq(authority, ",") {
		addr, err := hostPort(h, port)
		if err != nil {
			return nil, err
		}
		o.Addrs = append(o.Addrs, addr)
	}
	if kind.form == single && len(o.Addrs) > 1 {
		return nil, fmt.Errorf("%d hosts: this form names one server (a cluster is redis+cluster://, Sentinel redis+sentinel://)", len(o.Addrs))
	}

	segs := strings.FieldsFunc(path, func(r rune) bool { return r == '/' })
	switch kind.form {
	case single:
		if len(segs) > 1 {
			return nil, fmt.Errorf("path /%s: want at most a database number", path)
		}
		if len(segs) == 1 {
			db, err := database(segs[0])
			if err != nil {
				return nil, err
			}
			o.DB = db
		}
	case cluster:
		if len(segs) > 0 {
			return nil, fmt.Errorf("path /%s: a Redis Cluster has only database 0, so its URL has no path", path)
		}
		o.IsClusterMode = true
	case sentinel:
		if len(segs) == 0 || len(segs) > 2 {
			return nil, errors.New("want the primary's name as the path (/mymaster), optionally followed by a database number (/mymaster/0)")
		}
		name, err := url.PathUnescape(segs[0])
		if err != nil || name == "" {
			return nil, fmt.Errorf("primary name %q: malformed", segs[0])
		}
		o.MasterName = name
		if len(segs) == 2 {
			if o.DB, err = database(segs[1]); err != nil {
				return nil, err
			}
		}
	}

	if kind.tls {
		// ServerName is left empty: each connection verifies the name or
		// address it dials, as a cluster's nodes and a failover's
		// primaries each have their own.
		o.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	if err := parseOptions(o, rawQuery); err != nil {
		return nil, err
	}
	return o, nil
}

// hostPort returns host:port of one host of the authority, with the
// default port when it has none.
func hostPort(h, defPort string) (string, error) {
	if h == "" {
		return "", errors.New("a host is missing")
	}
	host, port := h, defPort
	switch {
	case strings.HasPrefix(h, "[") && strings.HasSuffix(h, "]"):
		host = h[1 : len(h)-1]
	case strings.Contains(h, ":"):
		var err error
		if host, port, err = net.SplitHostPort(h); err != nil {
			return "", fmt.Errorf("host %q: want host:port (an IPv6 address in brackets: [::1]:6379)", h)
		}
	}
	if host == "" || strings.ContainsAny(host, "[]") {
		return "", fmt.Errorf("host %q: malformed", h)
	}
	if n, err := strconv.Atoi(port); err != nil || !digits(port) || n < 1 || n > 65535 {
		return "", fmt.Errorf("host %q: port %q is not a number from 1 to 65535", h, port)
	}
	return net.JoinHostPort(host, port), nil
}

func database(s string) (int, error) {
	db, err := strconv.Atoi(s)
	if err != nil || !digits(s) {
		return 0, fmt.Errorf("database %q is not a number of at least 0", s)
	}
	return db, nil
}

// digits reports whether s is decimal digits alone: strconv.Atoi also
// takes a sign, which has no place in a port or a database number.
func digits(s string) bool {
	return s != "" && strings.Trim(s, "0123456789") == ""
}

// urlOptions are the query options a store URL may carry, and where each
// goes.
var urlOptions = map[string]func(o *redis.UniversalOptions, v string) error{
	"dial_timeout":       durationOption(func(o *redis.UniversalOptions) *time.Duration { return &o.DialTimeout }),
	"read_timeout":       durationOption(func(o *redis.UniversalOptions) *time.Duration { return &o.ReadTimeout }),
	"write_timeout":      durationOption(func(o *redis.UniversalOptions) *time.Duration { return &o.WriteTimeout }),
	"pool_timeout":       durationOption(func(o *redis.UniversalOptions) *time.Duration { return &o.PoolTimeout }),
	"conn_max_idle_time": durationOption(func(o *redis.UniversalOptions) *time.Duration { return &o.ConnMaxIdleTime }),
	"pool_size":          countOption(func(o *redis.UniversalOptions) *int { return &o.PoolSize }),
	"min_idle_conns":     countOption(func(o *redis.UniversalOptions) *int { return &o.MinIdleConns }),
	"max_idle_conns":     countOption(func(o *redis.UniversalOptions) *int { return &o.MaxIdleConns }),
	"protocol": func(o *redis.UniversalOptions, v string) error {
		if v != "2" && v != "3" {
			return fmt.Errorf("%q (want 2 or 3)", v)
		}
		o.Protocol = int(v[0] - '0')
		return nil
	},
	"client_name": func(o *redis.UniversalOptions, v string) error {
		// Redis refuses (CLIENT SETNAME) any byte outside '!' … '~'.
		if v == "" || strings.ContainsFunc(v, func(r rune) bool { return r < '!' || r > '~' }) {
			return fmt.Errorf("%q (want a name of printable ASCII without spaces)", v)
		}
		o.ClientName = v
		return nil
	},
}

func durationOption(field func(*redis.UniversalOptions) *time.Duration) func(*redis.UniversalOptions, string) error {
	return func(o *redis.UniversalOptions, v string) error {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return fmt.Errorf("%q (want a positive duration such as 500ms or 3s)", v)
		}
		*field(o) = d
		return nil
	}
}

func countOption(field func(*redis.UniversalOptions) *int) func(*redis.UniversalOptions, string) error {
	return func(o *redis.UniversalOptions, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return fmt.Errorf("%q (want a whole number of at least 1)", v)
		}
		*field(o) = n
		return nil
	}
}

func parseOptions(o *redis.UniversalOptions, rawQuery string) error {
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return fmt.Errorf("options: %w", err)
	}
	names := make([]string, 0, len(q))
	for name := range q {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		set, ok := urlOptions[name]
		if !ok {
			known := make([]string, 0, len(urlOptions))
			for k := range urlOptions {
				known = append(known, k)
			}
			slices.Sort(known)
			return fmt.Errorf("unknown option %q (known: %s)", name, strings.Join(known, ", "))
		}
		if vs := q[name]; len(vs) > 1 {
			return fmt.Errorf("option %s given %d times", name, len(vs))
		}
		if err := set(o, q.Get(name)); err != nil {
			return fmt.Errorf("option %s: %w", name, err)
		}
	}
	return nil
}

// RedactURL returns rawURL with its password, if any, replaced by
// "xxxxx", for logs and messages. Like ParseURL it takes the credentials
// to end at the last '@', and it needs no well-formed URL.
func RedactURL(rawURL string) string {
	scheme, rest, ok := strings.Cut(rawURL, "://")
	if !ok {
		return rawURL
	}
	at := strings.LastIndexByte(rest, '@')
	if at < 0 {
		return rawURL
	}
	user, _, hasPass := strings.Cut(rest[:at], ":")
	if !hasPass {
		return rawURL
	}
	return scheme + "://" + user + ":xxxxx" + rest[at:]
}
