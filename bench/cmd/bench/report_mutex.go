package main

import (
	"fmt"
	"slices"
	"strings"
)

// mutexTarget is one row of issue 14's table: the Mutex's figure, the goal,
// and the raw lock's figure beside it (SET NX PX + compare-and-delete, the
// reference the issue measures against).
type mutexTarget struct {
	target
	Raw string `json:"raw"`
}

// maxRep is the largest value of metric over the repeats of lib in
// scenario (for counts whose bound must hold in every repeat).
func (r *report) maxRep(scenario, lib, metric string) (float64, sample, bool) {
	x := r.result(scenario, lib)
	if x == nil {
		return 0, nil, false
	}
	var best float64
	var at sample
	for _, s := range x.Reps {
		if v, ok := s[metric]; ok && (at == nil || v > best) {
			best, at = v, s
		}
	}
	return best, at, at != nil
}

// mutexTargets marks issue 14's targets from this run: serial (commands and
// allocations per cycle, on both paths), parallel (ops/s and Redis CPU per
// op against raw), keys (keys left after 1,000 cycles, both paths) and
// handoff (p50 in PING round trips of the same repeat set).
func (r *report) mutexTargets() []mutexTarget {
	var ts []mutexTarget
	add := func(name, goal, measured, raw string, met, ok bool) {
		if !ok {
			measured, met = "not measured", false
		}
		ts = append(ts, mutexTarget{target: target{Name: name, Target: goal, Measured: measured, Met: met, Measures: ok}, Raw: raw})
	}
	rawFig := func(scen, metric, format string) string {
		if v, ok := r.get(scen, "raw", metric); ok {
			return fmt.Sprintf(format, v)
		}
		return "-"
	}
	lc, lk := "dsync", lockerSpec.name
	for _, p := range []struct{ name, lib string }{{"LockContext/UnlockContext", lc}, {"Lock/Unlock", lk}} {
		v, ok := r.get("serial", p.lib, "cmds_op")
		add("Redis commands per "+p.name+" cycle", "<= 6", fmt.Sprintf("%.2f", v), rawFig("serial", "cmds_op", "%.2f"), v <= 6, ok)
	}
	{
		a, ok1 := r.get("serial", lc, "allocs_op")
		b, ok2 := r.get("serial", lk, "allocs_op")
		add("allocations per cycle (LockContext / Lock)", "<= 8", fmt.Sprintf("%.1f / %.1f", a, b), rawFig("serial", "allocs_op", "%.1f"),
			a <= 8 && b <= 8, ok1 && ok2)
	}
	{
		a, ok1 := r.get("parallel", lc, "ops_s")
		b, ok2 := r.get("parallel", "raw", "ops_s")
		x := a / b
		add("64 g x 10k keys: ops/s vs raw", ">= 0.8x", fmt.Sprintf("%.2fx (%.0f ops/s)", x, a), rawFig("parallel", "ops_s", "%.0f ops/s"),
			x >= 0.8, ok1 && ok2 && b > 0)
	}
	{
		a, ok1 := r.get("parallel", lc, "redis_cpu_us_op")
		b, ok2 := r.get("parallel", "raw", "redis_cpu_us_op")
		x := a / b
		add("same: Redis CPU per op vs raw", "<= 2.0x", fmt.Sprintf("%.2fx (%.1f us/op)", x, a), rawFig("parallel", "redis_cpu_us_op", "%.1f us/op"),
			x <= 2, ok1 && ok2 && b > 0)
	}
	{
		a, _, ok1 := r.maxRep("keys", lc, "keys_left")
		b, _, ok2 := r.maxRep("keys", lk, "keys_left")
		raw := "-"
		if v, _, ok := r.maxRep("keys", "raw", "keys_left"); ok {
			raw = fmt.Sprintf("%.0f", v)
		}
		add(fmt.Sprintf("keys left after %s cycles of one name (LockContext / Lock)", thousands(keysCycles)), "<= 1", fmt.Sprintf("%.0f / %.0f", a, b), raw,
			a <= 1 && b <= 1, ok1 && ok2)
	}
	{
		p, ok1 := r.get("handoff", lc, "handoff_p50_us")
		ping, ok2 := r.get("handoff", lc, "ping_p50_us")
		raw := "-"
		if rp, ok := r.get("handoff", "raw", "handoff_p50_us"); ok {
			if rping, ok := r.get("handoff", "raw", "ping_p50_us"); ok && rping > 0 {
				raw = fmt.Sprintf("%.1f (%.0f us)", rp/rping, rp)
			}
		}
		x := p / ping
		measured := fmt.Sprintf("%.1f (%.0f us; PING %.0f us)", x, p, ping)
		if f, ok := wakeFloor(r); ok {
			measured += fmt.Sprintf("; one-hop floor (wake) %s", f)
		}
		add("cross-process handoff p50 in PING round trips", "<= 2", measured, raw, x <= 2, ok1 && ok2 && ping > 0)
	}
	return ts
}

// mutexMarkdown writes issue 14's table, measured, with the raw lock
// beside, and what the keys left were.
func (r *report) mutexMarkdown(b *strings.Builder) {
	measured := 0
	for _, t := range r.MutexTargets {
		if t.Measures {
			measured++
		}
	}
	if measured == 0 {
		return
	}
	met := 0
	for _, t := range r.MutexTargets {
		if t.Met {
			met++
		}
	}
	fmt.Fprintf(b, "\n### Mutex floor against issue 14's targets\n\n"+
		"dsync Mutex, default options; `raw` (rueidis SET NX PX + EVALSHA compare-and-delete) beside it; medians of %d repeats. "+
		"Commands per cycle: INFO commandstats deltas over %s uncontended lock+unlock cycles of the serial scenario (commands run by scripts included, the bench's INFO excluded); "+
		"allocations: runtime.MemStats Mallocs over the same cycles (process-wide); "+
		"LockContext/UnlockContext is `dsync`, Lock/Unlock (sync.Locker) is `%s`. "+
		"ops/s and Redis CPU per op (INFO used_cpu_user + used_cpu_sys) from the parallel scenario, the ratio of the medians. "+
		"Keys left: %s cycles of one name on a Client of its own (WithKeyPrefix, fresh per repeat), then, the lock released, SCAN of that prefix; the largest count over the repeats. "+
		"Handoff: the handoff scenario's p50 (median over repeats) divided by the PING p50 measured beside it (median over the same repeats). %d of %d targets met.\n\n",
		r.Settings.Reps, thousands(serialCountOps), lockerSpec.name, thousands(keysCycles), met, len(r.MutexTargets))
	b.WriteString("| target | goal | dsync | raw | |\n| --- | --- | --- | --- | --- |\n")
	for _, t := range r.MutexTargets {
		mark := "**not met**"
		if t.Met {
			mark = "met"
		} else if !t.Measures {
			mark = "not measured"
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s |\n", t.Name, t.Target, t.Measured, t.Raw, mark)
	}
	var lines []string
	for _, lib := range []string{"dsync", lockerSpec.name, "raw"} {
		n, s, ok := r.maxRep("keys", lib, "keys_left")
		if !ok {
			continue
		}
		var kinds []string
		for k, v := range s {
			if kind, ok := strings.CutPrefix(k, "keys "); ok {
				kinds = append(kinds, fmt.Sprintf("%s x%.0f", kind, v))
			}
		}
		slices.Sort(kinds)
		line := fmt.Sprintf("`%s` %.0f", lib, n)
		if len(kinds) > 0 {
			line += fmt.Sprintf(" (%s; %.0f without TTL, longest TTL %.0f s)", strings.Join(kinds, ", "), s["keys_no_ttl"], s["keys_max_ttl_s"])
		}
		lines = append(lines, line)
	}
	if len(lines) > 0 {
		fmt.Fprintf(b, "\nKeys left after %s cycles (the repeat with the most): %s.\n", thousands(keysCycles), strings.Join(lines, "; "))
	}
}

// thousands formats n with a comma between thousands: 1000 -> "1,000".
func thousands(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// wakeFloor is the wake row of the handoff scenario (wakeSpec: a PUBLISH
// to a parked subscriber in another process, the least any one-hop
// cross-process handoff costs), as "N.N (M us)" PING round trips.
func wakeFloor(r *report) (string, bool) {
	p, ok1 := r.get("handoff", wakeSpec.name, "handoff_p50_us")
	ping, ok2 := r.get("handoff", wakeSpec.name, "ping_p50_us")
	if !ok1 || !ok2 || ping <= 0 {
		return "", false
	}
	return fmt.Sprintf("%.1f (%.0f us)", p/ping, p), true
}
