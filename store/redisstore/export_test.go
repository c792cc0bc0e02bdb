package redisstore

// UseScripts makes s run its batches as scripts (EVALSHA), as it does on a
// server without functions, so that tests cover both forms on Redis 7.
func UseScripts(s *Store) { s.scripts.Store(true) }
