package diskstore

import (
	"strings"

	"github.com/sluicehq/sluice/engine"
)

// records holds one partition's records in memory. Most partitions hold a
// single record (one window, one counter), so the first is kept inline and
// a map is made only for a second: a resident partition then costs a small
// fraction of what a map would.
type records struct {
	key  string
	rec  engine.Record
	one  bool                     // key and rec hold the only record
	many map[string]engine.Record // every record, once there have been two
}

func (r *records) get(key string) (engine.Record, bool) {
	if r.many != nil {
		rec, ok := r.many[key]
		return rec, ok
	}
	if r.one && r.key == key {
		return r.rec, true
	}
	return engine.Record{}, false
}

// set stores rec at key. rec.Data must be owned by the partition; key is
// cloned if it is new.
func (r *records) set(key string, rec engine.Record) {
	switch {
	case r.many != nil:
		if _, ok := r.many[key]; !ok {
			key = strings.Clone(key)
		}
		r.many[key] = rec
	case !r.one:
		r.key, r.rec, r.one = strings.Clone(key), rec, true
	case r.key == key:
		r.rec = rec
	default:
		r.many = map[string]engine.Record{r.key: r.rec, strings.Clone(key): rec}
		r.key, r.rec, r.one = "", engine.Record{}, false
	}
}

func (r *records) del(key string) {
	if r.many != nil {
		delete(r.many, key)
		return
	}
	if r.one && r.key == key {
		r.key, r.rec, r.one = "", engine.Record{}, false
	}
}

func (r *records) len() int {
	if r.many != nil {
		return len(r.many)
	}
	if r.one {
		return 1
	}
	return 0
}
