package algo

// Peek reports the window s at now without charging it: Remaining is what
// the window would still admit and ResetAt the instant it will hold nothing
// (now, if it holds nothing already). Allowed and RetryAfter are zero. The
// engine uses it for the windows of a multi-window hit that would have
// admitted but were not charged because another window denied.
//
// l must have been validated with [Limit.Validate].
func Peek(l Limit, s WindowState, now int64) Decision {
	switch l.Kind {
	case KindFixed:
		now = max(now, s.Start)
		start := bucketStart(now, l.Window)
		if start != s.Start || s.Count == 0 {
			return Decision{Remaining: l.Limit, ResetAt: now}
		}
		return Decision{Remaining: max(0, l.Limit-s.Count), ResetAt: start + l.Window}
	case KindSliding:
		now = max(now, s.Start)
		start, cur, prev := slidingRoll(l, s, now)
		d := Decision{Remaining: remainingFloat(l.Limit, slidingEstimate(prev, cur, l.Window, now-start)), ResetAt: now}
		switch {
		case cur > 0:
			d.ResetAt = start + 2*l.Window
		case prev > 0:
			d.ResetAt = start + l.Window
		}
		return d
	case KindLog:
		if n := len(s.Log); n > 0 {
			now = max(now, s.Log[n-1].At)
		}
		var used, last int64
		for _, e := range s.Log {
			if e.At > now-l.Window {
				used += e.N
				last = e.At
			}
		}
		if used == 0 {
			return Decision{Remaining: l.Limit, ResetAt: now}
		}
		return Decision{Remaining: max(0, l.Limit-used), ResetAt: last + l.Window}
	case KindGCRA:
		tat, frac := s.TAT, max(s.Frac, 0)
		if frac >= l.Limit {
			tat, frac = tat+1, 0
		}
		now = max(now, gcraCeil(tat, frac)-l.Window)
		if tat < now {
			return Decision{Remaining: l.Limit, ResetAt: now}
		}
		return Decision{Remaining: gcraRemaining(l, tat, frac, now), ResetAt: max(now, gcraCeil(tat, frac))}
	}
	return Decision{}
}
