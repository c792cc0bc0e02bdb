package main

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"testing/synctest"
)

// TestRequestTrackerWaitsForTheLastRequest runs three requests whose
// handlers block until released: wait does not return while any of them
// is being handled, and returns once the last one has.
func TestRequestTrackerWaitsForTheLastRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := newRequestTracker()
		release := make(chan struct{})
		h := tr.wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-release }))
		for range 3 {
			go h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil))
		}
		synctest.Wait() // every handler is running
		var returned atomic.Bool
		go func() {
			tr.wait()
			returned.Store(true)
		}()
		synctest.Wait()
		if returned.Load() {
			t.Fatal("wait returned while three requests were being handled")
		}
		release <- struct{}{}
		release <- struct{}{}
		synctest.Wait()
		if returned.Load() {
			t.Fatal("wait returned while one request was being handled")
		}
		close(release)
		synctest.Wait()
		if !returned.Load() {
			t.Fatal("wait did not return once the last request ended")
		}
	})
}

// TestRequestTrackerIdle: wait returns at once when no request is being
// handled, before any request and after some have ended. (In the bubble a
// wait that blocked would be reported as a deadlock.)
func TestRequestTrackerIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := newRequestTracker()
		tr.wait()
		h := tr.wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		for range 5 {
			h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil))
		}
		tr.wait()
	})
}
