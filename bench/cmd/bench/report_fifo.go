package main

import (
	"fmt"
	"strings"
)

// goal is one target of issue 12 for a primitive: metric <= v (or >= v).
type goal struct {
	metric string
	atMost bool
	v      float64
}

// fifoMetrics are the columns of issue 12's table, in its order.
var fifoMetrics = []struct{ metric, head, format string }{
	{"scripts_acq", "acquire scripts/acq", "%.2f"},
	{"rt_acq", "round trips/acq", "%.2f"},
	{"cmds_acq", "Redis commands/acq", "%.1f"},
	{"vs_mutex_h0", "acq/s vs Mutex h0", "%.2fx"},
}

// fifoGoals are issue 12's targets, by primitive (a row of prims). A metric
// without a goal is still reported.
var fifoGoals = map[string][]goal{
	"FairMutex":           {{"scripts_acq", true, 1.2}, {"rt_acq", true, 2.2}, {"cmds_acq", true, 20}, {"vs_mutex_h0", false, 0.9}},
	"RWMutex writers":     {{"scripts_acq", true, 1.2}, {"rt_acq", true, 2.2}, {"cmds_acq", true, 30}, {"vs_mutex_h0", false, 0.9}},
	"RWMutex 90% readers": {{"cmds_acq", true, 30}},
	"Semaphore 1":         {{"scripts_acq", true, 1.2}, {"rt_acq", true, 2.2}, {"cmds_acq", true, 30}, {"vs_mutex_h0", false, 0.9}},
	"Semaphore 4":         {{"scripts_acq", true, 1.2}, {"rt_acq", true, 2.2}, {"cmds_acq", true, 30}},
}

func (g goal) String() string {
	op := ">="
	if g.atMost {
		op = "<="
	}
	if g.metric == "vs_mutex_h0" {
		return fmt.Sprintf("%s %gx", op, g.v)
	}
	return fmt.Sprintf("%s %g", op, g.v)
}

func (g goal) met(v float64) bool {
	if g.atMost {
		return v <= g.v
	}
	return v >= g.v
}

// fifoTargets marks each of issue 12's targets from the primitives
// scenario of this run.
func (r *report) fifoTargets() []target {
	var ts []target
	for _, p := range prims {
		for _, m := range fifoMetrics {
			for _, g := range fifoGoals[p.name] {
				if g.metric != m.metric {
					continue
				}
				v, ok := r.get("primitives", p.name, g.metric)
				t := target{Name: p.name + " " + m.head, Target: g.String(), Measures: ok, Measured: "not measured"}
				if ok {
					t.Measured, t.Met = fmt.Sprintf(m.format, v), g.met(v)
				}
				ts = append(ts, t)
			}
		}
	}
	return ts
}

// fifoHandoff is the cross-process FIFO handoff (a FairMutex) beside the
// Mutex's, in PING round trips measured in the same run.
type fifoHandoff struct {
	P50us       float64 `json:"p50_us"`
	P99us       float64 `json:"p99_us"`
	PingP50us   float64 `json:"ping_p50_us"`
	P50Pings    float64 `json:"p50_pings"`
	MutexP50us  float64 `json:"mutex_p50_us,omitempty"`
	MutexPings  float64 `json:"mutex_p50_pings,omitempty"`
	Stalls      float64 `json:"stalls"`
	MutexTarget string  `json:"mutex_target"`
}

func (r *report) fifoHandoffFigures() *fifoHandoff {
	p50, ok1 := r.get("handoff", fifoSpec.name, "handoff_p50_us")
	ping, ok2 := r.get("handoff", fifoSpec.name, "ping_p50_us")
	if !ok1 || !ok2 || ping <= 0 {
		return nil
	}
	h := &fifoHandoff{P50us: p50, PingP50us: ping, P50Pings: p50 / ping, MutexTarget: "<= 2x PING RTT"}
	h.P99us, _ = r.get("handoff", fifoSpec.name, "handoff_p99_us")
	h.Stalls, _ = r.get("handoff", fifoSpec.name, "stalls")
	mp, ok1 := r.get("handoff", "dsync", "handoff_p50_us")
	mping, ok2 := r.get("handoff", "dsync", "ping_p50_us")
	if ok1 && ok2 && mping > 0 {
		h.MutexP50us, h.MutexPings = mp, mp/mping
	}
	return h
}

// fifoMarkdown writes issue 12's table, measured: one row per primitive,
// each cell the figure, its target and whether it is met.
func (r *report) fifoMarkdown(b *strings.Builder) {
	var rows []string
	met, n := 0, 0
	for _, p := range prims {
		x := r.result("primitives", p.name)
		if x == nil {
			continue
		}
		cells := []string{p.name}
		if p.name == refPrim {
			cells[0] += " (reference)"
		}
		for _, m := range fifoMetrics {
			v, ok := x.Median[m.metric]
			if !ok {
				cells = append(cells, "-")
				continue
			}
			c := fmt.Sprintf(m.format, v)
			for _, g := range fifoGoals[p.name] {
				if g.metric != m.metric {
					continue
				}
				n++
				mark := "**not met**"
				if g.met(v) {
					mark, met = "met", met+1
				}
				c += fmt.Sprintf(" (%s: %s)", g, mark)
			}
			cells = append(cells, c)
		}
		rows = append(rows, "| "+strings.Join(cells, " | ")+" |")
	}
	h := r.fifoHandoffFigures()
	if len(rows) == 0 && h == nil {
		return
	}
	b.WriteString("\n### FIFO primitives against issue 12's targets\n\n")
	if len(rows) > 0 {
		fmt.Fprintf(b, "16 goroutines of one process on one name, %v per repeat, medians over repeats; "+
			"acq/s as a ratio to a run of `%s` (a dsync Mutex with WithMaxLocalHandoffs(0)) right beside it, in alternating order (median of the per-pair ratios; the `%[2]s` row: medians over all its runs). "+
			"Acquire scripts: the observer's AcquireDone.Attempts. Round trips: counted in the client "+
			"(each command or pipeline sent and awaited, SUBSCRIBE on the pub/sub connection included; a grant pushed by PUBLISH is none). "+
			"Redis commands: INFO commandstats after CONFIG RESETSTAT, commands run by scripts included, the bench's INFO and CONFIG excluded. "+
			"%d of %d targets met.\n\n", r.Settings.Contended, refPrim, met, n)
		b.WriteString("| primitive |")
		for _, m := range fifoMetrics {
			fmt.Fprintf(b, " %s |", m.head)
		}
		b.WriteString("\n| --- |")
		for range fifoMetrics {
			b.WriteString(" --- |")
		}
		b.WriteString("\n" + strings.Join(rows, "\n") + "\n")
	}
	if h != nil {
		fmt.Fprintf(b, "\nCross-process FIFO handoff (FairMutex; release start in one process -> the next holder's LockContext returns in another): "+
			"p50 %.0f us = **%.1f PING round trips** (PING p50 %.0f us, same run), p99 %.0f us, %.0f stalls", h.P50us, h.P50Pings, h.PingP50us, h.P99us, h.Stalls)
		if h.MutexP50us > 0 {
			fmt.Fprintf(b, "; the Mutex (dsync, default options) in the same run: p50 %.0f us = %.1f PING round trips (its target: %s)", h.MutexP50us, h.MutexPings, h.MutexTarget)
		}
		if f, ok := wakeFloor(r); ok {
			fmt.Fprintf(b, "; a PUBLISH to a parked subscriber in another process (wake, the floor of any one-hop handoff), same run: p50 %s PING round trips", f)
		}
		b.WriteString(". Issue 12 sets no bound for it.\n")
	}
}

func (r *report) result(scenario, lib string) *result {
	for _, x := range r.Results {
		if x.Scenario == scenario && x.Lib == lib {
			return x
		}
	}
	return nil
}
