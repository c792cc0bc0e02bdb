package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/sluicehq/sluice/client"
)

// The credential files of a data directory. Each holds one value per line;
// the secret file may hold several, the current secret first, then the
// previous one during a rotation.
const (
	secretFile        = "secret"
	pepperFile        = "pepper"
	operatorTokenFile = "operator-token"
	// storeDir is the embedded store's directory inside the data directory.
	storeDir = "store"
)

// credentialBytes is the entropy of a generated credential: 32 random
// bytes, written as 64 hex characters, or for the pepper in the compact
// form (client.NewPepper), whose clients name keys by 22 characters.
const credentialBytes = 32

// newCredential returns a fresh random value for the credential file name.
func newCredential(name string) string {
	if name == pepperFile {
		return client.NewPepper()
	}
	var b [credentialBytes]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go ≥ 1.24)
	return hex.EncodeToString(b[:])
}

// credentials are the values a server and its local tools share.
type credentials struct {
	// Secrets are the signing secrets, current first.
	Secrets []string
	// Pepper is the key-hashing pepper clients use; the server hashes
	// limiter names with it for /v1/limiters.
	Pepper string
	// OperatorToken is the bearer token of the operator endpoints.
	OperatorToken string
	// Problems are the credential files that hold no usable value, for
	// the server to report (server.Config.AddProblem).
	Problems []error
}

// ensureDataDir creates dir (mode 0700) if it is missing and warns when an
// existing one is open to other users.
func ensureDataDir(dir string, log *slog.Logger) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("creating the data directory: %w", err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("data directory %s is not a directory", dir)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		log.Warn("data directory is open to other users; chmod 700 it", "dir", dir, "mode", fi.Mode().Perm().String())
	}
	return nil
}

// loadOrCreate returns the non-empty lines of the credential file name in
// dir, creating it with a fresh random value (mode 0600) if it does not
// exist. created reports whether it did. An existing file is never
// rewritten, even when empty: an empty credential is a configuration error
// for the server to report, not a reason to mint a new one behind the
// operator's back.
func loadOrCreate(dir, name string, log *slog.Logger) (values []string, created bool, err error) {
	path := filepath.Join(dir, name)
	values, err = readCredential(path, log)
	if !errors.Is(err, fs.ErrNotExist) {
		return values, false, err
	}
	value := newCredential(name)
	switch err := createExclusive(path, []byte(value+"\n")); {
	case errors.Is(err, fs.ErrExist):
		// Another process created it first: use theirs.
		values, err := readCredential(path, log)
		return values, false, err
	case err != nil:
		return nil, false, fmt.Errorf("creating %s: %w", path, err)
	}
	return []string{value}, true, nil
}

// readCredential reads the non-empty, trimmed lines of path.
func readCredential(path string, log *slog.Logger) ([]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o077 != 0 {
		log.Warn("credential file is readable by other users; chmod 600 it", "file", path, "mode", fi.Mode().Perm().String())
	}
	var values []string
	for line := range strings.Lines(string(data)) {
		if v := strings.TrimSpace(line); v != "" {
			values = append(values, v)
		}
	}
	return values, nil
}

// createExclusive writes data to path (mode 0600) atomically: it appears
// whole or not at all, and never replaces an existing file (fs.ErrExist).
func createExclusive(path string, data []byte) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	// A hard link fails if path exists, unlike a rename.
	if err := os.Link(tmp.Name(), path); err != nil {
		return err
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// readOneCredential returns the first value of the credential file name in
// dataDir, for the command-line tools.
func readOneCredential(dataDir, name string) (string, error) {
	if dataDir == "" {
		// filepath.Join would read the working directory's file.
		return "", errors.New("the data directory (--data-dir, $SLUICE_DATA_DIR) is empty")
	}
	values, err := readCredential(filepath.Join(dataDir, name), slog.New(slog.DiscardHandler))
	if err != nil {
		return "", err
	}
	if len(values) == 0 {
		return "", fmt.Errorf("%s is empty", filepath.Join(dataDir, name))
	}
	return values[0], nil
}
