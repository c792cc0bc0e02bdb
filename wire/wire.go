// Package wire is the Sluice RPC contract: the messages of POST /v1/rpc, the
// error codes and statuses, request signing and verification, and the
// bounded body reader. docs/protocol.md describes the same contract for
// implementers in other languages; the two change together.
//
// A request is signed with HMAC-SHA256 over a version tag, the timestamp,
// the method, the path and the raw body (see Sign and Signer). The server
// verifies the signature before it parses any JSON and without reading more
// than MaxBody+1 bytes of body (see ReadBody, AppendBody and Verifier).
//
// The messages are JSON. AppendRequest and AppendResponse write exactly the
// bytes json.Marshal writes, without reflection; DecodeRequest (strict:
// unknown fields, trailing data, a member named in another case or given
// twice and strings that are not UTF-8 are errors) and DecodeResponse
// (lenient: unknown fields are skipped) decode what Sluice writes on a fast
// path and leave everything else to encoding/json, which decides (with
// CheckStrict, for DecodeRequest), so they accept and refuse exactly what
// that does.
package wire

import (
	"time"

	"github.com/sluicehq/sluice/engine"
)

// ProtocolVersion is the version of this contract. A server reports it from
// GET /v1/ping; a client refuses a server with another major version.
const ProtocolVersion = 1

// Paths of the RPC and operator endpoints.
const (
	PathRPC    = "/v1/rpc"
	PathPing   = "/v1/ping"
	PathStop   = "/control/stop"
	PathResume = "/control/resume"
	PathState  = "/control/state"
	// PathFairnessReset resets one identity's fairness quotas (audited).
	PathFairnessReset = "/control/fairness/reset"
	PathAudit         = "/control/audit" // the audit trail of fairness resets
	PathHealthz       = "/healthz"
	PathReadyz        = "/readyz"
	PathMetrics       = "/metrics" // Prometheus metrics, behind the operator token
)

// Headers of a signed request.
const (
	HeaderTimestamp = "X-Sluice-Timestamp" // Unix seconds, decimal
	HeaderSignature = "X-Sluice-Signature" // "v1=" + lowercase hex HMAC-SHA256
)

// Bounds of the transport.
const (
	// MaxBody is the largest request body accepted, in bytes.
	MaxBody = 16 << 10
	// MaxSkew is how far a request's timestamp may be from the server's
	// clock, in either direction.
	MaxSkew = 60 * time.Second
	// MinSecretLen is the shortest accepted signing secret or operator
	// token, in bytes.
	MinSecretLen = 32
)

// Request is the body of POST /v1/rpc.
type Request struct {
	// OperationID is a fresh random id per logical operation (at most 128
	// bytes); a retry after an unknown outcome reuses it. Required.
	OperationID string `json:"operationId"`
	// Family names the caller's admission family (a budget, see the
	// operator documentation). Required.
	Family string `json:"family"`
	// Source and Principal are optional hashed identities used by
	// admission fairness. Raw addresses and user ids never travel.
	Source    string `json:"source,omitempty"`
	Principal string `json:"principal,omitempty"`
	// SourceTiers are the source's aggregate prefixes, keyed by tier
	// (TierV4Slash24 for an IPv4 source; TierV6Slash56 and TierV6Slash48
	// for an IPv6 one), each hashed separately by the client so the server
	// can charge a whole network without ever receiving an address.
	SourceTiers map[string]string `json:"sourceTiers,omitempty"`
	// Mode is "sequential" (default) or "all".
	Mode  engine.Mode   `json:"mode,omitempty"`
	Steps []engine.Step `json:"steps"`
}

// Engine returns the engine request r carries.
func (r *Request) Engine() *engine.Request {
	return &engine.Request{OperationID: r.OperationID, Mode: r.Mode, Steps: r.Steps}
}

// The aggregate prefix tiers of a source.
const (
	TierV4Slash24 = "v4/24"
	TierV6Slash56 = "v6/56"
	TierV6Slash48 = "v6/48"
)

// UnknownSource is the source of every caller whose address is missing,
// unspecified or unparsable; they share one fairness bucket. It is sent as
// is, never hashed, so every client names the same bucket.
const UnknownSource = "unknown"

// Response is the body of a successful POST /v1/rpc: one result per step,
// one result per command of each step.
type Response = engine.Response

// Ping is the body of GET /v1/ping.
type Ping struct {
	Protocol int    `json:"protocol"`
	Version  string `json:"version"`
	// Features names the optional endpoints the server serves, such as
	// FeatureLimiters; absent when none.
	Features []string `json:"features,omitempty"`
}
