package rpcbench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/server"
	"github.com/sluicehq/sluice/wire"
)

// The floor's request and answer are about the size of a one-hit Sluice
// RPC and its answer, and carry the same headers, so the floor does the
// transport's share of the same work and nothing else.
var (
	floorBody   = []byte(`{"operationId":"` + strings.Repeat("0", 32) + `","family":"default","steps":[{"partition":"` + strings.Repeat("1", 64) + `","commands":[{"op":"win.hit","windows":[{"key":"` + strings.Repeat("2", 64) + `","kind":"gcra","limit":1000000,"windowMs":60000}],"cost":1}]}]}`)
	floorAnswer = []byte(`{"steps":[{"results":[{"allowed":true,"remaining":999999,"resetAt":1700000000000,"windows":[{"allowed":true,"remaining":999999,"resetAt":1700000000000}]}]}]}` + "\n")
	floorSig    = "v1=" + strings.Repeat("3", 64)
)

type httpFloor struct {
	proto int // the HTTP major version the floor must be answered in
	url   string
	srv   *http.Server
	tr    *http.Transport
	http  *http.Client
}

// newFloorTransport returns a transport with the settings of the client
// package's own (client.New without an HTTPClient) for a plain-http server
// and version: keep-alive connections, up to 256 idle per host, dial and
// TLS handshake bounded by the call timeout, no gzip; HTTP/2 with prior
// knowledge (h2c) or HTTP/1.1 alone. Keep the two in step.
func newFloorTransport(timeout time.Duration, version client.HTTPVersion) *http.Transport {
	dialer := &net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}
	var protocols http.Protocols
	if version == client.HTTP2 {
		protocols.SetUnencryptedHTTP2(true)
	} else {
		protocols.SetHTTP1(true)
	}
	return &http.Transport{
		Proxy:                  http.ProxyFromEnvironment,
		DialContext:            dialer.DialContext,
		Protocols:              &protocols,
		MaxIdleConns:           256,
		MaxIdleConnsPerHost:    256,
		IdleConnTimeout:        90 * time.Second,
		TLSHandshakeTimeout:    timeout,
		MaxResponseHeaderBytes: 64 << 10,
		DisableCompression:     true,
		HTTP2:                  &http.HTTP2Config{SendPingTimeout: 5 * time.Second, PingTimeout: 5 * time.Second},
	}
}

// startHTTPFloor returns the start function of a floor: a trivial handler
// (read the body, write a fixed answer) served through
// server.NewHTTPServer with the default timeouts, on a loopback listener,
// called over version with the client package's transport settings and
// call timeout.
func startHTTPFloor(version client.HTTPVersion) func(context.Context, Options) (instance, error) {
	return func(ctx context.Context, o Options) (instance, error) {
		return startFloor(ctx, version)
	}
}

func startFloor(ctx context.Context, version client.HTTPVersion) (instance, error) {
	f := &httpFloor{proto: 1}
	if version == client.HTTP2 {
		f.proto = 2
	}
	trivial := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(floorAnswer)
	})
	err := asServer(ctx, func(context.Context) error {
		srv, err := server.NewHTTPServer(trivial, server.DefaultHTTPConfig())
		if err != nil {
			return err
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		f.srv = srv
		f.url = "http://" + ln.Addr().String() + wire.PathRPC
		go func() { _ = srv.Serve(ln) }()
		return nil
	})
	if err != nil {
		return nil, err
	}
	f.tr = newFloorTransport(client.DefaultTimeout, version)
	f.http = &http.Client{
		Transport:     f.tr,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return f, nil
}

func (f *httpFloor) call(ctx context.Context, _ *caller) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, client.DefaultTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.url, bytes.NewReader(floorBody))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(wire.HeaderTimestamp, "1700000000")
	req.Header.Set(wire.HeaderSignature, floorSig)
	resp, err := f.http.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	if resp.StatusCode != http.StatusOK || len(body) != len(floorAnswer) || resp.ProtoMajor != f.proto {
		return 0, fmt.Errorf("answer %d of %d bytes over %s", resp.StatusCode, len(body), resp.Proto)
	}
	return 0, nil
}

func (f *httpFloor) close() error {
	var errs []error
	if f.tr != nil {
		f.tr.CloseIdleConnections()
	}
	if f.srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		errs = append(errs, f.srv.Shutdown(ctx))
		cancel()
	}
	return errors.Join(errs...)
}

type grpcFloor struct {
	srv  *grpc.Server
	conn *grpc.ClientConn
	cl   healthpb.HealthClient
}

// startGRPCFloor serves gRPC's standard health service on a loopback
// listener and calls its unary Check over one shared connection: the least
// a gRPC call can do, with no interceptors or stats handlers on either side.
func startGRPCFloor(ctx context.Context, o Options) (instance, error) {
	g := &grpcFloor{}
	var addr string
	err := asServer(ctx, func(context.Context) error {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		g.srv = grpc.NewServer()
		healthpb.RegisterHealthServer(g.srv, health.NewServer())
		addr = ln.Addr().String()
		go func() { _ = g.srv.Serve(ln) }()
		return nil
	})
	if err != nil {
		return nil, err
	}
	g.conn, err = grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		g.srv.Stop()
		return nil, err
	}
	g.cl = healthpb.NewHealthClient(g.conn)
	return g, nil
}

func (g *grpcFloor) call(ctx context.Context, _ *caller) (int, error) {
	resp, err := g.cl.Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		return 0, err
	}
	if resp.Status != healthpb.HealthCheckResponse_SERVING {
		return 0, fmt.Errorf("health status %v", resp.Status)
	}
	return 0, nil
}

func (g *grpcFloor) close() error {
	err := g.conn.Close()
	g.srv.Stop()
	return err
}
