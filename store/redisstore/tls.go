package redisstore

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/engine"
)

// TLSFiles name the files of a private TLS deployment, for a store URL of
// the rediss forms: a private certificate authority, a client certificate
// for servers that require one (mutual TLS, tls-auth-clients yes), and a
// server name to verify. Files do not belong in a URL, and a key file's
// path is no secret but its content is: the files are read by Apply, once.
// The zero TLSFiles changes nothing.
type TLSFiles struct {
	// CAFile is a PEM bundle of the certificate authorities that sign the
	// servers' certificates. It replaces the system roots: a server
	// signed by a public authority is refused unless the bundle holds it.
	CAFile string
	// CertFile and KeyFile are the PEM client certificate (its chain, leaf
	// first) and its private key, presented to every server, the
	// sentinels included. Both or neither.
	CertFile, KeyFile string
	// ServerName, when set, is the name every server's certificate must
	// carry, instead of the name or address dialled: for servers reached
	// by address whose certificates name a host. It applies to every
	// node of a cluster and every sentinel alike.
	ServerName string
}

// IsZero reports whether f names nothing.
func (f TLSFiles) IsZero() bool { return f == TLSFiles{} }

// Validate reports whether f is complete, without reading any file: a
// client certificate and its key go together.
func (f TLSFiles) Validate() error {
	if (f.CertFile == "") != (f.KeyFile == "") {
		return fmt.Errorf("%w: redis TLS: a client certificate and its key go together (certificate %q, key %q)", engine.ErrInvalid, f.CertFile, f.KeyFile)
	}
	return nil
}

// Apply reads the files of f into o.TLSConfig, which ParseURL sets for a
// rediss URL (TLS 1.2 or later, certificates verified). It is an error to
// apply files to options without TLS, as they would be silently unused.
// A CA file that cannot be read or holds no PEM certificate, and a client
// certificate that cannot be read or whose key does not match it, are
// errors naming the file. Errors wrap engine.ErrInvalid.
func (f TLSFiles) Apply(o *redis.UniversalOptions) error {
	if f.IsZero() {
		return nil
	}
	if err := f.Validate(); err != nil {
		return err
	}
	if o.TLSConfig == nil {
		return fmt.Errorf("%w: redis TLS files are given, but the store URL does not use TLS (rediss://, rediss+cluster://, rediss+sentinel://)", engine.ErrInvalid)
	}
	c := o.TLSConfig.Clone()
	if f.CAFile != "" {
		pem, err := os.ReadFile(f.CAFile)
		if err != nil {
			return fmt.Errorf("%w: redis TLS CA file: %w", engine.ErrInvalid, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("%w: redis TLS CA file %s holds no PEM certificate", engine.ErrInvalid, f.CAFile)
		}
		c.RootCAs = pool
	}
	if f.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
		if err != nil {
			var perr *os.PathError
			if !errors.As(err, &perr) {
				// The files were read: their content is wrong, such as
				// a key that does not match the certificate.
				err = fmt.Errorf("certificate %s and key %s: %w", f.CertFile, f.KeyFile, err)
			}
			return fmt.Errorf("%w: redis TLS client certificate: %w", engine.ErrInvalid, err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	if f.ServerName != "" {
		c.ServerName = f.ServerName
	}
	o.TLSConfig = c
	return nil
}
