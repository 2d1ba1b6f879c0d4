package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// The targets table must mark from the figures, both ways, and never claim
// a target it has no figure for.
func TestTargetsMarkedFromFigures(t *testing.T) {
	r := newReport(settings{Reps: 1}, machine{})
	r.add("serial", "raw", sample{"ns_op": 100, "allocs_op": 1})
	r.add("serial", "dsync", sample{"ns_op": 119, "allocs_op": 11})
	r.add("contended", "redislock", sample{"acq_s": 1000, "wait_p99_ms": 10, "fairness": 0.9})
	r.add("contended", "redsync", sample{"acq_s": 2000, "wait_p99_ms": 50, "fairness": 0.5})
	r.add("contended", "dsync", sample{"acq_s": 5000, "wait_p99_ms": 1, "fairness": 0.95, "stalls": 1})
	md := r.markdown()
	got := map[string]target{}
	for _, tg := range r.Targets {
		got[tg.Name] = tg
	}
	for name, want := range map[string]bool{
		"serial ns/op":                  true,  // 1.19x <= 1.2x
		"serial allocs/op":              false, // 11 > 10
		"contended acq/s":               false, // 2.5x the best peer (redsync), not 3x
		"contended wait p99":            true,  // 1 ms <= 10 ms / 5 (best peer p99 is the lowest)
		"contended fairness":            true,
		"stalls (dsync, all scenarios)": false,
	} {
		tg, ok := got[name]
		assert.True(t, ok, "%s: %+v", name, tg)
		assert.Equal(t, want, tg.Met, "%s: %+v", name, tg)
		assert.True(t, tg.Measures, "%s: %+v", name, tg)
	}
	tg := got["scale renewal CPU (100k locks)"]
	assert.False(t, tg.Met, "unmeasured target marked: %+v", tg)
	assert.False(t, tg.Measures, "unmeasured target marked: %+v", tg)
	assert.Contains(t, md, "| serial allocs/op | <= 10 | 11.0 | not met |", "markdown lacks the not-met row")
}
