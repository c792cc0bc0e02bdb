package e2e

import (
	"os"
	"path/filepath"
	"testing"
)

// writeFile writes a credential file (mode 0600) into dir, creating dir
// (mode 0700).
func writeFile(t testing.TB, dir, name, content string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}
