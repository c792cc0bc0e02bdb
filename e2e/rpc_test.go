package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/wire"
)

// httpClient sends every request of the tests. Its timeout is a failure
// bound only.
var httpClient = &http.Client{
	Timeout: 30 * time.Second,
	Transport: &http.Transport{
		MaxIdleConns:        128,
		MaxIdleConnsPerHost: 128,
		IdleConnTimeout:     10 * time.Second,
	},
}

// h2cClient speaks HTTP/2 with prior knowledge (h2c), as a client
// configured with client.HTTP2 does over plain http.
var h2cClient = &http.Client{
	Timeout:   30 * time.Second,
	Transport: &http.Transport{Protocols: h2cOnly(), IdleConnTimeout: 10 * time.Second},
}

func h2cOnly() *http.Protocols {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return &p
}

// protocols are the two ways a client reaches a plain-http server, for the
// tests that must hold over both.
var protocols = []struct {
	name   string
	client *http.Client
	major  int
}{{"http1", httpClient, 1}, {"h2c", h2cClient, 2}}

// answer is a server's answer, read whole.
type answer struct {
	Status int
	Header http.Header
	Body   []byte
	// ProtoMajor is the HTTP major version the answer came in.
	ProtoMajor int
}

// response decodes a 200 answer.
func (a answer) response(t testing.TB) *engine.Response {
	t.Helper()
	if a.Status != http.StatusOK {
		t.Fatalf("answer %d, want 200: %s", a.Status, a.Body)
	}
	var r engine.Response
	if err := json.Unmarshal(a.Body, &r); err != nil {
		t.Fatalf("undecodable response %q: %v", a.Body, err)
	}
	return &r
}

// problem checks that a is an error answer with code and its status, and
// returns its problem document.
func (a answer) problem(t testing.TB, code wire.Code) wire.Problem {
	t.Helper()
	var p wire.Problem
	if err := json.Unmarshal(a.Body, &p); err != nil {
		t.Fatalf("answer %d is not a problem document: %q", a.Status, a.Body)
	}
	if a.Status != code.Status() || p.Code != code || p.Status != a.Status {
		t.Fatalf("answer %d %s (%s), want %d %s", a.Status, p.Code, p.Reason, code.Status(), code)
	}
	if ct := a.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("problem Content-Type %q", ct)
	}
	return p
}

// send sends req and reads the answer.
func send(t testing.TB, req *http.Request) answer {
	t.Helper()
	a, err := trySend(httpClient, req)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// trySend sends req with hc and reads the answer. Unlike send, it may be
// called from any goroutine.
func trySend(hc *http.Client, req *http.Request) (answer, error) {
	resp, err := hc.Do(req)
	if err != nil {
		return answer{}, fmt.Errorf("%s %s: %w", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return answer{}, fmt.Errorf("reading the answer: %w", err)
	}
	return answer{Status: resp.StatusCode, Header: resp.Header, Body: body, ProtoMajor: resp.ProtoMajor}, nil
}

// sendWith sends req with hc and reads the answer, checking that it came in
// HTTP major version major.
func sendWith(t testing.TB, hc *http.Client, major int, req *http.Request) answer {
	t.Helper()
	a, err := trySend(hc, req)
	if err != nil {
		t.Fatal(err)
	}
	if a.ProtoMajor != major {
		t.Fatalf("an answer over HTTP/%d, want HTTP/%d", a.ProtoMajor, major)
	}
	return a
}

// signedPost posts body to the RPC endpoint of baseURL signed with secret at
// Unix time ts, using wire.Sign as every client does.
func signedPost(t testing.TB, baseURL, secret string, ts int64, body []byte) answer {
	t.Helper()
	return send(t, signedRequest(t, baseURL, secret, ts, body))
}

func signedRequest(t testing.TB, baseURL, secret string, ts int64, body []byte) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, baseURL+wire.PathRPC, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(wire.HeaderTimestamp, strconv.FormatInt(ts, 10))
	req.Header.Set(wire.HeaderSignature, wire.Sign([]byte(secret), ts, http.MethodPost, wire.PathRPC, body))
	return req
}

// encode returns the JSON body of r.
func encode(t testing.TB, r wire.Request) []byte {
	t.Helper()
	body, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return body
}

// request returns an RPC request of steps with a fresh operation id, in
// the family a server knows when configured with none.
func request(steps ...engine.Step) wire.Request {
	return wire.Request{OperationID: engine.NewOperationID(), Family: admission.DefaultFamily, Steps: steps}
}

// step returns one step of cmds on partition.
func step(partition string, cmds ...engine.Command) engine.Step {
	return engine.Step{Partition: partition, Commands: cmds}
}

// secret returns the server's current signing secret: the one its options
// name, or the one in its data directory.
func (s *server) secret() string {
	s.t.Helper()
	if s.opts.Secret != "" {
		return s.opts.Secret
	}
	return readCredential(s.t, s.DataDir(), "secret")
}

// operatorToken returns the server's operator token, from its data
// directory.
func (s *server) operatorToken() string {
	s.t.Helper()
	return readCredential(s.t, s.DataDir(), "operator-token")
}

func readCredential(t testing.TB, dir, name string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	first, _, _ := strings.Cut(string(data), "\n")
	return strings.TrimSpace(first)
}

// call sends r signed with the server's secret at the current time.
func (s *server) call(t testing.TB, r wire.Request) answer {
	t.Helper()
	return signedPost(t, s.URL, s.secret(), time.Now().Unix(), encode(t, r))
}

// do sends r and decodes its 200 answer.
func (s *server) do(t testing.TB, r wire.Request) *engine.Response {
	t.Helper()
	return s.call(t, r).response(t)
}

// get reads a value record through the RPC.
func (s *server) get(t testing.TB, partition, key string) (string, bool) {
	t.Helper()
	r := s.do(t, request(step(partition, engine.Get(key)))).Steps[0].Results[0]
	return r.Value, r.Found
}

// mustBeAbsent fails the test if the key holds a live record.
func (s *server) mustBeAbsent(t testing.TB, partition, key string) {
	t.Helper()
	if v, ok := s.get(t, partition, key); ok {
		t.Errorf("%s/%s holds %q: a refused request had an effect", partition, key, v)
	}
}

// operator sends an operator request with the bearer token.
func (s *server) operator(t testing.TB, method, path, token string, body string) answer {
	t.Helper()
	req, err := http.NewRequest(method, s.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	return send(t, req)
}

// cli runs the sluice binary with args against this server and returns its
// standard output and exit status.
func (s *server) cli(t testing.TB, args ...string) (stdout, stderr string, status int) {
	t.Helper()
	return runCLI(t, s.opts.Dir, append(args, "--url", s.URL)...)
}

func runCLI(t testing.TB, dir string, args ...string) (stdout, stderr string, status int) {
	t.Helper()
	cmd := exec.Command(sluiceBin, args...)
	cmd.Dir = dir
	cmd.Env = cleanEnv()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil && cmd.ProcessState == nil {
		t.Fatalf("running sluice %s: %v", strings.Join(args, " "), err)
	}
	return out.String(), errb.String(), cmd.ProcessState.ExitCode()
}

// unique returns a name no other test uses.
func unique(t testing.TB, prefix string) string {
	return fmt.Sprintf("%s-%s-%s", prefix, strings.ReplaceAll(t.Name(), "/", "-"), engine.NewOperationID()[:8])
}

// sendAtOnce sends every request from its own goroutine, all released
// together, and returns the answers in order.
func sendAtOnce(t testing.TB, reqs []*http.Request) []answer {
	t.Helper()
	answers := make([]answer, len(reqs))
	errs := make([]error, len(reqs))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range reqs {
		wg.Go(func() {
			<-start
			answers[i], errs[i] = trySend(httpClient, reqs[i])
		})
	}
	close(start)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return answers
}
