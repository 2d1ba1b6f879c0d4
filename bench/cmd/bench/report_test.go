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

// Issue 12's table is marked from the primitives' figures, both ways; a
// primitive that did not run is "not measured", never met; the FIFO handoff
// is given in PING round trips of its own run.
func TestFIFOTargetsMarkedFromFigures(t *testing.T) {
	r := newReport(settings{Reps: 1}, machine{})
	r.add("primitives", refPrim, sample{"acq_s": 1000, "vs_mutex_h0": 1, "scripts_acq": 1, "rt_acq": 2, "cmds_acq": 8})
	r.add("primitives", "FairMutex", sample{"acq_s": 950, "vs_mutex_h0": 0.95, "scripts_acq": 1.01, "rt_acq": 2.01, "cmds_acq": 18.5})
	r.add("primitives", "RWMutex writers", sample{"acq_s": 300, "vs_mutex_h0": 0.3, "scripts_acq": 3, "rt_acq": 5, "cmds_acq": 31})
	r.add("primitives", "RWMutex 90% readers", sample{"acq_s": 2000, "vs_mutex_h0": 2, "scripts_acq": 3, "rt_acq": 4, "cmds_acq": 29})
	r.add("handoff", fifoSpec.name, sample{"handoff_p50_us": 300, "handoff_p99_us": 900, "ping_p50_us": 50, "stalls": 0})
	md := r.markdown()
	got := map[string]target{}
	for _, tg := range r.FIFOTargets {
		got[tg.Name] = tg
	}
	for name, want := range map[string]bool{
		"FairMutex acquire scripts/acq":          true,
		"FairMutex round trips/acq":              true,
		"FairMutex Redis commands/acq":           true,  // 18.5 <= 20
		"FairMutex acq/s vs Mutex h0":            true,  // 0.95 >= 0.9
		"RWMutex writers Redis commands/acq":     false, // 31 > 30
		"RWMutex writers acq/s vs Mutex h0":      false,
		"RWMutex 90% readers Redis commands/acq": true,
	} {
		tg, ok := got[name]
		assert.True(t, ok, "%s missing: %+v", name, r.FIFOTargets)
		assert.Equal(t, want, tg.Met, "%s: %+v", name, tg)
		assert.True(t, tg.Measures, "%s: %+v", name, tg)
	}
	// Only the commands have a target with 90% readers.
	_, ok := got["RWMutex 90% readers acquire scripts/acq"]
	assert.False(t, ok, "a target the issue does not set")
	for _, name := range []string{"Semaphore 1 acquire scripts/acq", "Semaphore 4 Redis commands/acq"} {
		tg := got[name]
		assert.False(t, tg.Met, "unmeasured target marked: %+v", tg)
		assert.False(t, tg.Measures, "unmeasured target marked: %+v", tg)
	}
	assert.Contains(t, md, "| FairMutex | 1.01 (<= 1.2: met) | 2.01 (<= 2.2: met) | 18.5 (<= 20: met) | 0.95x (>= 0.9x: met) |")
	assert.Contains(t, md, "31.0 (<= 30: **not met**)")
	assert.Contains(t, md, "p50 300 us = **6.0 PING round trips**")
	if assert.NotNil(t, r.FIFOHandoff) {
		assert.InDelta(t, 6.0, r.FIFOHandoff.P50Pings, 1e-9)
	}
}

// Issue 14's table is marked from the figures, both ways: a row over both
// paths is met only if both are; keys left must hold in every repeat (the
// largest count, not the median); a row without figures is "not measured".
func TestMutexTargetsMarkedFromFigures(t *testing.T) {
	r := newReport(settings{Reps: 3}, machine{})
	r.add("serial", "dsync", sample{"cmds_op": 6, "allocs_op": 8})
	r.add("serial", lockerSpec.name, sample{"cmds_op": 7, "allocs_op": 9})
	r.add("serial", "raw", sample{"cmds_op": 4, "allocs_op": 1})
	r.add("parallel", "dsync", sample{"ops_s": 850, "redis_cpu_us_op": 25})
	r.add("parallel", "raw", sample{"ops_s": 1000, "redis_cpu_us_op": 10})
	for _, n := range []float64{1, 1, 2} {
		r.add("keys", "dsync", sample{"keys_left": n})
	}
	r.add("keys", lockerSpec.name, sample{"keys_left": 1, "keys {k}:mutex": 1, "keys_max_ttl_s": 3600})
	r.add("keys", "raw", sample{"keys_left": 0})
	md := r.markdown()
	got := map[string]mutexTarget{}
	for _, tg := range r.MutexTargets {
		got[tg.Name] = tg
	}
	for name, want := range map[string]bool{
		"Redis commands per LockContext/UnlockContext cycle":            true,  // 6 <= 6
		"Redis commands per Lock/Unlock cycle":                          false, // 7 > 6
		"allocations per cycle (LockContext / Lock)":                    false, // 9 > 8 on one path
		"64 g x 10k keys: ops/s vs raw":                                 true,  // 0.85x >= 0.8x
		"same: Redis CPU per op vs raw":                                 false, // 2.5x > 2x
		"keys left after 1,000 cycles of one name (LockContext / Lock)": false, // 2 in one repeat
	} {
		tg, ok := got[name]
		assert.True(t, ok, "%s missing: %+v", name, r.MutexTargets)
		assert.Equal(t, want, tg.Met, "%s: %+v", name, tg)
		assert.True(t, tg.Measures, "%s: %+v", name, tg)
	}
	tg := got["cross-process handoff p50 in PING round trips"]
	assert.False(t, tg.Met, "unmeasured target marked: %+v", tg)
	assert.False(t, tg.Measures, "unmeasured target marked: %+v", tg)
	assert.Contains(t, md, "| allocations per cycle (LockContext / Lock) | <= 8 | 8.0 / 9.0 | 1.0 | **not met** |")
	assert.Contains(t, md, "| 64 g x 10k keys: ops/s vs raw | >= 0.8x | 0.85x (850 ops/s) | 1000 ops/s | met |")
	assert.Contains(t, md, "| keys left after 1,000 cycles of one name (LockContext / Lock) | <= 1 | 2 / 1 | 0 | **not met** |")
	assert.Contains(t, md, "`dsync-locker` 1 ({k}:mutex x1")
	assert.Equal(t, "1,000", thousands(1000))
	assert.Equal(t, "100,000", thousands(100000))
	assert.Equal(t, "999", thousands(999))
}

// Issue 26's notice row: absent from a run that did not measure it (older
// results render as they did); marked from the worst kind's p99 (median
// over repeats), with the max taken over all repeats and the errors
// summed; any error makes it not met.
func TestNoticeTargetMarkedFromFigures(t *testing.T) {
	r := newReport(settings{Reps: 2}, machine{})
	r.add("serial", "raw", sample{"ns_op": 100})
	r.markdown()
	for _, tg := range r.Targets {
		assert.NotEqual(t, "forced-release notice p99", tg.Name, "a row for a scenario that did not run")
	}

	mark := func(errs float64) (target, *report) {
		r := newReport(settings{Reps: 3, NoticeRounds: 200}, machine{})
		r.add("notice", "Mutex", sample{"rounds": 200, "p50_ms": 2, "p99_ms": 5, "max_ms": 7, "errors": 0})
		r.add("notice", "Mutex", sample{"rounds": 200, "p50_ms": 3, "p99_ms": 90, "max_ms": 300, "errors": errs})
		r.add("notice", "Mutex", sample{"rounds": 200, "p50_ms": 2, "p99_ms": 6, "max_ms": 8, "errors": 0})
		r.add("notice", "Semaphore", sample{"rounds": 200, "p50_ms": 2, "p99_ms": 8, "max_ms": 9, "errors": 0})
		r.markdown()
		for _, tg := range r.Targets {
			if tg.Name == "forced-release notice p99" {
				return tg, r
			}
		}
		t.Fatalf("no notice row: %+v", r.Targets)
		return target{}, nil
	}
	tg, r := mark(0)
	assert.True(t, tg.Met, "%+v", tg)
	assert.True(t, tg.Measures, "%+v", tg)
	assert.Equal(t, "<= 100 ms (issue 26)", tg.Target)
	assert.Equal(t, "8.0 ms (Semaphore; max Mutex 300.0 ms, Semaphore 9.0 ms; 0 errors)", tg.Measured)
	rounds, _ := r.get("notice", "Mutex", "rounds")
	assert.Equal(t, 600.0, rounds, "rounds are summed over repeats")
	tg, _ = mark(1)
	assert.False(t, tg.Met, "a round whose cause was not the notice's: %+v", tg)

	// Every round failed: no figure, not a 0 ms p99, and not met.
	r = newReport(settings{Reps: 1, NoticeRounds: 200}, machine{})
	r.add("notice", "Mutex", sample{"rounds": 0, "errors": 203})
	r.add("notice", "Semaphore", sample{"rounds": 0, "errors": 203})
	md := r.markdown()
	var got *target
	for i := range r.Targets {
		if r.Targets[i].Name == "forced-release notice p99" {
			got = &r.Targets[i]
		}
	}
	if assert.NotNil(t, got, "no notice row") {
		assert.False(t, got.Met, "%+v", got)
		assert.Equal(t, "no round measured; 406 errors", got.Measured)
	}
	assert.Contains(t, md, "| Mutex | 0 | - | - | - | 203 |")
}
