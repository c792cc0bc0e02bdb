package wire

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"
)

// signatureTag versions the signed string and prefixes the header value.
const (
	signatureTag    = "sluice-v1"
	signaturePrefix = "v1="
)

// Signature errors. The server answers each with 401.
var (
	ErrMissingSignature = errors.New("wire: missing signature or timestamp")
	ErrBadSignature     = errors.New("wire: signature does not match")
	ErrStaleSignature   = errors.New("wire: timestamp outside the allowed skew")
	// ErrBodyTooLarge is returned by ReadBody for a body over the bound.
	ErrBodyTooLarge = errors.New("wire: body too large")
)

// Sign returns the X-Sluice-Signature value for a request: "v1=" and the
// hex HMAC-SHA256 under secret of
//
//	"sluice-v1\n" + timestamp + "\n" + METHOD + "\n" + path + "\n" + body
//
// where timestamp is the decimal Unix seconds sent in X-Sluice-Timestamp and
// path is the request's URL path (no query).
func Sign(secret []byte, timestamp int64, method, path string, body []byte) string {
	mac := hmac.New(sha256.New, secret)
	writeSigned(mac, timestamp, method, path, body)
	return signaturePrefix + hex.EncodeToString(mac.Sum(nil))
}

// Signer signs requests with one secret, as Sign does, reusing its keyed
// MACs: keying an HMAC costs two SHA-256 blocks and several allocations,
// resetting a keyed one only a copy. A Signer is safe for concurrent use.
type Signer struct {
	macs macPool
}

// NewSigner returns a Signer for secret. It keeps secret, which the caller
// must not modify afterwards.
func NewSigner(secret []byte) *Signer {
	return &Signer{macs: newMACPool(secret)}
}

// Sign returns the X-Sluice-Signature value of a request (see Sign).
func (s *Signer) Sign(timestamp int64, method, path string, body []byte) string {
	var sum [sha256.Size]byte
	s.macs.sum(sum[:0], timestamp, method, path, body)
	var out [len(signaturePrefix) + 2*sha256.Size]byte
	copy(out[:], signaturePrefix)
	hex.Encode(out[len(signaturePrefix):], sum[:])
	return string(out[:])
}

// macPool recycles HMAC-SHA256 states keyed with one secret.
type macPool struct {
	pool *sync.Pool
}

// pooledMAC is a keyed MAC and the buffer the heads of its signed strings
// are written from, which would otherwise escape to the heap on every call.
type pooledMAC struct {
	mac  hash.Hash
	head []byte
}

func newMACPool(secret []byte) macPool {
	return macPool{pool: &sync.Pool{New: func() any {
		return &pooledMAC{mac: hmac.New(sha256.New, secret), head: make([]byte, 0, 128)}
	}}}
}

// sum appends to dst the MAC of the signed string of a request.
func (p macPool) sum(dst []byte, timestamp int64, method, path string, body []byte) []byte {
	m := p.pool.Get().(*pooledMAC)
	m.mac.Reset()
	m.head = appendSignedHead(m.head[:0], timestamp, method, path)
	m.mac.Write(m.head)
	m.mac.Write(body)
	dst = m.mac.Sum(dst)
	p.pool.Put(m)
	return dst
}

func writeSigned(w io.Writer, timestamp int64, method, path string, body []byte) {
	w.Write(appendSignedHead(nil, timestamp, method, path))
	w.Write(body)
}

// appendSignedHead appends what the signed string holds before the body:
// the tag, the timestamp, the method and the path, each followed by "\n".
func appendSignedHead(b []byte, timestamp int64, method, path string) []byte {
	b = append(b, signatureTag...)
	b = append(b, '\n')
	b = strconv.AppendInt(b, timestamp, 10)
	b = append(b, '\n')
	b = append(b, method...)
	b = append(b, '\n')
	b = append(b, path...)
	return append(b, '\n')
}

// Verifier checks signatures against a list of secrets: the current one
// first, then the previous one during a rotation.
//
// A Verifier is safe for concurrent use. It keeps a pool of keyed MACs per
// secret (see Signer).
type Verifier struct {
	macs []macPool
	skew time.Duration
}

// NewVerifier returns a Verifier accepting any of secrets within MaxSkew.
// The caller validates the secrets (length, distinctness) beforehand, and
// does not modify them afterwards.
func NewVerifier(secrets [][]byte) *Verifier {
	v := &Verifier{skew: MaxSkew}
	for _, s := range secrets {
		v.macs = append(v.macs, newMACPool(s))
	}
	return v
}

// Verify checks a request's timestamp and signature headers against its
// method, path and raw body at the server's time now. The comparison is
// constant-time for each secret, and every secret is tried so the time taken
// does not reveal which matched.
func (v *Verifier) Verify(now time.Time, timestampHeader, signatureHeader, method, path string, body []byte) error {
	if timestampHeader == "" || signatureHeader == "" {
		return ErrMissingSignature
	}
	ts, err := strconv.ParseInt(timestampHeader, 10, 64)
	// The MAC covers the timestamp as the signer formats it, so a header
	// spelling the number otherwise (a sign, leading zeros) is not the
	// one signed: it is refused rather than read as that number.
	var canonical [20]byte
	if err != nil || string(strconv.AppendInt(canonical[:0], ts, 10)) != timestampHeader {
		return fmt.Errorf("%w: timestamp %q is not Unix seconds", ErrMissingSignature, truncate(timestampHeader))
	}
	hexSig, ok := strings.CutPrefix(signatureHeader, signaturePrefix)
	if !ok || len(hexSig) != 2*sha256.Size {
		return fmt.Errorf("%w: want %s followed by %d hex digits", ErrBadSignature, signaturePrefix, 2*sha256.Size)
	}
	var digits [2 * sha256.Size]byte // a copy, so the conversion does not allocate
	copy(digits[:], hexSig)
	// hex.Decode takes uppercase digits too: another spelling of the MAC,
	// refused as another spelling of the timestamp is.
	for _, c := range digits {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return fmt.Errorf("%w: want %d lowercase hex digits", ErrBadSignature, 2*sha256.Size)
		}
	}
	var got [sha256.Size]byte
	if _, err := hex.Decode(got[:], digits[:]); err != nil {
		return fmt.Errorf("%w: not hex", ErrBadSignature)
	}
	matched := 0
	var sum [sha256.Size]byte
	for _, p := range v.macs {
		matched |= boolInt(hmac.Equal(p.sum(sum[:0], ts, method, path, body), got[:]))
	}
	if matched == 0 {
		return ErrBadSignature
	}
	// The skew is checked after the MAC so an unauthenticated caller learns
	// nothing about the server's clock.
	if d := now.Sub(time.Unix(ts, 0)); d > v.skew || d < -v.skew {
		return ErrStaleSignature
	}
	return nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func truncate(s string) string {
	if len(s) > 32 {
		return s[:32] + "…"
	}
	return s
}

// ReadBody reads at most max bytes of r. It reads max+1 bytes at most, and
// returns ErrBodyTooLarge if there was more, so a lying Content-Length or an
// endless chunked body costs at most max+1 bytes.
func ReadBody(r io.Reader, max int) ([]byte, error) {
	body, err := AppendBody(nil, r, max)
	if err != nil {
		return nil, err
	}
	return body, nil
}

// AppendBody is ReadBody appending to dst, so a caller can read into a
// buffer it reuses: give it one with room for max+1 bytes and it allocates
// nothing. It returns dst extended by the body, or an error.
func AppendBody(dst []byte, r io.Reader, max int) ([]byte, error) {
	start := len(dst)
	end := start + max + 1 // reading stops at the first byte over the bound
	for {
		if len(dst) == cap(dst) {
			dst = append(dst, 0)[:len(dst)]
		}
		n, err := r.Read(dst[len(dst):min(cap(dst), end)])
		dst = dst[:len(dst)+n]
		if len(dst) == end {
			return dst[:start], ErrBodyTooLarge
		}
		if err == io.EOF {
			return dst, nil
		}
		if err != nil {
			return dst[:start], err
		}
	}
}
