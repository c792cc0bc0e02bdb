// Package algo holds the pure state transitions behind every Sluice command.
//
// Nothing here locks, sleeps, reads a clock or performs I/O. Every function
// takes the current instant as an argument (now, in Unix milliseconds) and
// returns the next state together with a decision; the caller decides whether
// to persist that state. This is what lets the engine evaluate several windows
// and commit all of them or none, lets tests be exact tables at fixed
// instants, and lets the Redis store mirror the same arithmetic in Lua.
//
// # Which window to use
//
//   - [Fixed]: epoch-aligned buckets. Cheapest; permits up to two limits'
//     worth of hits around a boundary. Right for coarse daily or hourly quotas.
//   - [Sliding]: the weighted two-bucket estimate (previous·(1−elapsed/W) +
//     current). Smooths the boundary burst at the cost of being approximate.
//   - [Log]: an exact sliding log. No rolling window of length W ever holds
//     more than the limit. Storage grows with the limit (at most Limit
//     entries), so its limit is capped at [MaxLogLimit].
//   - [GCRA]: the generic cell rate algorithm with burst = limit and
//     emission interval W/limit. Smooth pacing in constant space.
//
// Every window reports the remaining allowance, the instant at which it will
// be full again, and RetryAfter: the earliest delay after which the same hit
// would be admitted if nothing else arrived.
//
// # Clocks that step backwards
//
// Each state remembers the latest instant at which it was charged: a log as
// its newest entry, a fixed or sliding window as the bucket charged, GCRA in
// its theoretical arrival time, which lies beyond that instant. An earlier
// now is raised to the entry or the bucket's start (GCRA raises it to its
// arrival time less a window; before that arrival time an earlier now only
// weighs the charges more), so a clock that steps backwards never produces
// a negative remaining or retry-after and never grants more than the window
// would at the latest instant charged. A denial's RetryAfter counts from
// the instant used.
//
// A denial charges nothing and so leaves no trace of its instant. After a
// hit denied at a later instant, a hit admitted once the clock has stepped
// back behind it is charged at the earlier instant the clock reads: a log
// entry or a sliding bucket's count then ages out from there, sooner than
// if it had been charged at the denied hit's instant.
//
// # State encoding
//
// Every state has an AppendBinary method and a matching Decode function. The
// encodings are versioned by the record kind the engine stores beside them and
// are stable: the embedded store persists them. A pacing state gained an
// optional trailer (the penalty's hold, see [PaceState.AppendBinary]) that its
// length tells apart: records written before it decode unchanged.
package algo
