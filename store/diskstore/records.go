package diskstore

import (
	"slices"
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

// replaySet holds one partition's replay records in memory, grouped by the
// bucket of their expiry (see layout.go), so that a bucket is dropped whole
// once it has ended: forgetting a hot partition's expired records costs
// nothing per record. While the clock moves forward there are at most
// engine.ReplayTTL/bucketMs + 1 buckets, so a lookup costs a few map
// lookups. A key is in one bucket at most.
type replaySet struct {
	buckets []replayBucket // in increasing bucket order
}

type replayBucket struct {
	b    int64
	recs map[string]engine.Record
}

func (r *replaySet) get(key string) (engine.Record, bool) {
	for i := range r.buckets {
		if rec, ok := r.buckets[i].recs[key]; ok {
			return rec, true
		}
	}
	return engine.Record{}, false
}

// set stores rec at key, in the bucket of its expiry. rec.Data must be
// owned by the set; key is cloned if it is new.
func (r *replaySet) set(key string, rec engine.Record) {
	b := bucketOf(rec.ExpireAt)
	i := 0
	for ; i < len(r.buckets) && r.buckets[i].b < b; i++ {
		delete(r.buckets[i].recs, key)
	}
	if i == len(r.buckets) || r.buckets[i].b != b {
		r.buckets = slices.Insert(r.buckets, i, replayBucket{b: b, recs: make(map[string]engine.Record)})
	}
	recs := r.buckets[i].recs
	if _, ok := recs[key]; !ok {
		key = strings.Clone(key)
	}
	recs[key] = rec
	for j := i + 1; j < len(r.buckets); j++ {
		delete(r.buckets[j].recs, key)
	}
}

// trim drops every bucket that has ended at now: all its records have
// expired.
func (r *replaySet) trim(now int64) {
	last := lastEnded(now)
	n := 0
	for n < len(r.buckets) && r.buckets[n].b <= last {
		n++
	}
	if n > 0 {
		r.buckets = slices.Delete(r.buckets, 0, n)
	}
}

func (r *replaySet) len() int {
	n := 0
	for i := range r.buckets {
		n += len(r.buckets[i].recs)
	}
	return n
}
