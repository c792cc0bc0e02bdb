package main

import (
	"encoding/hex"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/client"
)

var discard = slog.New(slog.DiscardHandler)

func TestLoadOrCreate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	if err := ensureDataDir(dir, discard); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(dir); fi.Mode().Perm() != 0o700 {
		t.Errorf("data directory mode %v, want 0700", fi.Mode().Perm())
	}

	first, created, err := loadOrCreate(dir, secretFile, discard)
	if err != nil || !created || len(first) != 1 {
		t.Fatalf("first call: %v, created %v, %d values", err, created, len(first))
	}
	if b, err := hex.DecodeString(first[0]); err != nil || len(b) != credentialBytes {
		t.Errorf("generated %q, want %d random bytes in hex", first[0], credentialBytes)
	}
	fi, err := os.Stat(filepath.Join(dir, secretFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("secret file: %v, mode %v; want 0600", err, fi.Mode().Perm())
	}

	again, created, err := loadOrCreate(dir, secretFile, discard)
	if err != nil || created || len(again) != 1 || again[0] != first[0] {
		t.Errorf("second call: %v, created %v, %q; want the first value, not created", err, created, again)
	}
	other, _, _ := loadOrCreate(dir, pepperFile, discard)
	if other[0] == first[0] {
		t.Error("two generated credentials are equal")
	}
	// The pepper is in the compact form, so that the clients reading it
	// name keys by 22 characters.
	if rest, ok := strings.CutPrefix(other[0], client.CompactPrefix); !ok || len(rest) != 43 {
		t.Errorf("generated pepper %q, want %q and 32 random bytes in base64url", other[0], client.CompactPrefix)
	}

	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.Name() != secretFile && e.Name() != pepperFile {
			t.Errorf("stray file %s left in the data directory", e.Name())
		}
	}
}

func TestLoadOrCreateKeepsWhatIsThere(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(secretFile, "  current  \n\nprevious\n")
	write(operatorTokenFile, "")

	secrets, created, err := loadOrCreate(dir, secretFile, discard)
	if err != nil || created || len(secrets) != 2 || secrets[0] != "current" || secrets[1] != "previous" {
		t.Errorf("secrets %q (created %v, %v), want [current previous]", secrets, created, err)
	}
	// An empty file is a configuration error for the server to report,
	// never replaced by a fresh value.
	token, created, err := loadOrCreate(dir, operatorTokenFile, discard)
	if err != nil || created || len(token) != 0 {
		t.Errorf("empty token file: %q (created %v, %v), want nothing and not created", token, created, err)
	}
	if data, _ := os.ReadFile(filepath.Join(dir, operatorTokenFile)); len(data) != 0 {
		t.Errorf("the empty token file was rewritten: %q", data)
	}
}

func TestResolveCredentials(t *testing.T) {
	cfg := defaultServeConfig()
	cfg.DataDir = filepath.Join(t.TempDir(), "data")
	cfg.Secrets, cfg.SecretsSet = []string{"from-flag"}, true

	c, err := resolveCredentials(cfg, discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Secrets) != 1 || c.Secrets[0] != "from-flag" {
		t.Errorf("secrets %q, want the flag's", c.Secrets)
	}
	if _, err := os.Stat(filepath.Join(cfg.DataDir, secretFile)); !os.IsNotExist(err) {
		t.Error("a secret file was created although the flag gave the secrets")
	}
	if c.OperatorToken == "" || c.Pepper == "" {
		t.Error("the operator token and pepper were not created")
	}
	again, err := resolveCredentials(cfg, discard)
	if err != nil || again.OperatorToken != c.OperatorToken || again.Pepper != c.Pepper {
		t.Errorf("a second start did not reuse the credentials: %v", err)
	}
}

// A pepper or operator-token file that is empty or holds several lines is
// an invalid configuration the server reports, refusing every RPC with the
// reason: never a server without a pepper, a pepper other than the one
// "cat pepper" gives the clients, or a token that matches nothing.
func TestServeReportsAMalformedCredentialFile(t *testing.T) {
	good := func(c byte) string { return strings.Repeat(string(c), 64) + "\n" }
	for _, tc := range []struct {
		name, file, content, reason string
	}{
		{"empty pepper", pepperFile, "", "pepper is empty"},
		{"blank pepper", pepperFile, " \n\n", "pepper is empty"},
		{"two peppers", pepperFile, good('p') + good('q'), "pepper holds 2 lines"},
		{"two operator tokens", operatorTokenFile, good('o') + good('t'), "operator-token holds 2 lines"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			files := map[string]string{secretFile: good('s'), pepperFile: good('p'), operatorTokenFile: good('o')}
			files[tc.file] = tc.content
			for name, content := range files {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			log, err := serveLogUntilListening(t, nil, "--data-dir", dir, "--store", "memory", "--addr", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(log, "refusing every RPC") || !strings.Contains(log, tc.reason) {
				t.Errorf("log %q, want every RPC refused for %q", log, tc.reason)
			}
		})
	}
}
