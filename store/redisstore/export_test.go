package redisstore

// UseScripts makes s run its batches as scripts (EVALSHA), as it does on a
// server without functions, so that tests cover both forms on Redis 7.
func UseScripts(s *Store) { s.scripts.Store(true) }

// Queued returns the number of batches waiting in s's pipeline queue.
func Queued(s *Store) int {
	if s.co == nil {
		return 0
	}
	return s.co.Len()
}
