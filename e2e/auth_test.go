package e2e

import (
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/wire"
)

const hour = int64(time.Hour / time.Millisecond)

// TestSignatureRejectedWithZeroWork sends requests that each carry a
// mutation and fail authentication, over HTTP/1.1 and h2c, and checks that
// each is answered 401, spent nothing of its family's budget, and that its
// mutation never happened.
func TestSignatureRejectedWithZeroWork(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverOptions{})
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) { checkSignatureRejected(t, s, p.client, p.major) })
	}
}

func checkSignatureRejected(t *testing.T, s *server, hc *http.Client, major int) {
	secret := s.secret()
	now := time.Now().Unix()
	send := func(t testing.TB, req *http.Request) answer { return sendWith(t, hc, major, req) }
	signedPost := func(t testing.TB, baseURL, secret string, ts int64, body []byte) answer {
		return send(t, signedRequest(t, baseURL, secret, ts, body))
	}

	for _, tc := range []struct {
		name string
		send func(body []byte) answer
	}{
		{"no signature headers", func(body []byte) answer {
			req := signedRequest(t, s.URL, secret, now, body)
			req.Header.Del(wire.HeaderSignature)
			req.Header.Del(wire.HeaderTimestamp)
			return send(t, req)
		}},
		{"no signature", func(body []byte) answer {
			req := signedRequest(t, s.URL, secret, now, body)
			req.Header.Del(wire.HeaderSignature)
			return send(t, req)
		}},
		{"no timestamp", func(body []byte) answer {
			req := signedRequest(t, s.URL, secret, now, body)
			req.Header.Del(wire.HeaderTimestamp)
			return send(t, req)
		}},
		{"another secret", func(body []byte) answer {
			return signedPost(t, s.URL, strings.Repeat("x", 64), now, body)
		}},
		{"signed over another body", func(body []byte) answer {
			req := signedRequest(t, s.URL, secret, now, body)
			req.Header.Set(wire.HeaderSignature, wire.Sign([]byte(secret), now, http.MethodPost, wire.PathRPC, append(body, ' ')))
			return send(t, req)
		}},
		{"signed for another path", func(body []byte) answer {
			req := signedRequest(t, s.URL, secret, now, body)
			req.Header.Set(wire.HeaderSignature, wire.Sign([]byte(secret), now, http.MethodPost, "/v1/other", body))
			return send(t, req)
		}},
		{"signed at another timestamp", func(body []byte) answer {
			req := signedRequest(t, s.URL, secret, now, body)
			req.Header.Set(wire.HeaderSignature, wire.Sign([]byte(secret), now-1, http.MethodPost, wire.PathRPC, body))
			return send(t, req)
		}},
		{"uppercase hex", func(body []byte) answer {
			req := signedRequest(t, s.URL, secret, now, body)
			req.Header.Set(wire.HeaderSignature, strings.ToUpper(req.Header.Get(wire.HeaderSignature)))
			return send(t, req)
		}},
		{"truncated signature", func(body []byte) answer {
			req := signedRequest(t, s.URL, secret, now, body)
			sig := req.Header.Get(wire.HeaderSignature)
			req.Header.Set(wire.HeaderSignature, sig[:len(sig)-2])
			return send(t, req)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := unique(t, "probe")
			before := s.spent(t, admission.DefaultFamily)
			a := tc.send(encode(t, request(step("auth", engine.Incr(key, 1, hour)))))
			a.problem(t, wire.CodeUnauthorized)
			if spent := s.spent(t, admission.DefaultFamily) - before; spent != 0 {
				t.Errorf("a refused request spent %d of its family's budget", spent)
			}
			s.mustBeAbsent(t, "auth", key)
		})
	}
}

// TestBadMACBeforeJSON checks that authentication comes before parsing,
// over HTTP/1.1 and h2c: a malformed body with a bad signature is 401, and
// only a correctly signed one reaches the parser and gets 400.
func TestBadMACBeforeJSON(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverOptions{})
	now := time.Now().Unix()
	for _, p := range protocols {
		for _, body := range []string{`{"operationId":`, `not json at all`, `{"unknown":1}`, ``} {
			sendWith(t, p.client, p.major, signedRequest(t, s.URL, strings.Repeat("x", 64), now, []byte(body))).problem(t, wire.CodeUnauthorized)
			sendWith(t, p.client, p.major, signedRequest(t, s.URL, s.secret(), now, []byte(body))).problem(t, wire.CodeInvalid)
		}
	}
}

// TestSecretRotation runs a server with a current and a previous secret,
// from the environment and from the secret file, and checks that both
// secrets are accepted and no other.
func TestSecretRotation(t *testing.T) {
	t.Parallel()
	current, previous := strings.Repeat("c", 40), strings.Repeat("p", 40)
	check := func(t *testing.T, s *server) {
		for _, secret := range []string{current, previous} {
			key := unique(t, "rot")
			a := signedPost(t, s.URL, secret, time.Now().Unix(), encode(t, request(step("rotation", engine.Incr(key, 1, hour)))))
			if got := a.response(t).Steps[0].Results[0].Int; got != 1 {
				t.Errorf("incr answered %d, want 1", got)
			}
		}
		key := unique(t, "rot")
		signedPost(t, s.URL, strings.Repeat("o", 40), time.Now().Unix(), encode(t, request(step("rotation", engine.Incr(key, 1, hour))))).
			problem(t, wire.CodeUnauthorized)
		s.mustBeAbsent(t, "rotation", key)
	}
	t.Run("environment", func(t *testing.T) {
		t.Parallel()
		check(t, startServer(t, serverOptions{Env: []string{"SLUICE_SECRETS=" + current + "," + previous}, Secret: current}))
	})
	t.Run("secret file", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		writeFile(t, dir+"/sluice-data", "secret", current+"\n"+previous+"\n")
		check(t, startServer(t, serverOptions{Dir: dir}))
	})
}

// TestSkew checks the ±60 s window on both sides: ±59 s passes, ±61 s is
// refused with no effect. Timestamps are whole seconds, so each is rounded
// in the direction that keeps it clear of the boundary however far into
// the current second the test runs.
func TestSkew(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverOptions{})
	for _, tc := range []struct {
		name   string
		offset float64 // seconds from now
		round  func(float64) float64
		ok     bool
	}{
		{"59 s ahead", 59, math.Floor, true},
		{"59 s behind", -59, math.Ceil, true},
		{"61 s ahead", 61, math.Ceil, false},
		{"61 s behind", -61, math.Floor, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := unique(t, "skew")
			body := encode(t, request(step("skew", engine.Incr(key, 1, hour))))
			var a answer
			for attempt := 0; ; attempt++ {
				ts := int64(tc.round(float64(time.Now().UnixNano())/1e9 + tc.offset))
				a = signedPost(t, s.URL, s.secret(), ts, body)
				// The rounding leaves at least a second of margin for the
				// request to reach the server. An accepted case refused
				// anyway can only have spent longer than that in transit;
				// the refusal had no effect, so it is sent again, at most
				// twice more.
				if !tc.ok || a.Status != http.StatusUnauthorized || attempt == 2 {
					break
				}
				t.Logf("attempt %d refused; sending again", attempt)
			}
			if tc.ok {
				a.response(t)
				if v, _ := s.get(t, "skew", key); v != "1" {
					t.Errorf("counter %q after an accepted request, want 1", v)
				}
				return
			}
			a.problem(t, wire.CodeUnauthorized)
			s.mustBeAbsent(t, "skew", key)
		})
	}
}
