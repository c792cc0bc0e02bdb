package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/testclock"
	"github.com/sluicehq/sluice/server"
	"github.com/sluicehq/sluice/store/diskstore"
)

// Thirty requests from one client, released together against a limit of
// five, admit exactly five on every kind of store: the check and the charge
// are one atomic step, so no two requests can both see the last unit.
func TestConcurrentRequestsAdmitExactlyTheLimit(t *testing.T) {
	const limit, requests = 5, 30
	stores := map[string]func(t *testing.T) engine.Store{
		"memstore": func(t *testing.T) engine.Store {
			mem, _ := newMem(t, 100)
			return mem
		},
		"diskstore": func(t *testing.T) engine.Store {
			cfg := diskstore.DefaultConfig()
			cfg.Dir = t.TempDir()
			cfg.Clock = testclock.New(epoch)
			disk, err := diskstore.Open(cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { disk.Close() })
			return disk
		},
		"server": newServerStore,
	}
	for name, newStore := range stores {
		t.Run(name, func(t *testing.T) {
			h, ran := stage(t, config(newStore(t), limit, "/login"))

			start := make(chan struct{})
			codes := make([]int, requests)
			var wg sync.WaitGroup
			for i := range requests {
				wg.Go(func() {
					<-start
					codes[i] = serve(h, http.MethodPost, "/login", "203.0.113.7:41000").Code
				})
			}
			close(start)
			wg.Wait()

			count := map[int]int{}
			for _, c := range codes {
				count[c]++
			}
			if count[http.StatusOK] != limit || count[http.StatusTooManyRequests] != requests-limit {
				t.Fatalf("statuses %v, want %d×200 and %d×429", count, limit, requests-limit)
			}
			if got := ran.Load(); got != limit {
				t.Fatalf("protected handler ran %d times, want %d", got, limit)
			}
		})
	}
}

const (
	testSecret = "httplimit-test-signing-secret-0123456789"
	testPepper = "httplimit-test-key-pepper-0123456789abcd"
	testToken  = "httplimit-test-operator-token-0123456789"
)

// newServerStore starts a Sluice server over a memory store on a controlled
// clock and returns a client of it: the stage's store is then a remote
// server reached over the signed RPC.
func newServerStore(t *testing.T) engine.Store {
	return newClient(t, startServer(t))
}

// startServer starts a Sluice server over a memory store on a controlled
// clock and returns its URL.
func startServer(t *testing.T) string {
	mem, _ := newMem(t, 10_000)
	scfg := server.DefaultConfig()
	scfg.Secrets = []string{testSecret}
	scfg.OperatorToken = testToken
	srv := httptest.NewServer(server.New(engine.New(mem), scfg))
	t.Cleanup(srv.Close)
	return srv.URL
}

// newClient returns a client of the server at url: a process of the
// fleet, with the fleet's secret and pepper.
func newClient(t *testing.T, url string) engine.Store {
	ccfg := client.DefaultConfig()
	ccfg.URL = url
	ccfg.Secret = testSecret
	ccfg.Pepper = testPepper
	// The longest timeout the client allows: thirty concurrent calls on a
	// small machine under the race detector must not time out.
	ccfg.Timeout = 2 * time.Second
	c := client.New(ccfg)
	if err := c.Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
