package client

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/keyhash"
	"github.com/sluicehq/sluice/wire"
)

// maxAnswer bounds the body of an answer the client reads, per request it
// answers (an envelope's answer holds one for each of its requests). The
// largest valid answer (32 commands, each reading a 2 KiB value that JSON
// escapes up to sixfold, or reporting four windows) is far below it.
const maxAnswer = 1 << 20

// Client is a Sluice server reached over the signed RPC. It is an
// engine.Store and an engine.RequestStore, so engine.New(c) — and every
// package built on the engine — runs against the server unchanged, one RPC
// per request, concurrent requests coalesced into envelopes when the
// client is busy (see Config.Coalesce).
//
// A Client is safe for concurrent use. WithFamily and WithFairness return
// request-scoped views sharing its connections; a view never changes.
type Client struct {
	s *shared

	family    string
	source    string            // hashed, or UnknownSource; empty when unset
	tiers     map[string]string // hashed prefix tiers of source; never modified
	principal string            // hashed; empty when unset
	// viewErr is why this view cannot send (an invalid family), or nil.
	viewErr error
}

// shared is the state every view of a Client holds in common.
type shared struct {
	rpcURL, pingURL string
	signer          *wire.Signer
	pepper          []byte
	timeout         time.Duration
	http            *http.Client
	transport       *http.Transport // ours to close; nil for a caller's HTTPClient
	now             func() time.Time
	log             *slog.Logger
	families        []string
	rpcsURL         string     // the envelope endpoint
	co              *coalescer // gathers concurrent calls into envelopes; nil when off
	// off is the error every call answers when the client is off, or nil.
	off    error
	closed atomic.Bool
	// hasher hashes partition names, keys and identities with the pepper.
	hasher *keyhash.Hasher
}

var (
	_ engine.Store        = (*Client)(nil)
	_ engine.RequestStore = (*Client)(nil)
)

// New returns a Client configured by cfg. New never fails: when cfg does not
// validate, or cfg.Off is set, the client is off — every call answers an
// error wrapping ErrUnavailable with the reason, and Err reports it — so
// each caller applies its fail mode. A bad configuration is logged once, at
// error level.
func New(cfg Config) *Client {
	s := &shared{timeout: cfg.timeout(), now: cfg.Now, log: cfg.Logger}
	if s.now == nil {
		s.now = time.Now
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if err := cfg.Validate(); err != nil {
		reason := strings.ReplaceAll(err.Error(), "\n", "; ")
		s.off = fmt.Errorf("%w: client off: invalid configuration: %s", ErrUnavailable, reason)
		s.log.Error("sluice client off: every call fails until the configuration is fixed", "reason", reason)
	} else if cfg.Off {
		s.off = fmt.Errorf("%w: client off: backend set to off", ErrUnavailable)
		s.log.Info("sluice client off: backend set to off")
	}
	s.signer = wire.NewSigner([]byte(cfg.Secret))
	s.pepper = []byte(cfg.Pepper)
	if len(s.pepper) < wire.MinSecretLen {
		// The client is off, but Hash must still never expose what it is
		// given: key it with a random value no one else knows.
		s.pepper = make([]byte, 32)
		_, _ = rand.Read(s.pepper) // crypto/rand.Read never fails (Go ≥ 1.24)
	}
	s.hasher = keyhash.New(s.pepper)
	for _, f := range cfg.Families {
		if !slices.Contains(s.families, f) {
			s.families = append(s.families, f)
		}
	}
	if s.off == nil {
		origin := strings.TrimSuffix(cfg.URL, "/")
		s.rpcURL, s.rpcsURL, s.pingURL = origin+wire.PathRPC, origin+wire.PathRPCs, origin+wire.PathPing
		if k := cfg.coalesce(); k > 0 {
			s.co = newCoalescer(k)
		}
		s.http = cfg.HTTPClient
		if s.http == nil {
			u, _ := url.Parse(origin) // validated above
			s.transport = newTransport(s.timeout, cfg.HTTPVersion, u.Scheme == "https")
			s.http = &http.Client{
				Transport: s.transport,
				// A redirect would send the signed body elsewhere: the
				// answer is taken as it is, and a 3xx is a failure.
				CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
			}
		}
	}
	family := cfg.Family
	if family == "" {
		family = DefaultFamily
	}
	return &Client{s: s, family: family}
}

// newTransport returns the pooled transport of a client that was given no
// HTTPClient, speaking version. Over HTTP/1.1 Go's transport resends a POST
// only when none of it was written; over HTTP/2 it may also resend one the
// server or a proxy reset with a protocol error, which may have run. Either
// way a resend is the same signed bytes under the same operation id (every
// request carries one), so the server answers it from its replay record
// and charges nothing twice.
func newTransport(timeout time.Duration, version HTTPVersion, tls bool) *http.Transport {
	dialer := &net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}
	return &http.Transport{
		Proxy:                  http.ProxyFromEnvironment,
		DialContext:            dialer.DialContext,
		Protocols:              protocols(version, tls),
		MaxIdleConns:           256,
		MaxIdleConnsPerHost:    256,
		IdleConnTimeout:        90 * time.Second,
		TLSHandshakeTimeout:    timeout,
		MaxResponseHeaderBytes: 64 << 10,
		// The server never compresses its answers: asking for gzip
		// would only add a header to every request.
		DisableCompression: true,
		HTTP2: &http.HTTP2Config{
			// One connection carries every call: when it goes silent,
			// ping it, and drop it if the ping goes unanswered, rather
			// than let every call time out on it.
			SendPingTimeout: 5 * time.Second,
			PingTimeout:     5 * time.Second,
		},
	}
}

// protocols returns the HTTP versions a transport speaks for version: over
// TLS, HTTP/2 where the server offers it by ALPN and HTTP/1.1 otherwise,
// unless HTTP1 is chosen; over plain http, HTTP/1.1 unless HTTP2 is chosen
// (Go's transport speaks h2c only when HTTP/1.1 is off).
func protocols(version HTTPVersion, tls bool) *http.Protocols {
	var p http.Protocols
	switch {
	case version == HTTP1:
		p.SetHTTP1(true)
	case tls:
		p.SetHTTP1(true)
		p.SetHTTP2(true)
	case version == HTTP2:
		p.SetUnencryptedHTTP2(true)
	default:
		p.SetHTTP1(true)
	}
	return &p
}

// Err returns why the client is off (an error wrapping ErrUnavailable), or
// nil when it sends requests.
func (c *Client) Err() error { return c.s.off }

// Family returns the admission family this view sends.
func (c *Client) Family() string { return c.family }

// Assigned reports whether family is among the families this process has
// assigned to the server (Config.Families, SLUICE_FAMILIES). A caller whose
// family is not assigned keeps its own local store; one whose family is
// assigned uses this client and, while it is unavailable, its fail mode.
func (c *Client) Assigned(family string) bool { return slices.Contains(c.s.families, family) }

// WithFamily returns a view of c that sends family as its admission family.
// An invalid name (see Config.Family) makes every call of the view fail
// with engine.ErrInvalid without sending anything.
func (c *Client) WithFamily(family string) *Client {
	v := *c
	v.family, v.viewErr = family, nil
	if err := validateFamily(family); err != nil {
		v.viewErr = fmt.Errorf("%w: %w", engine.ErrInvalid, err)
	}
	return &v
}

// WithFairness returns a view of c whose requests carry the hashed source
// and principal identities that admission fairness charges.
//
// source is the caller's verified client address. It is reduced to its
// bucket (see SourceBucket) and hashed with PurposeSource, and its
// aggregate prefixes (see SourceTiers: the /24 of an IPv4 address, the /56
// and /48 of an IPv6 one) are each hashed with PurposeSourceTier, so the
// server can charge a whole network without ever receiving an address. A
// missing, unspecified or unparsable address is sent as UnknownSource,
// unhashed and without tiers: every such caller shares one bucket.
//
// principal is a verified account or token identity, hashed with
// PurposePrincipal; empty means none. Pass values from trusted adapters
// only, never from claims in a request body or header.
func (c *Client) WithFairness(source, principal string) *Client {
	v := *c
	id := c.s.identities(source, principal)
	v.source, v.tiers, v.principal = id.Source, id.SourceTiers, id.Principal
	return &v
}

// Do sends r as one RPC and returns the server's response: one StepResult
// per step, in order. r is validated first: a request outside the bounds
// fails with engine.ErrInvalid and sends nothing. The request's operation id
// is used when set — pass the same id to retry after an unknown outcome —
// and a fresh one otherwise. Do never retries on its own.
//
// Unlike engine.Engine.Do over a local store, an error returns no partial
// response: a step's error comes back from the server as a whole.
func (c *Client) Do(ctx context.Context, r *engine.Request) (*engine.Response, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	if err := c.ready(); err != nil {
		return nil, err
	}
	id := r.OperationID
	if id == "" {
		id = engine.NewOperationID()
	}
	sc := scratches.Get().(*keyhash.Scratch)
	wr := wire.Request{
		OperationID: id,
		Family:      c.family,
		Source:      c.source,
		SourceTiers: c.tiers,
		Principal:   c.principal,
		Mode:        r.Mode,
		Steps:       c.s.hasher.StepsIn(sc, r.Steps),
	}
	body, err := encodeRequest(&wr)
	sc.Reset() // the body holds what the hashed copy was for
	scratches.Put(sc)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, unavailable(err)
	}
	var resp engine.Response
	if err := c.s.do(ctx, id, body, &resp); err != nil {
		return nil, err
	}
	// The client asks for minimal answers: give back the window lists they
	// leave out. Only lists the minimal form may leave out are restored, and
	// a full answer has none missing, so this reads both forms alike, and
	// needs no Preference-Applied header (which a proxy might drop).
	resp.RestoreWindows(r.Steps)
	if err := checkShape(r.Mode, r.Steps, &resp); err != nil {
		return nil, unavailable(err)
	}
	return &resp, nil
}

// Apply runs one batch as a one-step request (see Do), writing its outcome
// into out and reusing out.Results' capacity. The request carries a fresh
// operation id when b has none. A batch with an operation id names its
// replay record by that id and its step (b.Step), but the server names a
// one-step request's record by its id and step 0: so the batch of step 0
// is sent with b.OperationID, and the batch of any other step with an id
// derived from b.OperationID and the step (32 hex digits of a SHA-256 of
// both). The steps of one operation applied one by one (by an engine over
// a store wrapping the client) thus keep records of their own, as on a
// local store, and a retry of the same batch replays its own.
func (c *Client) Apply(ctx context.Context, b *engine.Batch, out *engine.StepResult) error {
	r := engine.Request{OperationID: stepOperationID(b.OperationID, b.Step), Steps: []engine.Step{{Partition: b.Partition, Commands: b.Commands}}}
	resp, err := c.Do(ctx, &r)
	if err != nil {
		return err
	}
	st := &resp.Steps[0]
	out.Skipped, out.Replayed, out.Denied = st.Skipped, st.Replayed, st.Denied
	out.Results = append(out.Results[:0], st.Results...)
	return nil
}

// stepOperationID returns the operation id under which Client.Apply sends
// the batch of step step of the operation id: id itself for step 0 (and
// for an empty id), and otherwise 32 lowercase hex digits of the SHA-256 of
// a tag, id and the step, so that every step of one operation has an id of
// its own and the same step always the same one.
func stepOperationID(id string, step int) string {
	if id == "" || step == 0 {
		return id
	}
	h := sha256.New()
	h.Write([]byte("sluice-step\x00"))
	h.Write([]byte(id))
	h.Write(binary.BigEndian.AppendUint64([]byte{0}, uint64(step)))
	var sum [sha256.Size]byte
	return hex.EncodeToString(h.Sum(sum[:0])[:16])
}

var _ engine.RemoteStore = (*Client)(nil)

// Remote marks the client as an engine.RemoteStore: every request is a
// round trip to the server.
func (*Client) Remote() {}

// Close releases the client's idle connections. Later calls, through any
// view, fail with engine.ErrClosed. Close is idempotent.
func (c *Client) Close() error {
	if !c.s.closed.Swap(true) && c.s.transport != nil {
		c.s.transport.CloseIdleConnections()
	}
	return nil
}

// Ping asks the server for its protocol version. It fails with
// ErrUnavailable when the server cannot be reached or speaks another
// protocol version than this client (wire.ProtocolVersion).
func (c *Client) Ping(ctx context.Context) (wire.Ping, error) {
	if err := c.ready(); err != nil {
		return wire.Ping{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.s.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.s.pingURL, nil)
	if err != nil {
		return wire.Ping{}, unavailable(err)
	}
	status, body, err := c.s.roundTrip(req, nil, maxAnswer)
	if err != nil {
		return wire.Ping{}, err
	}
	if status != http.StatusOK {
		return wire.Ping{}, answerError(status, body)
	}
	var p wire.Ping
	if err := json.Unmarshal(body, &p); err != nil {
		return wire.Ping{}, unavailable(fmt.Errorf("undecodable ping answer: %w", err))
	}
	if p.Protocol != wire.ProtocolVersion {
		return p, unavailable(fmt.Errorf("server speaks protocol %d, this client %d", p.Protocol, wire.ProtocolVersion))
	}
	if c.s.co != nil && !slices.Contains(p.Features, wire.FeatureRPCs) {
		c.s.co.single.Store(true) // a server without envelopes
	}
	return p, nil
}

// ready returns why this view cannot send, or nil.
func (c *Client) ready() error {
	switch {
	case c.viewErr != nil:
		return c.viewErr
	case c.s.closed.Load():
		return engine.ErrClosed
	}
	return c.s.off
}

// encodeRequest returns the body of the RPC wr, refusing one over the
// bound with an error wrapping engine.ErrInvalid.
func encodeRequest(wr *wire.Request) ([]byte, error) {
	buf := getBuffer()
	enc, err := wire.AppendRequest((*buf)[:0], wr)
	if err != nil {
		putBuffer(buf)
		return nil, fmt.Errorf("%w: encoding the request: %w", engine.ErrInvalid, err)
	}
	// The transport may still read a request body after Do returns (and
	// reads it again to resend a request no byte of which was written), so
	// the body is a copy of its own rather than the pooled buffer.
	body := bytes.Clone(enc)
	*buf = enc[:0]
	putBuffer(buf)
	if len(body) > wire.MaxBody {
		return nil, fmt.Errorf("%w: request body of %d bytes (max %d)", engine.ErrInvalid, len(body), wire.MaxBody)
	}
	return body, nil
}

// The request's Content-Type, assigned to the header map directly, as are
// wire's headers: the names are in canonical form, and net/http never
// modifies a value slice, so one serves every request.
const headerContentType = "Content-Type"

var jsonContentType = []string{"application/json"}

// preferMinimal is the value of the Prefer header of every RPC and envelope.
var preferMinimal = []string{wire.PreferMinimal}

// roundTrip sends req once and reads its answer, of at most limit bytes,
// appending it to dst.
func (s *shared) roundTrip(req *http.Request, dst []byte, limit int) (status int, body []byte, err error) {
	resp, err := s.http.Do(req)
	if err != nil {
		return 0, dst, unavailable(err)
	}
	defer resp.Body.Close()
	body, err = wire.AppendBody(dst, resp.Body, limit)
	if err != nil {
		return 0, body, unavailable(fmt.Errorf("reading the %d answer: %w", resp.StatusCode, err))
	}
	return resp.StatusCode, body, nil
}

// buffers recycles the buffers a call encodes its request into and reads
// its answer into (the answer is decoded into fresh values, so nothing
// keeps the buffer). One that grew past maxPooledBuffer is dropped.
var buffers = sync.Pool{New: func() any {
	b := make([]byte, 0, 4<<10)
	return &b
}}

const maxPooledBuffer = 64 << 10

// scratches recycles the arrays a call's hashed copy of its steps is made
// in (keyhash.Scratch): the copy lives only until its request is encoded.
var scratches = sync.Pool{New: func() any { return new(keyhash.Scratch) }}

func getBuffer() *[]byte { return buffers.Get().(*[]byte) }

func putBuffer(b *[]byte) {
	if cap(*b) <= maxPooledBuffer {
		*b = (*b)[:0]
		buffers.Put(b)
	}
}

// checkShape verifies that an answer has one result per step sent and one
// per command of every step that ran, each with one window result per
// window or budget of its command (none for other commands), so callers
// may index them and an answer to another request is unlikely to pass; and
// that it skips exactly the steps mode skips: those after the first step
// holding a denial in a sequential request, and none in mode all.
func checkShape(mode engine.Mode, steps []engine.Step, resp *engine.Response) error {
	if len(resp.Steps) != len(steps) {
		return fmt.Errorf("answer holds %d steps for %d sent", len(resp.Steps), len(steps))
	}
	denied := false
	for i := range steps {
		st := &resp.Steps[i]
		if skip := denied && mode != engine.All; st.Skipped != skip {
			return fmt.Errorf("answer skipped %v for step %d, want %v", st.Skipped, i, skip)
		}
		if st.Skipped {
			if len(st.Results) != 0 {
				return fmt.Errorf("answer holds results for skipped step %d", i)
			}
			continue
		}
		cmds := steps[i].Commands
		if len(st.Results) != len(cmds) {
			return fmt.Errorf("answer holds %d results for the %d commands of step %d", len(st.Results), len(cmds), i)
		}
		held := false
		for j := range st.Results {
			held = held || !st.Results[j].Allowed
		}
		if st.Denied != held {
			return fmt.Errorf("answer marks step %d denied %v, its results %v", i, st.Denied, held)
		}
		denied = denied || held
		for j := range cmds {
			want := 0 // every other command reports no windows
			switch cmds[j].Op {
			case engine.OpHit:
				want = len(cmds[j].Windows)
			case engine.OpReserve:
				want = len(cmds[j].Budgets)
			}
			if got := len(st.Results[j].Windows); got != want {
				return fmt.Errorf("answer holds %d window results for the %d of step %d command %d", got, want, i, j)
			}
		}
	}
	return nil
}

// The purposes with which Client hashes what it sends. Hash a value with the
// same purpose to find it on the server (for instance an identity to reset).
const (
	PurposePartition  = keyhash.PurposePartition // partition names
	PurposeKey        = keyhash.PurposeKey       // window, kv, budget, receipt, gate and pace keys
	PurposeSource     = "source"                 // fairness source buckets (see SourceBucket)
	PurposeSourceTier = "source-tier"            // fairness prefix tiers (see SourceTiers and TierIdentity)
	PurposePrincipal  = "principal"              // fairness principals
)

// Hash returns the name the client gives value for purpose: the
// HMAC-SHA256, keyed with the pepper, of purpose, a zero byte and value.
// Under a pepper in the compact form (one beginning with CompactPrefix, as
// every NewPepper does) the name is the MAC's first 16 bytes in unpadded
// base64url, 22 characters; under any other pepper it is the whole MAC in
// lowercase hex, 64 characters. The client sends every partition name and
// key hashed this way, so raw identifiers never leave the process; use Hash
// to build identities of your own (log fields, correlation ids) and to find
// what the server holds for a value. Distinct purposes keep equal values
// apart; a purpose must not contain a zero byte.
func (c *Client) Hash(purpose, value string) string { return c.s.hash(purpose, value) }

// CompactPrefix begins a pepper in the compact form, whose names are 22
// characters rather than 64 (see Client.Hash). The prefix is part of the
// pepper: the whole pepper keys the HMAC.
const CompactPrefix = keyhash.CompactPrefix

// NewPepper returns a fresh random pepper in the compact form:
// CompactPrefix followed by 32 random bytes in unpadded base64url. It is
// what sluice serve writes to a new data directory; use it to make a
// pepper of your own for a secret store.
func NewPepper() string { return keyhash.NewPepper() }

func (s *shared) hash(purpose, value string) string { return s.hasher.Hash(purpose, value) }
