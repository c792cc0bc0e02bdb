package e2e

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/sluicehq/sluice/engine"
)

// TestNXRace sends 50 set-if-absent requests for one key at once, each its
// own operation: exactly one wins, and the key holds the winner's value.
func TestNXRace(t *testing.T) {
	t.Parallel()
	const racers = 50
	s := startServer(t, serverOptions{})
	p := unique(t, "nx")
	secret := s.secret()
	reqs := make([]*http.Request, racers)
	for i := range reqs {
		body := encode(t, request(step(p, engine.SetIf("lock", fmt.Sprint("racer-", i), hour, engine.SetNX))))
		reqs[i] = signedRequest(t, s.URL, secret, time.Now().Unix(), body)
	}
	winners := []int{}
	for i, a := range sendAtOnce(t, reqs) {
		if a.response(t).Steps[0].Results[0].Allowed {
			winners = append(winners, i)
		}
	}
	if len(winners) != 1 {
		t.Fatalf("winners %v, want exactly one", winners)
	}
	if v, _ := s.get(t, p, "lock"); v != fmt.Sprint("racer-", winners[0]) {
		t.Errorf("lock holds %q, want the winner's racer-%d", v, winners[0])
	}
}
