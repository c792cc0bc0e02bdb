package redistest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// CA is a throwaway certificate authority for TLS tests: a self-signed
// P-256 certificate, valid for a day, and its key, in a directory of the
// test's own.
type CA struct {
	// CertFile is the PEM file of the authority's certificate.
	CertFile string

	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	dir  string
	pool *x509.CertPool
	n    int64
}

// NewCA creates a certificate authority named name.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("redistest: CA key: %v", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatalf("redistest: CA certificate: %v", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatalf("redistest: CA certificate: %v", err)
	}
	dir, err := os.MkdirTemp(t.TempDir(), "ca-")
	if err != nil {
		t.Fatal(err)
	}
	ca := &CA{cert: cert, key: key, dir: dir, pool: x509.NewCertPool(), n: 1}
	ca.pool.AddCert(cert)
	ca.CertFile = filepath.Join(dir, "ca.pem")
	writePEM(t, ca.CertFile, "CERTIFICATE", der)
	return ca
}

// Issue creates a certificate signed by ca for both server and client
// use, with a fresh key, and returns the paths of its PEM certificate and
// key files. Each name is a DNS name or an IP address; the first is also
// the common name.
func (ca *CA) Issue(t testing.TB, names ...string) (certFile, keyFile string) {
	t.Helper()
	if len(names) == 0 {
		t.Fatal("redistest: a certificate needs a name")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("redistest: key: %v", err)
	}
	ca.n++
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(ca.n),
		Subject:      pkix.Name{CommonName: names[0]},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatalf("redistest: certificate: %v", err)
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatalf("redistest: key: %v", err)
	}
	base := filepath.Join(ca.dir, fmt.Sprintf("%d-%s", ca.n, strings.NewReplacer(":", "_", "/", "_").Replace(names[0])))
	certFile, keyFile = base+".pem", base+"-key.pem"
	writePEM(t, certFile, "CERTIFICATE", der)
	writePEM(t, keyFile, "PRIVATE KEY", pkcs8)
	return certFile, keyFile
}

func writePEM(t testing.TB, path, kind string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// ClientTLS returns a client TLS configuration trusting only ca, with a
// client certificate of ca's, verifying serverName (empty: the address
// dialled).
func (ca *CA) ClientTLS(t testing.TB, serverName string) *tls.Config {
	t.Helper()
	certFile, keyFile := ca.Issue(t, "redistest-client")
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatalf("redistest: client certificate: %v", err)
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: ca.pool, Certificates: []tls.Certificate{cert}, ServerName: serverName}
}

// StartTLS starts a single redis-server that speaks only TLS (no plain
// port), with a certificate of ca's for serverName (empty: for 127.0.0.1),
// and requires every client to present a certificate signed by ca
// (tls-auth-clients yes). Its Options and Client connect with such a
// certificate. It stops when t ends.
//
// When the installed redis-server was built without TLS the test is
// skipped loudly, or fails under CI=true, as when there is no
// redis-server at all.
func StartTLS(t testing.TB, ca *CA, serverName string, extra ...string) *Server {
	t.Helper()
	bin := Binary(t)
	requireTLS(t, bin)
	name := serverName
	if name == "" {
		name = "127.0.0.1"
	}
	certFile, keyFile := ca.Issue(t, name)
	args := append([]string{
		"--tls-cert-file", certFile,
		"--tls-key-file", keyFile,
		"--tls-ca-cert-file", ca.CertFile,
		"--tls-auth-clients", "yes",
	}, extra...)
	client := ca.ClientTLS(t, serverName)
	var lastErr error
	for range 5 {
		s, err := launchTLS(t, bin, client, args)
		if err == nil {
			return s
		}
		lastErr = err
	}
	t.Fatalf("redistest: could not start redis-server with TLS: %v", lastErr)
	return nil
}

// requireTLS skips t (fails it under CI=true) when bin was built without
// TLS. A build with TLS started with no port at all exits at once saying
// so; one without refuses the tls-port directive.
func requireTLS(t testing.TB, bin string) {
	t.Helper()
	tlsProbe.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
		defer cancel()
		out, _ := exec.CommandContext(ctx, bin, "--port", "0", "--tls-port", "0", "--save", "", "--appendonly", "no").CombinedOutput()
		if strings.Contains(string(out), "Bad directive") {
			tlsMissing = fmt.Sprintf("%s was built without TLS: %s", bin, strings.TrimSpace(string(out)))
		}
	})
	if tlsMissing == "" {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("redis-server with TLS is required under CI=true: %s", tlsMissing)
	}
	tlsWarnOnce.Do(func() {
		fmt.Fprintln(os.Stderr, "redistest: SKIPPING every test that needs Redis over TLS:", tlsMissing)
	})
	t.Skipf("SKIPPED: %s", tlsMissing)
}

var (
	tlsProbe    sync.Once
	tlsMissing  string
	tlsWarnOnce sync.Once
)
