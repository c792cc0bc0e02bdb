package redisstore_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/store/redisstore"
)

func TestParseURL(t *testing.T) {
	base := func(addrs ...string) redis.UniversalOptions {
		return redis.UniversalOptions{Addrs: addrs, ContextTimeoutEnabled: true, MaxRetries: -1}
	}
	for _, tc := range []struct {
		url    string
		want   func(o *redis.UniversalOptions)
		addrs  []string
		tls    bool
		client string // the client NewUniversalClient returns
	}{
		{url: "redis://localhost", addrs: []string{"localhost:6379"}, client: "single"},
		{url: "redis://10.0.0.5:6380/", addrs: []string{"10.0.0.5:6380"}, client: "single"},
		{url: "redis://[::1]:7000/3", addrs: []string{"[::1]:7000"}, client: "single",
			want: func(o *redis.UniversalOptions) { o.DB = 3 }},
		{url: "redis://[fe80::1]", addrs: []string{"[fe80::1]:6379"}, client: "single"},
		{url: "REDIS://h:1", addrs: []string{"h:1"}, client: "single"},
		{url: "redis://:s3cret@h", addrs: []string{"h:6379"}, client: "single",
			want: func(o *redis.UniversalOptions) { o.Password = "s3cret" }},
		{url: "redis://sluice:p%40ss%2Fw:rd@h:6379/2", addrs: []string{"h:6379"}, client: "single",
			want: func(o *redis.UniversalOptions) { o.Username, o.Password, o.DB = "sluice", "p@ss/w:rd", 2 }},
		{url: "redis://u:pa/ss?w@rd@h", addrs: []string{"h:6379"}, client: "single", // unencoded: up to the last '@'
			want: func(o *redis.UniversalOptions) { o.Username, o.Password = "u", "pa/ss?w@rd" }},
		{url: "redis://onlyuser@h", addrs: []string{"h:6379"}, client: "single",
			want: func(o *redis.UniversalOptions) { o.Username = "onlyuser" }},
		{url: "rediss://cache.internal:6380", addrs: []string{"cache.internal:6380"}, tls: true, client: "single"},
		{url: "redis://h?dial_timeout=2s&read_timeout=500ms&write_timeout=1s&pool_timeout=3s&conn_max_idle_time=1m&pool_size=64&min_idle_conns=4&max_idle_conns=32&protocol=2&client_name=sluice-1",
			addrs: []string{"h:6379"}, client: "single",
			want: func(o *redis.UniversalOptions) {
				o.DialTimeout, o.ReadTimeout, o.WriteTimeout, o.PoolTimeout, o.ConnMaxIdleTime = 2*time.Second, 500*time.Millisecond, time.Second, 3*time.Second, time.Minute
				o.PoolSize, o.MinIdleConns, o.MaxIdleConns, o.Protocol, o.ClientName = 64, 4, 32, 2, "sluice-1"
			}},
		{url: "redis+cluster://a:7000,b:7001,[::1]:7002", addrs: []string{"a:7000", "b:7001", "[::1]:7002"}, client: "cluster",
			want: func(o *redis.UniversalOptions) { o.IsClusterMode = true }},
		{url: "redis+cluster://seed", addrs: []string{"seed:6379"}, client: "cluster", // one seed is still a cluster
			want: func(o *redis.UniversalOptions) { o.IsClusterMode = true }},
		{url: "rediss+cluster://u:p@a:7000,b:7001/?pool_size=8", addrs: []string{"a:7000", "b:7001"}, tls: true, client: "cluster",
			want: func(o *redis.UniversalOptions) {
				o.IsClusterMode, o.Username, o.Password, o.PoolSize = true, "u", "p", 8
			}},
		{url: "redis+sentinel://s1,s2:26380/mymaster", addrs: []string{"s1:26379", "s2:26380"}, client: "failover",
			want: func(o *redis.UniversalOptions) { o.MasterName = "mymaster" }},
		{url: "redis+sentinel://:pw@s1:26379/my%20master/4", addrs: []string{"s1:26379"}, client: "failover",
			want: func(o *redis.UniversalOptions) { o.MasterName, o.Password, o.DB = "my master", "pw", 4 }},
		{url: "rediss+sentinel://s1/mymaster", addrs: []string{"s1:26379"}, tls: true, client: "failover",
			want: func(o *redis.UniversalOptions) { o.MasterName = "mymaster" }},
	} {
		t.Run(tc.url, func(t *testing.T) {
			got, err := redisstore.ParseURL(tc.url)
			if err != nil {
				t.Fatal(err)
			}
			if (got.TLSConfig != nil) != tc.tls {
				t.Errorf("TLS %v, want %v", got.TLSConfig != nil, tc.tls)
			}
			if got.TLSConfig != nil && (got.TLSConfig.ServerName != "" || got.TLSConfig.MinVersion == 0 || got.TLSConfig.InsecureSkipVerify) {
				t.Errorf("TLS config %+v: want each dialled name verified, TLS 1.2 at least", got.TLSConfig)
			}
			got.TLSConfig = nil
			want := base(tc.addrs...)
			if tc.want != nil {
				tc.want(&want)
			}
			if !equalOptions(got, &want) {
				t.Errorf("options\n got %+v\nwant %+v", *got, want)
			}
			c := redis.NewUniversalClient(got)
			defer c.Close()
			if kind := clientKind(c); kind != tc.client {
				t.Errorf("NewUniversalClient returned a %s client, want %s", kind, tc.client)
			}
		})
	}
}

// equalOptions compares the fields ParseURL sets.
func equalOptions(a, b *redis.UniversalOptions) bool {
	return strings.Join(a.Addrs, ",") == strings.Join(b.Addrs, ",") &&
		a.Username == b.Username && a.Password == b.Password && a.DB == b.DB &&
		a.MasterName == b.MasterName && a.IsClusterMode == b.IsClusterMode &&
		a.ContextTimeoutEnabled == b.ContextTimeoutEnabled && a.MaxRetries == b.MaxRetries &&
		a.DialTimeout == b.DialTimeout && a.ReadTimeout == b.ReadTimeout && a.WriteTimeout == b.WriteTimeout &&
		a.PoolTimeout == b.PoolTimeout && a.ConnMaxIdleTime == b.ConnMaxIdleTime &&
		a.PoolSize == b.PoolSize && a.MinIdleConns == b.MinIdleConns && a.MaxIdleConns == b.MaxIdleConns &&
		a.Protocol == b.Protocol && a.ClientName == b.ClientName &&
		a.SentinelUsername == b.SentinelUsername && a.SentinelPassword == b.SentinelPassword
}

func clientKind(c redis.UniversalClient) string {
	switch c := c.(type) {
	case *redis.ClusterClient:
		return "cluster"
	case *redis.Client:
		if strings.Contains(c.String(), "FailoverClient") || c.Options().Addr == "FailoverClient" {
			return "failover"
		}
		return "single"
	}
	return "other"
}

func TestParseURLRefuses(t *testing.T) {
	for _, tc := range []struct{ url, want string }{
		{"", "not a URL"},
		{"localhost:6379", "not a URL"},
		{"memcached://h", `scheme "memcached"`},
		{"redis+ring://h", `scheme "redis+ring"`},
		{"unix:///tmp/redis.sock", `scheme "unix"`},
		{"redis://", "host is missing"},
		{"redis://a,,b", "host is missing"},
		{"redis://h:", `port ""`},
		{"redis://h:0", `port "0"`},
		{"redis://h:65536", `port "65536"`},
		{"redis://h:x", `port "x"`},
		{"redis://::1:6379", "IPv6 address in brackets"},
		{"redis://[::1", "want host:port"},
		{"redis://[]:1", "malformed"},
		{"redis://a:1,b:2", "names one server"},
		{"redis://h/x", `database "x"`},
		{"redis://h/-1", `database "-1"`},
		{"redis://h/+1", `database "+1"`},
		{"redis://h:+6379", `port "+6379"`},
		{"redis+sentinel://s1:+26379/m", `port "+26379"`},
		{"redis://h?client_name=caf%C3%A9", "printable ASCII"},
		{"redis://h?client_name=a%00b", "printable ASCII"},
		{"redis://h/0/1", "at most a database number"},
		{"redis://h#frag", "fragment"},
		{"redis://h?db=2", `unknown option "db"`},
		{"redis://h?max_retries=3", `unknown option "max_retries"`},
		{"redis://h?skip_verify=true", `unknown option "skip_verify"`},
		{"redis://h?dial_timeout=3", "positive duration"},
		{"redis://h?read_timeout=0s", "positive duration"},
		{"redis://h?pool_size=0", "at least 1"},
		{"redis://h?pool_size=a", "at least 1"},
		{"redis://h?protocol=4", "want 2 or 3"},
		{"redis://h?client_name=a%20b", "without spaces"},
		{"redis://h?pool_size=1&pool_size=2", "given 2 times"},
		{"redis://h?%zz", "options"},
		{"redis://u:%zz@h", "password: malformed"},
		{"redis+cluster://a:1,b:2/0", "only database 0"},
		{"redis+sentinel://s1,s2", "primary's name"},
		{"redis+sentinel://s1/", "primary's name"},
		{"redis+sentinel://s1/m/0/1", "primary's name"},
		{"redis+sentinel://s1/m/x", `database "x"`},
	} {
		t.Run(tc.url, func(t *testing.T) {
			o, err := redisstore.ParseURL(tc.url)
			if err == nil {
				t.Fatalf("accepted, as %+v", *o)
			}
			if !errors.Is(err, engine.ErrInvalid) {
				t.Errorf("error %v does not wrap engine.ErrInvalid", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q, want one saying %q", err, tc.want)
			}
		})
	}
}

// A password never appears in an error or a redacted URL, however the URL
// is malformed around it.
func TestParseURLNeverQuotesThePassword(t *testing.T) {
	const pw = "Sup3rS3cret"
	for _, u := range []string{
		"redis://u:" + pw + "@h:x",
		"redis://u:" + pw + "@a:1,b:2",
		"redis://:" + pw + "@h/db",
		"redis://u:" + pw + "/x@h?bogus=1",
		"redis+sentinel://:" + pw + "@s1",
		"rediss+cluster://u:" + pw + "@a:1/0",
		"redis://u:" + pw + "%zz@h",
	} {
		_, err := redisstore.ParseURL(u)
		if err == nil {
			t.Errorf("%s: accepted", u)
			continue
		}
		if strings.Contains(err.Error(), "S3cret") {
			t.Errorf("error quotes the password: %v", err)
		}
		if r := redisstore.RedactURL(u); strings.Contains(r, "S3cret") || !strings.Contains(r, "xxxxx") {
			t.Errorf("RedactURL(%s) = %s", u, r)
		}
	}
	for in, want := range map[string]string{
		"redis://h:6379":                     "redis://h:6379",
		"redis://user@h":                     "redis://user@h",
		"redis://user:pw@h/0":                "redis://user:xxxxx@h/0",
		"redis+sentinel://:pw@s1,s2/m":       "redis+sentinel://:xxxxx@s1,s2/m",
		"disk":                               "disk",
		"rediss+cluster://a:p:q@x:1,y:2?z=1": "rediss+cluster://a:xxxxx@x:1,y:2?z=1",
	} {
		if got := redisstore.RedactURL(in); got != want {
			t.Errorf("RedactURL(%s) = %s, want %s", in, got, want)
		}
	}
}
