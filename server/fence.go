package server

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
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

// fence caches the durable stop fence.
type fence struct {
	eng     *engine.Engine
	refresh time.Duration
	now     func() time.Time

	mu       sync.Mutex
	state    FenceState
	loadedAt time.Time
	loaded   bool
}

// get returns the fence state, reading the store when the cached copy is
// older than the refresh interval.
func (f *fence) get(ctx context.Context) (FenceState, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.now()
	if f.loaded && now.Sub(f.loadedAt) < f.refresh {
		return f.state, nil
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
	f.state, f.loadedAt, f.loaded = st, now, true
	return st, nil
}

// set persists a new fence state before caching it.
func (f *fence) set(ctx context.Context, st FenceState) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.write(ctx, st); err != nil {
		return err
	}
	f.state, f.loadedAt, f.loaded = st, f.now(), true
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
