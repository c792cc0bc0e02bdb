package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/sluicehq/sluice/wire"
)

// maxAnswer bounds an answer the command-line tools read from a server.
const maxAnswer = 1 << 20

// remote is how a command-line tool reaches a server.
type remote struct {
	// URL is the server's base URL.
	URL string
	// DataDir is where credentials not given by flag are read from.
	DataDir string
	// CACert is a PEM file of the authority that signed an HTTPS server's
	// certificate, for servers outside the system's trust store.
	CACert string
	// Timeout bounds one call.
	Timeout time.Duration
}

func (r *remote) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&r.URL, "url", "http://127.0.0.1:7420", "base URL of the server")
	fs.StringVar(&r.DataDir, "data-dir", "sluice-data", "data directory to read credentials from when no flag gives them")
	fs.StringVar(&r.CACert, "ca-cert", "", "PEM file of the certificate authority of an HTTPS server")
	fs.DurationVar(&r.Timeout, "timeout", 2*time.Second, "timeout of one call")
	bindEnv(fs, "url", "SLUICE_URL")
	bindEnv(fs, "data-dir", "SLUICE_DATA_DIR")
	bindEnv(fs, "ca-cert", "SLUICE_CA_CERT")
}

// httpClient returns a client trusting CACert, if set, besides the system's
// authorities.
func (r *remote) httpClient() (*http.Client, error) {
	if r.Timeout <= 0 {
		return nil, fmt.Errorf("timeout %s must be positive", r.Timeout)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if r.CACert != "" {
		pem, err := os.ReadFile(r.CACert)
		if err != nil {
			return nil, err
		}
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s holds no PEM certificate", r.CACert)
		}
		tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool}
	}
	return &http.Client{Transport: tr, Timeout: r.Timeout}, nil
}

// endpoint returns the URL of path on the server.
func (r *remote) endpoint(path string) string {
	return strings.TrimRight(r.URL, "/") + path
}

// call sends a request and decodes a 2xx JSON answer into out. Any other
// answer becomes an error carrying the server's code and reason.
func call(hc *http.Client, req *http.Request, out any) error {
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return fmt.Errorf("reading the answer: %w", err)
	}
	if resp.StatusCode/100 != 2 {
		return problemError(resp, body)
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("decoding the answer (HTTP %d): %w", resp.StatusCode, err)
	}
	return nil
}

// problemError turns an error answer into a *wire.Error when it is a
// problem document, and into a plain error otherwise.
func problemError(resp *http.Response, body []byte) error {
	var p wire.Problem
	if err := json.Unmarshal(body, &p); err == nil && p.Code != "" {
		if p.Status == 0 {
			p.Status = resp.StatusCode
		}
		return &wire.Error{Problem: p}
	}
	return fmt.Errorf("HTTP %s from %s", resp.Status, resp.Request.URL)
}

// explain rewrites an error answer of the server for a person; other errors
// pass unchanged.
func explain(err error) error {
	var werr *wire.Error
	if !errors.As(err, &werr) {
		return err
	}
	msg := fmt.Sprintf("the server answered %d %s", werr.Status, werr.Code)
	if werr.Reason != "" {
		msg += ": " + werr.Reason
	}
	return errors.New(msg)
}
