package engine_test

import (
	"bufio"
	"bytes"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/sluicehq/sluice"

// core is the packages at the bottom of the layering: they hold semantics
// only, and import no store, transport or storage engine.
var core = []string{module + "/algo", module + "/engine"}

// layeringViolation reports why the core may not import path, or "" if it
// may.
func layeringViolation(path string) string {
	switch {
	case path == module+"/algo" || path == module+"/engine" || strings.HasPrefix(path, module+"/internal/"):
		return ""
	case path == module || strings.HasPrefix(path, module+"/"):
		return "a Sluice package above the core"
	case path == "net" || strings.HasPrefix(path, "net/") || path == "crypto/tls":
		return "a network transport"
	case strings.HasPrefix(path, "google.golang.org/grpc"):
		return "a network transport (gRPC)"
	case strings.HasPrefix(path, "github.com/redis/") || strings.HasPrefix(path, "github.com/go-redis/") ||
		strings.HasPrefix(path, "github.com/gomodule/redigo") || strings.HasPrefix(path, "github.com/valkey-io/"):
		return "a Redis client"
	case strings.HasPrefix(path, "github.com/cockroachdb/pebble") || strings.HasPrefix(path, "go.etcd.io/bbolt") ||
		path == "database/sql" || strings.HasPrefix(path, "database/sql/"):
		return "a storage engine"
	}
	return ""
}

// TestLayering walks the transitive imports of algo and engine, as the go
// command resolves them for the current platform, and fails naming every
// forbidden import and the chain that reaches it.
func TestLayering(t *testing.T) {
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the layering test needs the go command: %v", err)
	}
	for _, root := range core {
		cmd := exec.Command(goCmd, "list", "-deps", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, root)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", root, err, stderr.Bytes())
		}
		imports := parseImports(t, out)
		if _, ok := imports[root]; !ok {
			t.Fatalf("go list -deps %s did not list %s itself", root, root)
		}
		for path := range imports {
			if why := layeringViolation(path); why != "" {
				t.Errorf("%s imports %s, %s: %s", root, path, why, strings.Join(importChain(imports, root, path), " → "))
			}
		}
	}
}

// parseImports reads lines of "package import…" into a graph.
func parseImports(t *testing.T, out []byte) map[string][]string {
	t.Helper()
	graph := map[string][]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 0 {
			graph[fields[0]] = fields[1:]
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return graph
}

// importChain returns a shortest chain of imports from root to path.
func importChain(graph map[string][]string, root, path string) []string {
	prev := map[string]string{root: ""}
	queue := []string{root}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if p == path {
			chain := []string{p}
			for p != root {
				p = prev[p]
				chain = append(chain, p)
			}
			slices.Reverse(chain)
			return chain
		}
		for _, next := range graph[p] {
			if _, seen := prev[next]; !seen {
				prev[next] = p
				queue = append(queue, next)
			}
		}
	}
	return []string{root, "…", path}
}

// TestLayeringRules checks the rules TestLayering applies, so that a rule
// cannot silently stop matching.
func TestLayeringRules(t *testing.T) {
	forbidden := []string{
		"net", "net/http", "net/http/httptest", "net/rpc", "crypto/tls", "database/sql",
		"google.golang.org/grpc", "google.golang.org/grpc/codes",
		"github.com/redis/go-redis/v9", "github.com/go-redis/redis/v8",
		"github.com/cockroachdb/pebble/v2", "go.etcd.io/bbolt",
		module + "/store/memstore", module + "/store/diskstore", module + "/store/storetest",
		module + "/server", module + "/client", module + "/httplimit", module + "/cmd/sluice",
	}
	for _, p := range forbidden {
		if layeringViolation(p) == "" {
			t.Errorf("%s is allowed in the core", p)
		}
	}
	allowed := []string{
		module + "/algo", module + "/engine", module + "/internal/hashkey",
		"context", "crypto/sha256", "encoding/json", "math/bits", "github.com/example/networking",
	}
	for _, p := range allowed {
		if why := layeringViolation(p); why != "" {
			t.Errorf("%s is refused (%s)", p, why)
		}
	}

	graph := map[string][]string{
		"a": {"b", "c"},
		"b": {"d"},
		"c": {"d", "net/http"},
		"d": {"net/http"},
	}
	if got := strings.Join(importChain(graph, "a", "net/http"), " "); got != "a c net/http" {
		t.Errorf("chain = %q, want the shortest, a c net/http", got)
	}
}
