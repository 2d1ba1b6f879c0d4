package main

import (
	"slices"
	"sort"
	"time"
)

// tailStats splits the contended scenario's p99 wait into its two factors:
// how many acquisitions (by the other workers) a wait saw before its own,
// and how long each of them took. A FIFO queue of g workers at a steady
// rate sees g-1 acquisitions per wait, each 1/rate apart: its wait is
// (g-1)/rate. A tail wait with about g-1 acquisitions and long gaps is
// slowness (the lock moving slowly while the wait lasted: a trip to
// Redis, a goroutine not running); one with many more than g-1 is order
// (the wait overtaken: not FIFO).
type tailStats struct {
	FIFO    float64 // (g-1)/rate, ns
	P99     float64 // p99 wait, ns
	N       float64 // median acquisitions seen by the waits >= p99
	NAll    float64 // median acquisitions seen by every wait
	Gap     float64 // median of (wait / (acquisitions seen + 1)) over the waits >= p99, ns
	GapAll  float64 // the same over every wait
	Overtk  float64 // share of the waits >= p99 that saw more than 2(g-1)
	Samples int
	// With fencing tokens (tokener): an acquisition whose token does not
	// follow the one before went through Redis (a handoff inside the
	// process issues the next token of its reserved block).
	Tokens   bool
	TripFrac float64 // share of the acquisitions that went through Redis
	TripTail float64 // share of the waits >= p99 during which (own acquisition included) one did
	TripAll  float64 // the same share over every wait
	P99Quiet float64 // p99 of the waits during which none did, ns
}

// tailOf computes tailStats from every counted acquisition's (wait start,
// acquired) of g workers over window ns.
func tailOf(acqs []interval, tokens []uint64, g int, window float64) (tailStats, bool) {
	if len(acqs) < 200 || g < 2 {
		return tailStats{}, false
	}
	order := make([]int, len(acqs))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(x, y int) int {
		switch {
		case acqs[x][1] < acqs[y][1]:
			return -1
		case acqs[x][1] > acqs[y][1]:
			return 1
		}
		return 0
	})
	at := make([]int64, len(acqs))
	for i, j := range order {
		at[i] = acqs[j][1]
	}
	// trips[i]: the acquisitions that went through Redis among the first i
	// (by the time they were acquired).
	hasTok := len(tokens) == len(acqs)
	trips := make([]int, len(acqs)+1)
	for i, j := range order {
		trip := 0
		if hasTok && i > 0 && tokens[j] != tokens[order[i-1]]+1 {
			trip = 1
		}
		trips[i+1] = trips[i] + trip
	}
	tripsIn := func(a interval) int { // acquired in (start, acquired]
		lo := sort.Search(len(at), func(i int) bool { return at[i] > a[0] })
		hi := sort.Search(len(at), func(i int) bool { return at[i] > a[1] })
		return trips[hi] - trips[lo]
	}
	seen := func(a interval) int { // acquisitions strictly inside (start, acquired)
		lo := sort.Search(len(at), func(i int) bool { return at[i] > a[0] })
		hi := sort.Search(len(at), func(i int) bool { return at[i] >= a[1] })
		return max(hi-lo, 0)
	}
	byWait := slices.Clone(acqs)
	slices.SortFunc(byWait, func(x, y interval) int {
		dx, dy := x[1]-x[0], y[1]-y[0]
		switch {
		case dx < dy:
			return -1
		case dx > dy:
			return 1
		}
		return 0
	})
	p := len(byWait) * 99 / 100
	var ns, gaps, nAll, gapAll []float64
	var quiet []time.Duration
	over, tripTail, tripAll := 0, 0, 0
	for i, a := range byWait {
		n := seen(a)
		if tripsIn(a) > 0 {
			tripAll++
			if i >= p {
				tripTail++
			}
		} else {
			quiet = append(quiet, time.Duration(a[1]-a[0]))
		}
		gap := float64(a[1]-a[0]) / float64(n+1)
		nAll = append(nAll, float64(n))
		gapAll = append(gapAll, gap)
		if i >= p {
			ns = append(ns, float64(n))
			gaps = append(gaps, gap)
			if n > 2*(g-1) {
				over++
			}
		}
	}
	med := func(x []float64) float64 { slices.Sort(x); return x[len(x)/2] }
	rate := float64(len(acqs)) / window
	t := tailStats{
		FIFO: float64(g-1) / rate, P99: float64(byWait[p][1] - byWait[p][0]),
		N: med(ns), NAll: med(nAll), Gap: med(gaps), GapAll: med(gapAll),
		Overtk: float64(over) / float64(len(ns)), Samples: len(ns),
	}
	if hasTok {
		t.Tokens = true
		t.TripFrac = float64(trips[len(acqs)]) / float64(len(acqs))
		t.TripTail = float64(tripTail) / float64(len(ns))
		t.TripAll = float64(tripAll) / float64(len(byWait))
		if len(quiet) > 0 {
			t.P99Quiet = float64(percentile(quiet, 99))
		}
	}
	return t, true
}
