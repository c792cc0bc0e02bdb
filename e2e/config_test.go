package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/wire"
)

// TestZeroConfigFirstStart starts sluice serve with no configuration: it
// creates its data directory and credentials, private to its user, serves
// authenticated requests at once, and reuses the same credentials after a
// restart.
func TestZeroConfigFirstStart(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverOptions{})
	if fi, err := os.Stat(s.DataDir()); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("data directory: %v, mode %v; want 0700", err, fi.Mode().Perm())
	}
	creds := map[string]string{}
	for _, name := range []string{"secret", "pepper", "operator-token"} {
		path := filepath.Join(s.DataDir(), name)
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want 0600", name, fi.Mode().Perm())
		}
		v := readCredential(t, s.DataDir(), name)
		if name == "pepper" {
			// In the compact form, so that its clients name keys by 22
			// characters.
			rest, ok := strings.CutPrefix(v, client.CompactPrefix)
			if b, err := base64.RawURLEncoding.DecodeString(rest); !ok || err != nil || len(b) != 32 {
				t.Errorf("pepper holds %q, want %q and 32 random bytes in base64url", v, client.CompactPrefix)
			}
		} else if b, err := hex.DecodeString(v); err != nil || len(b) != 32 {
			t.Errorf("%s holds %q, want 32 random bytes in hex", name, v)
		}
		creds[name] = v
		if !strings.Contains(s.logs.String(), name) {
			t.Errorf("the logs do not say where %s is", name)
		}
	}
	if creds["secret"] == creds["pepper"] || creds["secret"] == creds["operator-token"] || creds["pepper"] == creds["operator-token"] {
		t.Error("two credentials are equal")
	}
	// Authenticated from the first second: the generated secret signs, and
	// an unsigned request is refused.
	p := unique(t, "zero")
	s.do(t, request(step(p, engine.Incr("n", 1, hour))))
	signedPost(t, s.URL, "", time.Now().Unix(), encode(t, request(step(p, engine.Incr("n", 1, hour))))).
		problem(t, wire.CodeUnauthorized)

	s.restart()
	for name, v := range creds {
		if got := readCredential(t, s.DataDir(), name); got != v {
			t.Errorf("%s changed across a restart", name)
		}
	}
	if strings.Contains(s.logs.String(), "created credentials") {
		t.Error("the restart created credentials again")
	}
	if v, _ := s.get(t, p, "n"); v != "1" {
		t.Errorf("counter %q after a restart, want 1", v)
	}
}

// TestInvalidConfigurationAnswers503 starts servers whose credentials must
// not be trusted: each starts, reports the reason once, and answers every
// RPC and operator call 503 guard_unavailable with the reason and a
// Retry-After, while /healthz stays up and /readyz reports the reason.
func TestInvalidConfigurationAnswers503(t *testing.T) {
	t.Parallel()
	good := strings.Repeat("g", 40)
	for _, tc := range []struct {
		name   string
		env    []string
		secret string // signs the probes
		reason string
	}{
		{"short secret", []string{"SLUICE_SECRETS=short-secret"}, "short-secret", "minimum 32"},
		{"short previous secret", []string{"SLUICE_SECRETS=" + good + ",short"}, good, "signing secret 1 is 5 characters"},
		{"operator token equals a secret", []string{"SLUICE_SECRETS=" + good, "SLUICE_OPERATOR_TOKEN=" + good}, good, "operator token equals signing secret 0"},
		{"short operator token", []string{"SLUICE_SECRETS=" + good, "SLUICE_OPERATOR_TOKEN=short"}, good, "operator token is 5 characters"},
		{"empty secret list", []string{"SLUICE_SECRETS="}, good, "no signing secret"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := startServer(t, serverOptions{Env: tc.env, Secret: tc.secret, Misconfigured: true})
			check := func(what string, a answer) {
				t.Helper()
				p := a.problem(t, wire.CodeUnavailable)
				if !strings.Contains(p.Reason, tc.reason) {
					t.Errorf("%s: reason %q, want it to mention %q", what, p.Reason, tc.reason)
				}
				if a.Header.Get("Retry-After") == "" {
					t.Errorf("%s: 503 without Retry-After", what)
				}
			}
			key := unique(t, "probe")
			check("rpc", s.call(t, request(step("cfg", engine.Incr(key, 1, hour)))))
			check("read rpc", s.call(t, request(step("cfg", engine.Get(key)))))
			check("unsigned rpc", signedPost(t, s.URL, "", 0, []byte("{}")))
			check("stop", s.operator(t, http.MethodPost, wire.PathStop, good, ""))
			check("state", s.operator(t, http.MethodGet, wire.PathState, good, ""))
			req, _ := http.NewRequest(http.MethodGet, s.URL+wire.PathReadyz, nil)
			check("readyz", send(t, req))
			if n := strings.Count(s.logs.String(), "refusing every RPC"); n != 1 {
				t.Errorf("the reason was logged %d times, want once", n)
			}
		})
	}
}

// TestTLS serves HTTPS with --tls-cert and --tls-key: signed RPCs and the
// CLI work over it, and plain HTTP does not.
func TestTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	certFile, keyFile, pool := selfSigned(t, dir)
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	s := startServer(t, serverOptions{
		Dir:    dir,
		Args:   []string{"--tls-cert", certFile, "--tls-key", keyFile},
		Client: hc,
	})
	if !strings.HasPrefix(s.URL, "https://") {
		t.Fatalf("URL %s, want https", s.URL)
	}
	p := unique(t, "tls")
	a, err := trySend(hc, signedRequest(t, s.URL, s.secret(), time.Now().Unix(), encode(t, request(step(p, engine.Incr("n", 1, hour))))))
	if err != nil {
		t.Fatal(err)
	}
	if got := a.response(t).Steps[0].Results[0].Int; got != 1 {
		t.Errorf("incr over TLS answered %d, want 1", got)
	}
	// Go's TLS server answers a plain request with a 400 or drops it;
	// either way nothing is served.
	if resp, err := httpClient.Get("http://" + s.Addr + wire.PathHealthz); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Error("plain HTTP served on the TLS port")
		}
	}
	out, errOut, status := s.cli(t, "ping", "--ca-cert", certFile)
	if status != 0 || !strings.Contains(out, "ready     yes") {
		t.Errorf("ping over TLS: status %d, %q %q", status, out, errOut)
	}
	out, errOut, status = s.cli(t, "hit", "--ca-cert", certFile, "--partition", "user:1", "--limit", "1", "--window", "1h")
	if status != 0 || !strings.Contains(out, "allowed      yes") {
		t.Errorf("hit over TLS: status %d, %q %q", status, out, errOut)
	}
}

// selfSigned writes a self-signed certificate for 127.0.0.1 into dir and
// returns its files and a pool trusting it.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "sluice e2e"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}
