package server

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/engine"
)

// The stop fence lives in a reserved partition of the server's own store, so
// it is as durable as the data it protects and shared by every server on
// that store.
const (
	controlPartition = "control"
	fenceKey         = "stop"
	// fenceTTL keeps the fence at the longest TTL a record may have; the
	// fence is rewritten whenever less than half of it remains, so a stop
	// never lapses on its own.
	fenceTTL = engine.MaxTTLMs
)

// FenceState is the durable operator stop.
type FenceState struct {
	Stopped bool      `json:"stopped"`
	Reason  string    `json:"reason,omitempty"`
	Since   time.Time `json:"since,omitzero"`
}

// fence caches the durable stop fence. Every RPC reads it; while the
// cached copy is fresh that read is one atomic load, so RPCs do not
// serialise on the fence. Reading the store, when the copy has aged past
// the refresh interval, and writing it take turn, one at a time; a caller
// waiting for its turn gives up when its context ends, so that requests of
// clients gone away do not pile up behind a store that hangs.
type fence struct {
	eng     *engine.Engine
	refresh time.Duration
	now     func() time.Time

	cached atomic.Pointer[fenceCopy] // nil until the first read
	turn   chan struct{}             // holds a token while the store is read or written
}

func newFence(eng *engine.Engine, refresh time.Duration, now func() time.Time) *fence {
	return &fence{eng: eng, refresh: refresh, now: now, turn: make(chan struct{}, 1)}
}

// lock waits for the turn to read or write the store, or for ctx to end.
func (f *fence) lock(ctx context.Context) error {
	select {
	case f.turn <- struct{}{}:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

func (f *fence) unlock() { <-f.turn }

// fenceCopy is the fence as read from or written to the store at loadedAt.
type fenceCopy struct {
	state    FenceState
	loadedAt time.Time
}

// fresh returns the cached copy if it is younger than the refresh interval
// at now, or nil.
func (f *fence) fresh(now time.Time) *fenceCopy {
	if c := f.cached.Load(); c != nil && now.Sub(c.loadedAt) < f.refresh {
		return c
	}
	return nil
}

// get returns the fence state, reading the store when the cached copy is
// older than the refresh interval. Callers arriving while the store is read
// wait for that read rather than answer from the aged copy.
func (f *fence) get(ctx context.Context) (FenceState, error) {
	if c := f.fresh(f.now()); c != nil {
		return c.state, nil
	}
	if err := f.lock(ctx); err != nil {
		return FenceState{}, fmt.Errorf("reading the stop fence: %w", err)
	}
	defer f.unlock()
	now := f.now()
	if c := f.fresh(now); c != nil {
		return c.state, nil // read by the caller whose turn came before ours
	}
	var out engine.StepResult
	if err := f.eng.ApplyReserved(ctx, controlPartition, &out, engine.Get(fenceKey), engine.TTL(fenceKey)); err != nil {
		return FenceState{}, fmt.Errorf("reading the stop fence: %w", err)
	}
	st := FenceState{}
	if r := out.Results[0]; r.Found {
		if err := json.Unmarshal([]byte(r.Value), &st); err != nil {
			// An unreadable fence is treated as a stop: never fail open.
			st = FenceState{Stopped: true, Reason: "unreadable stop fence record"}
		}
		if st.Stopped && out.Results[1].TTLMs < fenceTTL/2 {
			if err := f.write(ctx, st); err != nil {
				return FenceState{}, err
			}
		}
	}
	f.cached.Store(&fenceCopy{state: st, loadedAt: now})
	return st, nil
}

// set persists a new fence state before caching it.
func (f *fence) set(ctx context.Context, st FenceState) error {
	if err := f.lock(ctx); err != nil {
		return fmt.Errorf("writing the stop fence: %w", err)
	}
	defer f.unlock()
	if err := f.write(ctx, st); err != nil {
		return err
	}
	f.cached.Store(&fenceCopy{state: st, loadedAt: f.now()})
	return nil
}

func (f *fence) write(ctx context.Context, st FenceState) error {
	var out engine.StepResult
	var cmd engine.Command
	if st.Stopped {
		enc, err := json.Marshal(st)
		if err != nil {
			return err
		}
		cmd = engine.Set(fenceKey, string(enc), fenceTTL)
	} else {
		cmd = engine.Del(fenceKey)
	}
	if err := f.eng.ApplyReserved(ctx, controlPartition, &out, cmd); err != nil {
		return fmt.Errorf("writing the stop fence: %w", err)
	}
	return nil
}
