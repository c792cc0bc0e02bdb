package redisstore_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/store/redisstore"
)

// openTLS opens a store on rawURL with files, as sluice serve does: the URL
// parsed, the files applied, a PING, New. It returns the first error.
func openTLS(t *testing.T, rawURL string, files redisstore.TLSFiles) (*redisstore.Store, error) {
	t.Helper()
	o, err := redisstore.ParseURL(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	if err := files.Apply(o); err != nil {
		return nil, err
	}
	client := redis.NewUniversalClient(o)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := client.Ping(ctx).Err(); err != nil {
		client.Close()
		return nil, err
	}
	s, err := redisstore.New(client, freshConfig(nil))
	if err != nil {
		client.Close()
		return nil, err
	}
	t.Cleanup(func() { s.Close() })
	return s, nil
}

// hitOnce runs one GCRA hit on s and checks that it was admitted.
func hitOnce(t *testing.T, s *redisstore.Store) {
	t.Helper()
	var out engine.StepResult
	hit := engine.Hit(1, engine.Window{Key: "calls", Kind: algo.KindGCRA, Limit: 10, WindowMs: 60_000})
	if err := engine.New(s).Apply(t.Context(), "tenant", &out, hit); err != nil {
		t.Fatal(err)
	}
	if !out.Results[0].Allowed || out.Results[0].Remaining != 9 {
		t.Fatalf("result %+v, want admitted with 9 remaining", out.Results[0])
	}
}

// A rediss:// store on a server of a private authority requiring client
// certificates: it runs with the authority's bundle and a client
// certificate, and is refused without the certificate, with another
// authority's bundle, or with the system roots.
func TestTLSClientCertificates(t *testing.T) {
	ca := redistest.NewCA(t, "sluice test CA")
	srv := redistest.StartTLS(t, ca, "")
	url := "rediss://" + srv.Addr
	cert, key := ca.Issue(t, "sluice")

	s, err := openTLS(t, url, redisstore.TLSFiles{CAFile: ca.CertFile, CertFile: cert, KeyFile: key})
	if err != nil {
		t.Fatalf("with the CA and a client certificate: %v", err)
	}
	hitOnce(t, s)

	// The server refuses with a TLS alert: the client learns why.
	if _, err := openTLS(t, url, redisstore.TLSFiles{CAFile: ca.CertFile}); err == nil || !strings.Contains(err.Error(), "certificate required") {
		t.Errorf("without a client certificate: %v, want the server's refusal", err)
	}

	other := redistest.NewCA(t, "another CA")
	otherCert, otherKey := other.Issue(t, "sluice")
	_, err = openTLS(t, url, redisstore.TLSFiles{CAFile: other.CertFile, CertFile: cert, KeyFile: key})
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("with another authority's bundle: %v, want a refused server certificate", err)
	}
	if _, err := openTLS(t, url, redisstore.TLSFiles{CAFile: ca.CertFile, CertFile: otherCert, KeyFile: otherKey}); err == nil || !strings.Contains(err.Error(), "unknown certificate authority") {
		t.Errorf("with a client certificate of another authority: %v, want the server's refusal", err)
	}
	if _, err := openTLS(t, url, redisstore.TLSFiles{CertFile: cert, KeyFile: key}); err == nil {
		t.Error("the system roots verified a private authority's server")
	}
}

// A server reached by address whose certificate names a host is verified
// under ServerName, and refused without it.
func TestTLSServerName(t *testing.T) {
	ca := redistest.NewCA(t, "sluice test CA")
	srv := redistest.StartTLS(t, ca, "redis.internal")
	url := "rediss://" + srv.Addr
	cert, key := ca.Issue(t, "sluice")
	files := redisstore.TLSFiles{CAFile: ca.CertFile, CertFile: cert, KeyFile: key}

	if _, err := openTLS(t, url, files); err == nil || !strings.Contains(err.Error(), "127.0.0.1") {
		t.Errorf("without ServerName: %v, want the address refused by the certificate", err)
	}
	files.ServerName = "redis.internal"
	s, err := openTLS(t, url, files)
	if err != nil {
		t.Fatalf("with ServerName: %v", err)
	}
	hitOnce(t, s)
	files.ServerName = "other.internal"
	if _, err := openTLS(t, url, files); err == nil {
		t.Error("a ServerName the certificate does not carry was accepted")
	}
}

// Apply reads and checks the files at once, naming the file at fault.
func TestTLSFilesApply(t *testing.T) {
	ca := redistest.NewCA(t, "sluice test CA")
	cert, key := ca.Issue(t, "sluice")
	_, otherKey := ca.Issue(t, "other")
	dir := t.TempDir()
	junk := filepath.Join(dir, "junk.pem")
	if err := os.WriteFile(junk, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.pem")

	for _, tc := range []struct {
		name  string
		files redisstore.TLSFiles
		url   string
		want  string
	}{
		{"unreadable CA file", redisstore.TLSFiles{CAFile: missing}, "rediss://h", "missing.pem"},
		{"no certificate in the CA file", redisstore.TLSFiles{CAFile: junk}, "rediss://h", "holds no PEM certificate"},
		{"a certificate without its key", redisstore.TLSFiles{CertFile: cert}, "rediss://h", "go together"},
		{"a key without its certificate", redisstore.TLSFiles{KeyFile: key}, "rediss://h", "go together"},
		{"unreadable key", redisstore.TLSFiles{CertFile: cert, KeyFile: missing}, "rediss://h", "missing.pem"},
		{"a key of another certificate", redisstore.TLSFiles{CertFile: cert, KeyFile: otherKey}, "rediss://h", "does not match"},
		{"a certificate file that is no certificate", redisstore.TLSFiles{CertFile: junk, KeyFile: key}, "rediss://h", "junk.pem"},
		{"files for a plain URL", redisstore.TLSFiles{CAFile: ca.CertFile}, "redis://h", "does not use TLS"},
		{"a server name for a plain cluster", redisstore.TLSFiles{ServerName: "h"}, "redis+cluster://h:7000", "does not use TLS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := redisstore.ParseURL(tc.url)
			if err != nil {
				t.Fatal(err)
			}
			before := o.TLSConfig
			err = tc.files.Apply(o)
			if !errors.Is(err, engine.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Apply: %v, want ErrInvalid about %q", err, tc.want)
			}
			if o.TLSConfig != before {
				t.Error("a failed Apply changed the options")
			}
		})
	}

	o, err := redisstore.ParseURL("rediss+sentinel://s1/primary")
	if err != nil {
		t.Fatal(err)
	}
	if err := (redisstore.TLSFiles{CAFile: ca.CertFile, CertFile: cert, KeyFile: key, ServerName: "redis.internal"}).Apply(o); err != nil {
		t.Fatal(err)
	}
	if c := o.TLSConfig; c.RootCAs == nil || len(c.Certificates) != 1 || c.ServerName != "redis.internal" || c.MinVersion != 0x0303 || c.InsecureSkipVerify {
		t.Errorf("TLS configuration %+v: want the bundle, one certificate, the name, TLS 1.2 at least, verification on", c)
	}
	plain, err := redisstore.ParseURL("redis://h")
	if err != nil {
		t.Fatal(err)
	}
	if err := (redisstore.TLSFiles{}).Apply(plain); err != nil || plain.TLSConfig != nil {
		t.Errorf("the zero TLSFiles on a plain URL: %v, %v", err, plain.TLSConfig)
	}
}
