// Package testclock provides a manually driven clock for tests.
package testclock

import (
	"sync"
	"time"
)

// Clock is an engine.Clock that only moves when told to. It is safe for
// concurrent use.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// New returns a clock reading start.
func New(start time.Time) *Clock { return &Clock{now: start} }

// At returns a clock reading the given Unix millisecond.
func At(unixMilli int64) *Clock { return New(time.UnixMilli(unixMilli)) }

// Now returns the clock's current reading.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Set moves the clock to t, which may be earlier than its current reading.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
}

// SetMilli moves the clock to the given Unix millisecond.
func (c *Clock) SetMilli(ms int64) { c.Set(time.UnixMilli(ms)) }

// Advance moves the clock by d (negative steps backwards).
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}
