package wire

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// countingReader yields n bytes and counts what was read of them.
type countingReader struct {
	left, read int
}

func (r *countingReader) Read(p []byte) (int, error) {
	if r.left == 0 {
		return 0, io.EOF
	}
	n := min(len(p), r.left)
	r.left -= n
	r.read += n
	return n, nil
}

// TestAppendBody reads bodies at, under and over the bound into buffers of
// several sizes: a body within the bound is appended whole, and a larger
// one is refused after at most max+1 bytes were read.
func TestAppendBody(t *testing.T) {
	const max = 1000
	for _, room := range []int{0, 10, max, max + 1, 4 * max} {
		for _, size := range []int{0, 1, max - 1, max, max + 1, 100 * max} {
			prefix := []byte("kept")
			dst := append(make([]byte, 0, len(prefix)+room), prefix...)
			r := &countingReader{left: size}
			got, err := AppendBody(dst, r, max)
			if r.read > max+1 {
				t.Errorf("room %d, body %d: read %d bytes, want at most %d", room, size, r.read, max+1)
			}
			if !bytes.HasPrefix(got, prefix) {
				t.Errorf("room %d, body %d: the prefix was lost", room, size)
			}
			if size > max {
				if !errors.Is(err, ErrBodyTooLarge) {
					t.Errorf("room %d, body %d: error %v, want ErrBodyTooLarge", room, size, err)
				}
				continue
			}
			if err != nil || len(got) != len(prefix)+size {
				t.Errorf("room %d, body %d: %d bytes, %v", room, size, len(got)-len(prefix), err)
			}
		}
	}
	failing := errors.New("broken chunked encoding")
	if _, err := AppendBody(nil, io.MultiReader(strings.NewReader("{"), errReader{failing}), max); !errors.Is(err, failing) {
		t.Errorf("a failing read: %v", err)
	}
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

// TestSignerAndVerifier checks that a Signer signs as Sign does, from
// concurrent goroutines, and that a Verifier with a rotation accepts the
// current and the previous secret and no other.
func TestSignerAndVerifier(t *testing.T) {
	current, previous := []byte(strings.Repeat("c", 32)), []byte(strings.Repeat("p", 40))
	now := time.Unix(1_767_225_600, 0)
	body := []byte(`{"operationId":"o"}`)
	v := NewVerifier([][]byte{current, previous})
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 50 {
				secret := current
				if (i+j)%2 == 1 {
					secret = previous
				}
				ts := now.Unix() + int64(j%3)
				sig := NewSigner(secret).Sign(ts, "POST", PathRPC, body)
				if want := Sign(secret, ts, "POST", PathRPC, body); sig != want {
					t.Errorf("Signer.Sign = %s, Sign = %s", sig, want)
					return
				}
				if err := v.Verify(now, "1767225600", Sign(secret, now.Unix(), "POST", PathRPC, body), "POST", PathRPC, body); err != nil {
					t.Errorf("Verify: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	other := Sign([]byte(strings.Repeat("o", 32)), now.Unix(), "POST", PathRPC, body)
	if err := v.Verify(now, "1767225600", other, "POST", PathRPC, body); !errors.Is(err, ErrBadSignature) {
		t.Errorf("another secret: %v", err)
	}
	if err := v.Verify(now, "1767225600", Sign(current, now.Unix(), "POST", PathRPC, body), "POST", "/v1/other", body); !errors.Is(err, ErrBadSignature) {
		t.Errorf("another path: %v", err)
	}
	long := strings.Repeat("/p", 100) // a head longer than the pooled buffer's first size
	if got, want := NewSigner(current).Sign(1, "POST", long, body), Sign(current, 1, "POST", long, body); got != want {
		t.Errorf("a long path: Signer.Sign = %s, Sign = %s", got, want)
	}
}

// TestWorkedExample checks the signature of docs/protocol.md's example.
func TestWorkedExample(t *testing.T) {
	secret := []byte("example-secret-0123456789abcdef-0123456789")
	body := []byte(`{"operationId":"7c0e1f4d2a9b4c3e8f6a5b4c3d2e1f00","family":"api","steps":[{"partition":"user:42","commands":[{"op":"win.hit","windows":[{"key":"per-minute","kind":"sliding","limit":100,"windowMs":60000}],"cost":1}]}]}`)
	const want = "v1=39f35ce142f0f87cc9d2f57ecb146f198962afa9dd910360fa9fbf52953c84e9"
	if got := NewSigner(secret).Sign(1767225600, "POST", PathRPC, body); got != want {
		t.Errorf("Signer.Sign = %s, want %s", got, want)
	}
	if got := Sign(secret, 1767225600, "POST", PathRPC, body); got != want {
		t.Errorf("Sign = %s, want %s", got, want)
	}
}

// TestVerifyTimestampAsSent checks that the timestamp header is what the
// MAC covers, byte for byte: a header in another spelling of the same
// number (a sign, leading zeros) is refused whether the MAC covers it as
// sent or as the number, and the skew holds at exactly 60 s either way.
func TestVerifyTimestampAsSent(t *testing.T) {
	secret := []byte(strings.Repeat("s", 32))
	body := []byte(`{"operationId":"o"}`)
	now := time.Unix(1_767_225_600, 0)
	v := NewVerifier([][]byte{secret})
	for _, header := range []string{"+1767225600", "01767225600", "-0", "00"} {
		asSent := hmac.New(sha256.New, secret)
		asSent.Write([]byte("sluice-v1\n" + header + "\nPOST\n" + PathRPC + "\n"))
		asSent.Write(body)
		ts, _ := strconv.ParseInt(header, 10, 64)
		for name, sig := range map[string]string{
			"as sent":       signaturePrefix + hex.EncodeToString(asSent.Sum(nil)),
			"as the number": Sign(secret, ts, "POST", PathRPC, body),
		} {
			if err := v.Verify(time.Unix(ts, 0), header, sig, "POST", PathRPC, body); err == nil {
				t.Errorf("timestamp %q signed %s: accepted", header, name)
			}
		}
	}
	for _, tc := range []struct {
		skew int64
		ok   bool
	}{{-61, false}, {-60, true}, {0, true}, {60, true}, {61, false}} {
		ts := now.Unix() + tc.skew
		err := v.Verify(now, strconv.FormatInt(ts, 10), Sign(secret, ts, "POST", PathRPC, body), "POST", PathRPC, body)
		if ok := err == nil; ok != tc.ok || !ok && !errors.Is(err, ErrStaleSignature) {
			t.Errorf("skew %d s: %v", tc.skew, err)
		}
	}
}

// TestVerifySignatureAsWritten checks that the signature header is "v1="
// and 64 lowercase hex digits, as documented: the same MAC in uppercase or
// mixed-case digits is another spelling, refused as the timestamp's are.
func TestVerifySignatureAsWritten(t *testing.T) {
	secret := []byte(strings.Repeat("s", 32))
	body := []byte(`{"operationId":"o"}`)
	now := time.Unix(1_767_225_600, 0)
	v := NewVerifier([][]byte{secret})
	sig := Sign(secret, now.Unix(), "POST", PathRPC, body)
	if err := v.Verify(now, "1767225600", sig, "POST", PathRPC, body); err != nil {
		t.Fatalf("the signature as written: %v", err)
	}
	digits := sig[len(signaturePrefix):]
	i := strings.IndexAny(digits, "abcdef")
	if i < 0 {
		t.Fatal("the example signature has no letter digit")
	}
	for name, other := range map[string]string{
		"uppercase":  signaturePrefix + strings.ToUpper(digits),
		"one letter": signaturePrefix + digits[:i] + strings.ToUpper(digits[i:i+1]) + digits[i+1:],
		"V1=":        "V1=" + digits,
	} {
		if err := v.Verify(now, "1767225600", other, "POST", PathRPC, body); !errors.Is(err, ErrBadSignature) {
			t.Errorf("%s %q: %v, want ErrBadSignature", name, other, err)
		}
	}
}
