package e2e

import (
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/wire"
)

// TestProtocolDocExample keeps the worked signing example of
// docs/protocol.md true: the documented signature is what wire.Sign
// computes for the documented secret, timestamp and body.
func TestProtocolDocExample(t *testing.T) {
	const (
		secret    = "example-secret-0123456789abcdef-0123456789"
		timestamp = 1767225600
		body      = `{"operationId":"7c0e1f4d2a9b4c3e8f6a5b4c3d2e1f00","family":"api","steps":[{"partition":"user:42","commands":[{"op":"win.hit","windows":[{"key":"per-minute","kind":"sliding","limit":100,"windowMs":60000}],"cost":1}]}]}`
		signature = "v1=39f35ce142f0f87cc9d2f57ecb146f198962afa9dd910360fa9fbf52953c84e9"
	)
	if got := wire.Sign([]byte(secret), timestamp, http.MethodPost, wire.PathRPC, []byte(body)); got != signature {
		t.Errorf("wire.Sign = %s, want the documented %s", got, signature)
	}
	doc, err := os.ReadFile("../docs/protocol.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{secret, body, signature, "X-Sluice-Timestamp: 1767225600"} {
		if !strings.Contains(string(doc), want) {
			t.Errorf("docs/protocol.md no longer shows %q", want)
		}
	}
}
