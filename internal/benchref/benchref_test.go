package benchref

import (
	"strconv"
	"testing"
	"time"
)

func TestBucketsBurstThenDeny(t *testing.T) {
	// A refill of 5 per hour adds far less than a token while the test runs.
	b := NewBuckets(5, time.Hour, 4)
	for i := range 5 {
		if !b.Allow("k") {
			t.Fatalf("hit %d denied within the burst", i+1)
		}
	}
	if b.Allow("k") {
		t.Fatal("hit 6 allowed beyond the burst")
	}
	if !b.Allow("other") {
		t.Fatal("a second key shares the first key's bucket")
	}
}

func TestBucketsRefill(t *testing.T) {
	b := NewBuckets(1, time.Millisecond, 1)
	if !b.Allow("k") {
		t.Fatal("first hit denied")
	}
	// Force the refill by moving the bucket's clock back instead of sleeping.
	b.shards[0].m["k"].last -= int64(time.Millisecond)
	if !b.Allow("k") {
		t.Fatal("hit after a full refill interval denied")
	}
}

func TestBucketsManyKeys(t *testing.T) {
	b := NewBuckets(1, time.Hour, 8)
	for i := range 1000 {
		if !b.Allow(strconv.Itoa(i)) {
			t.Fatalf("key %d denied on first use", i)
		}
	}
	n := 0
	for i := range b.shards {
		n += len(b.shards[i].m)
	}
	if n != 1000 {
		t.Fatalf("%d buckets held, want 1000", n)
	}
}
