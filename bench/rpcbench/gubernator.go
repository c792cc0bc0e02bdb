package rpcbench

import (
	"context"
	"fmt"
	"io"
	"strconv"

	guber "github.com/gubernator-io/gubernator/v2"
	"github.com/sirupsen/logrus"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

type guberSystem struct {
	batch  int
	keys   []string
	daemon *guber.Daemon
	conn   *grpc.ClientConn
	cl     guber.V1Client
}

// startGuber returns the start function of a gubernator configuration: one
// daemon spawned in this process with its defaults (in-memory LRU cache of
// 50,000 limits, one worker per CPU), its own peer and the owner of every
// key, called through its own gRPC client (one connection, shared by every
// caller, as its client is meant to be used).
func startGuber(batch int) func(context.Context, Options) (instance, error) {
	return func(ctx context.Context, o Options) (instance, error) {
		g := &guberSystem{batch: batch, keys: make([]string, max(o.Keys, batch))}
		for i := range g.keys {
			g.keys[i] = "key-" + strconv.Itoa(i)
		}
		if err := g.start(ctx); err != nil {
			_ = g.close()
			return nil, err
		}
		return g, nil
	}
}

func (g *guberSystem) start(ctx context.Context) error {
	quiet := logrus.New()
	quiet.SetOutput(io.Discard)
	err := asServer(ctx, func(ctx context.Context) error {
		d, err := guber.SpawnDaemon(ctx, guber.DaemonConfig{
			GRPCListenAddress: "127.0.0.1:0",
			HTTPListenAddress: "127.0.0.1:0",
			Logger:            logrus.NewEntry(quiet),
		})
		if err != nil {
			return err
		}
		g.daemon = d
		addr := d.GRPCListeners[0].Addr().String()
		d.V1Server.SetPeers([]guber.PeerInfo{{
			GRPCAddress: addr,
			HTTPAddress: d.HTTPListener.Addr().String(),
			IsOwner:     true,
		}})
		return nil
	})
	if err != nil {
		return err
	}
	// What guber.DialV1Server does, keeping the connection so that close
	// can end it.
	g.conn, err = grpc.NewClient(g.daemon.GRPCListeners[0].Addr().String(),
		grpc.WithStatsHandler(otelgrpc.NewClientHandler()),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	g.cl = guber.NewV1Client(g.conn)
	return nil
}

// request returns w's reusable request, built on first use.
func (g *guberSystem) request(w *caller) *guber.GetRateLimitsReq {
	if r, ok := w.scratch.(*guber.GetRateLimitsReq); ok {
		return r
	}
	r := &guber.GetRateLimitsReq{Requests: make([]*guber.RateLimitReq, g.batch)}
	for i := range r.Requests {
		r.Requests[i] = &guber.RateLimitReq{
			Name:      "bench",
			Hits:      1,
			Limit:     BenchLimit,
			Duration:  BenchWindow.Milliseconds(),
			Algorithm: guber.Algorithm_TOKEN_BUCKET,
		}
	}
	w.scratch = r
	return r
}

func (g *guberSystem) call(ctx context.Context, w *caller) (int, error) {
	r := g.request(w)
	// batch consecutive keys from a random one: distinct keys in one call.
	k := w.rng.IntN(len(g.keys))
	for i, rl := range r.Requests {
		rl.UniqueKey = g.keys[(k+i)%len(g.keys)]
	}
	resp, err := g.cl.GetRateLimits(ctx, r)
	if err != nil {
		return 0, err
	}
	if len(resp.Responses) != g.batch {
		return 0, fmt.Errorf("answer holds %d responses, want %d", len(resp.Responses), g.batch)
	}
	denied := 0
	for i, rr := range resp.Responses {
		if rr.Error != "" {
			return 0, fmt.Errorf("check %d: %s", i, rr.Error)
		}
		if rr.Status != guber.Status_UNDER_LIMIT {
			denied++
		}
	}
	return denied, nil
}

func (g *guberSystem) close() error {
	var err error
	if g.conn != nil {
		err = g.conn.Close()
	}
	if g.daemon != nil {
		g.daemon.Close()
	}
	return err
}
