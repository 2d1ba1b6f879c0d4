package main

import (
	"math"
	"testing"
)

// A FIFO queue of 4 workers at one acquisition per µs, the lock staying in
// the process (tokens in sequence) except for one acquisition in a hundred, in
// Redis, that takes 20 µs: the waits spanning one make the tail, and the waits
// that do not span it are the queue's own (g-1)/rate.
func TestTailOfSplitsTheTail(t *testing.T) {
	const g, n = 4, 1000
	var acqs []interval
	var tokens []uint64
	at := int64(0)
	tok := uint64(100)
	for i := range n {
		gap := int64(1000)
		if i%100 == 50 {
			gap = 20000
			tok += 1000 // acquired in Redis: a token that does not follow
		} else {
			tok++
		}
		at += gap
		// Each acquisition's wait began when the worker's previous one was
		// acquired: g acquisitions earlier.
		start := int64(0)
		if i >= g {
			start = acqs[i-g][1]
		}
		acqs = append(acqs, interval{start, at})
		tokens = append(tokens, tok)
	}
	ts, ok := tailOf(acqs[g:], tokens[g:], g, float64(at-acqs[g][1]))
	if !ok {
		t.Fatal("no tail stats")
	}
	if ts.N != g-1 {
		t.Errorf("waits >= p99 saw %v acquisitions, want %d (FIFO)", ts.N, g-1)
	}
	if ts.TripTail != 1 || math.Abs(ts.TripAll-float64(g)/100) > 0.01 {
		t.Errorf("trip shares: tail %v, all %v; want the tail made of the waits spanning the Redis acquisition", ts.TripTail, ts.TripAll)
	}
	// The waits that span none wait g gaps of 1 µs.
	if ts.P99Quiet != g*1000 {
		t.Errorf("quiet p99 %v ns, want %d", ts.P99Quiet, g*1000)
	}
	if ts.P99/ts.FIFO < 5 {
		t.Errorf("p99 %.2fx FIFO: the 20 µs acquisition should make it several times the queue's wait", ts.P99/ts.FIFO)
	}
	if math.Abs(ts.TripFrac-0.01) > 0.001 {
		t.Errorf("trip fraction %v, want one in 100", ts.TripFrac)
	}
}
