package wire

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
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

func writeSigned(w io.Writer, timestamp int64, method, path string, body []byte) {
	var buf [64]byte
	b := append(buf[:0], signatureTag...)
	b = append(b, '\n')
	b = strconv.AppendInt(b, timestamp, 10)
	b = append(b, '\n')
	w.Write(b)
	io.WriteString(w, method)
	w.Write([]byte{'\n'})
	io.WriteString(w, path)
	w.Write([]byte{'\n'})
	w.Write(body)
}

// Verifier checks signatures against a list of secrets: the current one
// first, then the previous one during a rotation.
type Verifier struct {
	secrets [][]byte
	skew    time.Duration
}

// NewVerifier returns a Verifier accepting any of secrets within MaxSkew.
// The caller validates the secrets (length, distinctness) beforehand.
func NewVerifier(secrets [][]byte) *Verifier {
	return &Verifier{secrets: secrets, skew: MaxSkew}
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
	if err != nil {
		return fmt.Errorf("%w: timestamp %q is not Unix seconds", ErrMissingSignature, truncate(timestampHeader))
	}
	hexSig, ok := strings.CutPrefix(signatureHeader, signaturePrefix)
	if !ok || len(hexSig) != 2*sha256.Size {
		return fmt.Errorf("%w: want %s followed by %d hex digits", ErrBadSignature, signaturePrefix, 2*sha256.Size)
	}
	var got [sha256.Size]byte
	if _, err := hex.Decode(got[:], []byte(hexSig)); err != nil {
		return fmt.Errorf("%w: not hex", ErrBadSignature)
	}
	matched := 0
	for _, secret := range v.secrets {
		mac := hmac.New(sha256.New, secret)
		writeSigned(mac, ts, method, path, body)
		matched |= boolInt(hmac.Equal(mac.Sum(nil), got[:]))
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
	body, err := io.ReadAll(io.LimitReader(r, int64(max)+1))
	if err != nil {
		return nil, err
	}
	if len(body) > max {
		return nil, ErrBodyTooLarge
	}
	return body, nil
}
