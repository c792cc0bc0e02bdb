// Package logtest provides a slog.Handler that keeps every record, for
// tests that check what a package logs.
package logtest

import (
	"context"
	"log/slog"
	"slices"
	"sync"
)

// Recorder is a slog.Handler that keeps every record it is given, at every
// level. It is safe for concurrent use. Attributes and groups added with
// WithAttrs and WithGroup are not kept: a record carries its own.
type Recorder struct {
	mu      sync.Mutex
	records []slog.Record
}

func (h *Recorder) Enabled(context.Context, slog.Level) bool { return true }
func (h *Recorder) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *Recorder) WithGroup(string) slog.Handler            { return h }

func (h *Recorder) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.records = append(h.records, r.Clone())
	return nil
}

// Records returns the records kept so far, in the order they were logged.
func (h *Recorder) Records() []slog.Record {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.records)
}

// Len returns how many records were kept.
func (h *Recorder) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.records)
}
