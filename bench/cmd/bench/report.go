package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/dsync/dsync/internal/benchdoc"
)

// stallScenarios are the scenarios that count stalls.
var stallScenarios = []string{"serial", "parallel", "contended", "xproc", "handoff"}

// peers are the libs "best peer" is taken from: other people's locks, not
// our reference (raw), not the floor, not dsync.
var peers = []string{"rueidislock", "redsync", "redsync-1ms", "redislock"}

type result struct {
	Scenario string   `json:"scenario"`
	Lib      string   `json:"lib"`
	Median   sample   `json:"median"` // median over repeats; stalls and errors are sums
	Reps     []sample `json:"reps"`
}

type target struct {
	Name     string `json:"name"`
	Target   string `json:"target"`
	Measured string `json:"measured"`
	Met      bool   `json:"met"`
	Measures bool   `json:"measured_ok"` // false: not measured in this run
}

type report struct {
	Machine  machine   `json:"machine"`
	Settings settings  `json:"settings"`
	Elapsed  string    `json:"elapsed"`
	Libs     []libSpec `json:"-"`
	Results  []*result `json:"results"`
	Targets  []target  `json:"targets"`
	// FIFOTargets are issue 12's targets for the FIFO primitives.
	FIFOTargets []target     `json:"fifo_targets"`
	FIFOHandoff *fifoHandoff `json:"fifo_handoff,omitempty"`
	// MutexTargets are issue 14's targets for the Mutex's uncontended
	// cycle, with the raw lock beside.
	MutexTargets []mutexTarget `json:"mutex_targets"`
}

func newReport(st settings, m machine) *report { return &report{Settings: st, Machine: m} }

func (r *report) add(scenario, lib string, s sample) {
	fmt.Fprintf(os.Stderr, "  %-12s %s\n", lib, fmtSample(s))
	for _, x := range r.Results {
		if x.Scenario == scenario && x.Lib == lib {
			x.Reps = append(x.Reps, s)
			return
		}
	}
	r.Results = append(r.Results, &result{Scenario: scenario, Lib: lib, Reps: []sample{s}})
}

func fmtSample(s sample) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func (r *report) finish() {
	for _, x := range r.Results {
		x.Median = sample{}
		keys := map[string]bool{}
		for _, s := range x.Reps {
			for k := range s {
				keys[k] = true
			}
		}
		for k := range keys {
			var vs []float64
			for _, s := range x.Reps {
				if v, ok := s[k]; ok {
					vs = append(vs, v)
				}
			}
			if x.Scenario == "notice" && k == "max_ms" {
				// The notice's worst round over all repeats, not a median.
				x.Median[k] = slices.Max(vs)
			} else if k == "stalls" || k == "errors" || k == "lost" || k == "renew_failed" || k == "unlock_errors" || (x.Scenario == "notice" && k == "rounds") {
				var sum float64
				for _, v := range vs {
					sum += v
				}
				x.Median[k] = sum
			} else {
				x.Median[k] = median(vs)
			}
		}
	}
	r.Targets = r.targets()
	r.FIFOTargets = r.fifoTargets()
	r.FIFOHandoff = r.fifoHandoffFigures()
	r.MutexTargets = r.mutexTargets()
}

func (r *report) get(scenario, lib, metric string) (float64, bool) {
	for _, x := range r.Results {
		if x.Scenario == scenario && x.Lib == lib {
			v, ok := x.Median[metric]
			return v, ok
		}
	}
	return 0, false
}

// bestPeer returns the best peer's value of metric: the highest, or the
// lowest when low is true.
func (r *report) bestPeer(scenario, metric string, low bool) (float64, string, bool) {
	var best float64
	var who string
	for _, p := range peers {
		v, ok := r.get(scenario, p, metric)
		if !ok {
			continue
		}
		if who == "" || (low && v < best) || (!low && v > best) {
			best, who = v, p
		}
	}
	return best, who, who != ""
}

func (r *report) targets() []target {
	var ts []target
	add := func(name, tgt string, measured string, met, ok bool) {
		if !ok {
			measured, met = "not measured", false
		}
		ts = append(ts, target{Name: name, Target: tgt, Measured: measured, Met: met, Measures: ok})
	}
	ratio := func(scen, metric string, ref string) (float64, bool) {
		a, ok1 := r.get(scen, "dsync", metric)
		b, ok2 := r.get(scen, ref, metric)
		return a / b, ok1 && ok2 && b != 0
	}
	if x, ok := ratio("serial", "ns_op", "raw"); true {
		add("serial ns/op", "<= 1.2x raw", fmt.Sprintf("%.2fx raw", x), x <= 1.2, ok)
	}
	if a, ok := r.get("serial", "dsync", "allocs_op"); true {
		add("serial allocs/op", "<= 10", fmt.Sprintf("%.1f", a), a <= 10, ok)
	}
	if x, ok := ratio("parallel", "ops_s", "raw"); true {
		add("parallel ops/s vs raw", ">= 0.9x raw", fmt.Sprintf("%.2fx raw", x), x >= 0.9, ok)
	}
	peerRatio := func(scen, metric string, low bool) (float64, string, bool) {
		a, ok1 := r.get(scen, "dsync", metric)
		b, who, ok2 := r.bestPeer(scen, metric, low)
		return a / b, who, ok1 && ok2 && b != 0
	}
	if x, who, ok := peerRatio("parallel", "ops_s", false); true {
		add("parallel ops/s vs best peer", ">= 1.5x", fmt.Sprintf("%.2fx %s", x, who), x >= 1.5, ok)
	}
	if x, who, ok := peerRatio("contended", "acq_s", false); true {
		add("contended acq/s", ">= 3x best peer", fmt.Sprintf("%.1fx %s", x, who), x >= 3, ok)
	}
	if x, who, ok := peerRatio("contended", "wait_p99_ms", true); true {
		m := fmt.Sprintf("%.3fx %s", x, who)
		// A barging peer's p99 is low because its losers sleep and are
		// rarely counted; say how dsync compares with the fair peers too.
		if f, _ := r.get("contended", who, "fairness"); f < 0.9 {
			a, _ := r.get("contended", "dsync", "wait_p99_ms")
			var best float64
			var fair string
			for _, p := range peers {
				v, ok1 := r.get("contended", p, "wait_p99_ms")
				pf, _ := r.get("contended", p, "fairness")
				if ok1 && pf >= 0.9 && (fair == "" || v < best) {
					best, fair = v, p
				}
			}
			m += fmt.Sprintf(" (fairness %.2f); %.3fx %s, the best peer with fairness >= 0.9", f, a/best, fair)
		}
		add("contended wait p99", "<= 1/5 of best peer's", m, x <= 0.2, ok)
	}
	if f, ok := r.get("contended", "dsync", "fairness"); true {
		add("contended fairness", ">= 0.9", fmt.Sprintf("%.3f", f), f >= 0.9, ok)
	}
	if x, ok := r.get("contended", "dsync", "p99_fifo_x"); ok {
		// Issue 40's row: the p99 wait against a FIFO queue's own wait,
		// (g-1)/rate, and what makes the tail (tailOf): the waits during
		// which the lock went through Redis, against those during which it
		// stayed in the process. (Only in runs that measured it: results of
		// a bench before it render as they did.)
		m := fmt.Sprintf("%.2fx", x)
		if q, ok := r.get("contended", "dsync", "p99_quiet_fifo_x"); ok {
			tt, _ := r.get("contended", "dsync", "trip_tail")
			ta, _ := r.get("contended", "dsync", "trip_all")
			tf, _ := r.get("contended", "dsync", "trip_frac")
			m += fmt.Sprintf("; waits during which the lock stayed in the process: p99 %.2fx; %.0f%% of the waits >= p99 (%.0f%% of all) spanned an acquisition in Redis (%.1f%% of acquisitions)", q, tt*100, ta*100, tf*100)
		}
		add("contended wait p99 vs (g-1)/rate", "<= 3x", m, x <= 3, ok)
	}
	if x, who, ok := peerRatio("xproc", "acq_s", false); true {
		add("cross-process acq/s", ">= 2x best peer", fmt.Sprintf("%.1fx %s", x, who), x >= 2, ok)
	}
	if f, ok := r.get("xproc", "dsync", "fairness"); true {
		h0, _ := r.get("xproc", "dsync-h0", "fairness")
		add("cross-process fairness", ">= 0.9", fmt.Sprintf("%.3f (h0: %.3f)", f, h0), f >= 0.9, ok)
	}
	{
		p, ok1 := r.get("handoff", "dsync", "handoff_p50_us")
		ping, ok2 := r.get("handoff", "dsync", "ping_p50_us")
		x := p / ping
		measured := fmt.Sprintf("%.0f us = %.1fx PING (%.0f us)", p, x, ping)
		if f, ok := wakeFloor(r); ok {
			measured += "; one-hop floor (wake) " + f + " PING"
		}
		add("handoff p50", "<= 2x PING RTT", measured, x <= 2, ok1 && ok2 && ping > 0)
	}
	for _, sc := range []string{"contended", "xproc"} {
		c, ok := r.get(sc, "dsync", "cmds_acq")
		c0, _ := r.get(sc, "dsync-h0", "cmds_acq")
		add(sc+" Redis commands/acq", "<= 4", fmt.Sprintf("%.2f (h0: %.2f)", c, c0), c <= 4, ok)
		t, ok := r.get(sc, "dsync", "rt_acq")
		t0, _ := r.get(sc, "dsync-h0", "rt_acq")
		add(sc+" round trips/acq", "<= 2.5", fmt.Sprintf("%.2f (h0: %.2f)", t, t0), t <= 2.5, ok)
	}
	{
		var stalls float64
		measured := false
		for _, sc := range stallScenarios {
			for _, lib := range []string{"dsync", "dsync-h0", lockerSpec.name} {
				if v, ok := r.get(sc, lib, "stalls"); ok {
					stalls += v
					measured = true
				}
			}
		}
		add("stalls (dsync, all scenarios)", "0", fmt.Sprintf("%.0f", stalls), stalls == 0, measured)
	}
	if f, ok := r.get("primitives", "FairMutex", "fairness"); true {
		add("FairMutex fairness", ">= 0.99", fmt.Sprintf("%.4f", f), f >= 0.99, ok)
	}
	if c, ok := r.get("scale", "dsync", "cpu_pct"); true {
		add("scale renewal CPU (100k locks)", "< 5% of a core", fmt.Sprintf("%.2f%%", c), c < 5, ok)
	}
	// Issue 26's row, only in runs that measured it (results of a bench
	// before it render as they did).
	if t, ok := r.noticeTarget(); ok {
		ts = append(ts, t)
	}
	return ts
}

// col is one column of a scenario table.
type col struct {
	head, metric, format string
	ratioTo              string // "raw", "ping", "peer" (best peer, high), "peerlow"
}

func (r *report) table(b *strings.Builder, title, scen string, cols []col) {
	var rows []*result
	for _, x := range r.Results {
		if x.Scenario == scen {
			rows = append(rows, x)
		}
	}
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(b, "\n### %s\n\n| lib |", title)
	for _, c := range cols {
		fmt.Fprintf(b, " %s |", c.head)
	}
	b.WriteString("\n| --- |")
	for range cols {
		b.WriteString(" ---: |")
	}
	b.WriteString("\n")
	for _, x := range rows {
		fmt.Fprintf(b, "| %s |", x.Lib)
		for _, c := range cols {
			v, ok := x.Median[c.metric]
			if !ok {
				b.WriteString(" - |")
				continue
			}
			switch c.ratioTo {
			case "":
				fmt.Fprintf(b, " "+c.format+" |", v)
			case "raw":
				ref, _ := r.get(scen, "raw", c.metric)
				fmt.Fprintf(b, " %s |", ratioStr(v, ref))
			case "ping":
				ref, _ := x.Median["ping_p50_us"]
				fmt.Fprintf(b, " %s |", ratioStr(v, ref))
			case "peer", "peerlow":
				ref, _, _ := r.bestPeer(scen, c.metric, c.ratioTo == "peerlow")
				fmt.Fprintf(b, " %s |", ratioStr(v, ref))
			}
		}
		b.WriteString("\n")
	}
}

func ratioStr(v, ref float64) string {
	if ref == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fx", v/ref)
}

func (r *report) markdown() string {
	r.finish()
	var b strings.Builder
	m, st := r.Machine, r.Settings
	mode := "full"
	if st.Quick {
		mode = "quick"
	}
	spin := "off (idle CPUs: latencies include ~100-300 us wake-ups)"
	if st.Spin {
		spin = "on (one nice-19 busy process per CPU)"
	}
	fmt.Fprintf(&b, "## dsync bench, %s", m.Date)
	if m.Commit != "" {
		fmt.Fprintf(&b, ", commit %s", m.Commit)
	}
	b.WriteString("\n\n")
	fmt.Fprintf(&b, "- machine: %d CPUs, %s, %s, kernel %s\n", m.NProc, m.CPU, m.OS, m.Kernel)
	fmt.Fprintf(&b, "- Go %s, Redis %s (started by the bench on loopback, no persistence)\n", m.Go, m.Redis)
	fmt.Fprintf(&b, "- mode %s, %d repeats interleaved (lib order rotated per repeat), medians; busy-loop keeper: %s; run took %s\n", mode, st.Reps, spin, r.Elapsed)
	fmt.Fprintf(&b, "- peers: ")
	ran := map[string]bool{}
	for _, x := range r.Results {
		ran[x.Lib] = true
	}
	n := 0
	for _, s := range allSpecs() {
		if !ran[s.name] {
			continue // a lib this run did not measure
		}
		if n > 0 {
			b.WriteString("; ")
		}
		n++
		fmt.Fprintf(&b, "`%s` %s", s.name, s.note)
	}
	b.WriteString("\n")

	b.WriteString("\n### Targets (dsync, default options, ratios from this run)\n\n| target | goal | measured | |\n| --- | --- | --- | --- |\n")
	for _, t := range r.Targets {
		mark := "not met"
		if t.Met {
			mark = "met"
		} else if !t.Measures {
			mark = "not measured"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", t.Name, t.Target, t.Measured, mark)
	}
	r.fifoMarkdown(&b)
	r.mutexMarkdown(&b)

	r.table(&b, fmt.Sprintf("serial: 1 goroutine, lock+unlock one key (%v per repeat)", st.Serial), "serial", []col{
		{head: "ns/op", metric: "ns_op", format: "%.0f"}, {head: "vs raw", metric: "ns_op", ratioTo: "raw"},
		{head: "allocs/op", metric: "allocs_op", format: "%.1f"}, {head: "B/op", metric: "bytes_op", format: "%.0f"},
		{head: "round trips/op", metric: "rt_op", format: "%.2f"}, {head: "cmds/op", metric: "cmds_op", format: "%.2f"},
		{head: "stalls", metric: "stalls", format: "%.0f"},
	})
	r.table(&b, fmt.Sprintf("parallel: 64 goroutines, random key of 10,000 (%v)", st.Parallel), "parallel", []col{
		{head: "ops/s", metric: "ops_s", format: "%.0f"}, {head: "vs raw", metric: "ops_s", ratioTo: "raw"},
		{head: "vs best peer", metric: "ops_s", ratioTo: "peer"},
		{head: "client CPU us/op", metric: "client_cpu_us_op", format: "%.1f"}, {head: "Redis CPU us/op", metric: "redis_cpu_us_op", format: "%.1f"},
		{head: "stalls", metric: "stalls", format: "%.0f"},
	})
	contCols := []col{
		{head: "acq/s", metric: "acq_s", format: "%.0f"}, {head: "vs best peer", metric: "acq_s", ratioTo: "peer"},
		{head: "wait p50 ms", metric: "wait_p50_ms", format: "%.3f"}, {head: "wait p99 ms", metric: "wait_p99_ms", format: "%.2f"},
		{head: "p99 vs best peer", metric: "wait_p99_ms", ratioTo: "peerlow"},
		{head: "fairness", metric: "fairness", format: "%.3f"},
		{head: "cmds/acq", metric: "cmds_acq", format: "%.2f"}, {head: "round trips/acq", metric: "rt_acq", format: "%.2f"},
		{head: "stalls", metric: "stalls", format: "%.0f"}, {head: "max free ms", metric: "max_free_ms", format: "%.1f"},
	}
	r.table(&b, fmt.Sprintf("contended: 16 goroutines, one key, one process (%v)", st.Contended), "contended", contCols)
	r.table(&b, fmt.Sprintf("cross-process: 2 processes x 8 goroutines, one key (%v)", st.CrossProcess), "xproc",
		append(contCols, col{head: "process fairness", metric: "proc_fairness", format: "%.3f"}))
	r.table(&b, fmt.Sprintf("handoff across processes: release start -> waiting process's acquire returns (%d rounds per repeat)", st.HandoffRounds), "handoff", []col{
		{head: "p50 us", metric: "handoff_p50_us", format: "%.0f"}, {head: "p99 us", metric: "handoff_p99_us", format: "%.0f"},
		{head: "max ms", metric: "handoff_max_ms", format: "%.1f"}, {head: "p50 vs PING", metric: "handoff_p50_us", ratioTo: "ping"},
		{head: "PING p50 us", metric: "ping_p50_us", format: "%.0f"}, {head: "PING p99 us", metric: "ping_p99_us", format: "%.0f"},
		{head: "stalls", metric: "stalls", format: "%.0f"},
	})
	r.liveness(&b)
	r.table(&b, fmt.Sprintf("dsync primitives: 16 goroutines, one name, one process (%v)", st.Contended), "primitives", []col{
		{head: "acq/s", metric: "acq_s", format: "%.0f"}, {head: "vs " + refPrim, metric: "vs_mutex_h0", format: "%.2fx"},
		{head: "wait p50 ms", metric: "wait_p50_ms", format: "%.3f"},
		{head: "wait p99 ms", metric: "wait_p99_ms", format: "%.2f"}, {head: "fairness", metric: "fairness", format: "%.4f"},
		{head: "acquire scripts/acq", metric: "scripts_acq", format: "%.2f"}, {head: "round trips/acq", metric: "rt_acq", format: "%.2f"},
		{head: "cmds/acq", metric: "cmds_acq", format: "%.2f"}, {head: "EVALSHA/acq", metric: "evalsha_acq", format: "%.2f"},
		{head: "PUBLISH/acq", metric: "publish_acq", format: "%.2f"}, {head: "SUBSCRIBE/acq", metric: "subscribe_acq", format: "%.3f"},
		{head: "client CPU us/acq", metric: "client_cpu_us_acq", format: "%.0f"}, {head: "Redis CPU us/acq", metric: "redis_cpu_us_acq", format: "%.0f"},
		{head: "stalls", metric: "stalls", format: "%.0f"},
	})
	r.table(&b, fmt.Sprintf("forced-release notice: ForceUnlockTell start -> the holder's lock context cancelled, default lease, the holder another Client of this process or of a child process (%d rounds per kind and repeat; p50/p99 medians over repeats, max and rounds over all)", st.NoticeRounds), "notice", []col{
		{head: "rounds", metric: "rounds", format: "%.0f"}, {head: "p50 ms", metric: "p50_ms", format: "%.2f"},
		{head: "p99 ms", metric: "p99_ms", format: "%.2f"}, {head: "max ms", metric: "max_ms", format: "%.2f"},
		{head: "errors", metric: "errors", format: "%.0f"},
	})
	r.table(&b, fmt.Sprintf("scale: %d dsync locks held by one process, lease 3s (%v window)", st.ScaleLocks, st.ScaleHold), "scale", []col{
		{head: "renewal CPU % of a core", metric: "cpu_pct", format: "%.2f"}, {head: "Redis CPU %", metric: "redis_cpu_pct", format: "%.1f"},
		{head: "Redis bytes/lock", metric: "bytes_lock", format: "%.0f"}, {head: "renew round trips/s", metric: "renew_rt_s", format: "%.1f"},
		{head: "acquire all s", metric: "acquire_s", format: "%.1f"}, {head: "lost", metric: "lost", format: "%.0f"},
		{head: "failed renewal batches", metric: "renew_failed", format: "%.0f"},
	})
	return b.String()
}

func (r *report) write(dir, md string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	j, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "latest.json"), append(j, '\n'), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "latest.md"), []byte(md), 0o644)
}

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }

// readReport reads the report a run wrote to dir/latest.json.
func readReport(dir string) (*report, error) {
	b, err := os.ReadFile(filepath.Join(dir, "latest.json"))
	if err != nil {
		return nil, err
	}
	r := new(report)
	if err := json.Unmarshal(b, r); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, "latest.json"), err)
	}
	return r, nil
}

// writeDocs writes dir/latest.md again from dir/latest.json (the markdown
// is a function of the report), then the performance blocks of the
// documents under root (README.md, bench/README.md) from them.
func writeDocs(dir, root string) error {
	r, err := readReport(dir)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "latest.md"), []byte(r.markdown()), 0o644); err != nil {
		return err
	}
	return benchdoc.Write(root)
}

// liveness sums each lib's stalls over all scenarios and repeats.
func (r *report) liveness(b *strings.Builder) {
	b.WriteString("\n### liveness: stalls (lock free > 2 s while waited for), all scenarios and repeats\n\n| lib | stalls |")
	for _, sc := range stallScenarios {
		fmt.Fprintf(b, " %s |", sc)
	}
	b.WriteString("\n| --- | ---: |")
	for range stallScenarios {
		b.WriteString(" ---: |")
	}
	b.WriteString("\n")
	for _, l := range allSpecs() {
		var total float64
		var cells []string
		seen := false
		for _, sc := range stallScenarios {
			v, ok := r.get(sc, l.name, "stalls")
			if !ok {
				cells = append(cells, "-")
				continue
			}
			seen = true
			total += v
			cells = append(cells, fmt.Sprintf("%.0f", v))
		}
		if seen {
			fmt.Fprintf(b, "| %s | %.0f | %s |\n", l.name, total, strings.Join(cells, " | "))
		}
	}
}
