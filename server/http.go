package server

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"
)

// HTTPConfig bounds what one client can hold of a server: how long it may
// take to send its headers and its body, how long an answer may take to
// write, how long an idle keep-alive connection is kept and how large the
// headers may be. Start from DefaultHTTPConfig.
type HTTPConfig struct {
	// ReadHeaderTimeout bounds the time to read a request's headers, so a
	// client trickling bytes cannot hold a connection.
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds the time to read a whole request, body included.
	// A body is at most wire.MaxBody bytes, so it needs little.
	ReadTimeout time.Duration
	// WriteTimeout bounds the time from the end of the request headers to
	// the end of the answer.
	WriteTimeout time.Duration
	// IdleTimeout bounds how long an idle keep-alive connection is kept.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds the request line and headers. Over HTTP/1.1,
	// Go's server reads up to 8 KiB past it (its slack and read buffer)
	// before answering 431; over HTTP/2 it bounds the header list (each
	// field's name and value plus 32 bytes), padded by 320 bytes.
	MaxHeaderBytes int
	// Logger receives the HTTP server's own errors (TLS handshakes,
	// malformed requests) at warning level. Nil discards them.
	Logger *slog.Logger
}

// DefaultHTTPConfig returns timeouts of 5 s for headers, 10 s for a whole
// request, 15 s for an answer and 2 minutes for an idle connection, and
// 16 KiB of headers.
func DefaultHTTPConfig() HTTPConfig {
	return HTTPConfig{
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      15 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    16 << 10,
	}
}

// Validate reports every problem of c at once: every timeout and the header
// bound must be positive, since zero would mean unbounded.
func (c HTTPConfig) Validate() error {
	var errs []error
	for _, t := range []struct {
		name string
		d    time.Duration
	}{
		{"read-header timeout", c.ReadHeaderTimeout},
		{"read timeout", c.ReadTimeout},
		{"write timeout", c.WriteTimeout},
		{"idle timeout", c.IdleTimeout},
	} {
		if t.d <= 0 {
			errs = append(errs, fmt.Errorf("%s %s must be positive", t.name, t.d))
		}
	}
	if c.MaxHeaderBytes <= 0 {
		errs = append(errs, fmt.Errorf("max header bytes %d must be positive", c.MaxHeaderBytes))
	}
	return errors.Join(errs...)
}

// NewHTTPServer returns an http.Server serving h within the bounds of cfg.
// The caller sets Addr or passes a listener to Serve, adds a TLSConfig if it
// serves TLS, and calls Shutdown to drain in-flight requests.
//
// The server speaks HTTP/1.1 and HTTP/2: over TLS, HTTP/2 as negotiated by
// ALPN; over plain TCP, HTTP/2 with prior knowledge (h2c), told apart from
// HTTP/1.1 by its connection preface. The bounds of cfg hold for both: the
// timeouts apply to each HTTP/2 stream as to each HTTP/1.1 request, the
// header bound is HTTP/2's header list bound (431 beyond it), and an
// HTTP/2 stream may send at most MaxStreamWindow bytes of body before its
// handler reads them.
func NewHTTPServer(h http.Handler, cfg HTTPConfig) (*http.Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetHTTP2(true)
	protocols.SetUnencryptedHTTP2(true)
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		ReadTimeout:       cfg.ReadTimeout,
		WriteTimeout:      cfg.WriteTimeout,
		IdleTimeout:       cfg.IdleTimeout,
		MaxHeaderBytes:    cfg.MaxHeaderBytes,
		Protocols:         &protocols,
		HTTP2: &http.HTTP2Config{
			MaxConcurrentStreams:          MaxConcurrentStreams,
			MaxReceiveBufferPerStream:     MaxStreamWindow,
			MaxReceiveBufferPerConnection: MaxConnectionWindow,
		},
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}, nil
}

// The HTTP/2 bounds of NewHTTPServer's servers.
const (
	// MaxConcurrentStreams bounds the requests one HTTP/2 connection may
	// have in flight at once; a client that needs more opens another
	// connection (Go's transport does so by itself).
	MaxConcurrentStreams = 256
	// MaxStreamWindow is the flow-control window of an HTTP/2 request
	// body: what a client may send before the server reads it. It is the
	// protocol's initial window (64 KiB − 1), above the largest body (an
	// envelope's, wire.MaxEnvelopeBody), so a valid body never waits for a
	// window update. Go's default, 1 MiB,
	// would let a refused body cost that much; a window below the initial
	// one would be overrun by clients that send before they have read the
	// server's settings, which the server then resets without an answer.
	// An oversized body costs the server at most this window and the
	// bound+1 bytes the handler's read gives back before the 413.
	MaxStreamWindow = 64<<10 - 1
	// MaxConnectionWindow is the flow-control window of an HTTP/2
	// connection: the unread request bodies of all its streams together.
	MaxConnectionWindow = 1 << 20
)
