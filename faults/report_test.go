package faults

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"time"
)

// The suite writes docs/reliability.md itself: every scenario that
// measures figures adds a row, and TestMain writes the table when
// -reliability names a file (make chaos and make soak do). Nobody types
// the figures.
var reliabilityOut = flag.String("reliability", "", "write the fault matrix of this run to this markdown file")

type reportRow struct {
	Scenario, Primitive, Size, Faults string
	Ops                               int64
	Check                             string // porcupine's verdict, or what was checked
	Overlaps, Lost, Rejected          int64
	FencedLost                        int64
	Fenced                            bool // the rejected and lost figures apply
	Recovery                          []time.Duration
	RecoveryNote                      string // instead of Recovery
	Leaked                            int    // -1: not measured
	NoCounts                          bool   // ops, overlaps and lost do not apply
	Command                           string
	Failed                            bool
}

var report struct {
	sync.Mutex
	rows []reportRow
}

func addRow(r reportRow) {
	report.Lock()
	report.rows = append(report.rows, r)
	report.Unlock()
}

// writeReport writes the table of the rows gathered, if -reliability is
// set. passed is the outcome of the whole run.
func writeReport(passed bool) error {
	if *reliabilityOut == "" {
		return nil
	}
	report.Lock()
	defer report.Unlock()
	// Rows of other runs (make chaos, make soak) already in the file stay,
	// unless this run measured the same scenario and primitive again.
	mine := map[string]bool{}
	for _, r := range report.rows {
		mine[r.Scenario+"|"+r.Primitive] = true
	}
	var kept []string
	if old, err := os.ReadFile(*reliabilityOut); err == nil {
		for _, l := range strings.Split(string(old), "\n") {
			cells := strings.Split(l, " | ")
			if !strings.HasPrefix(l, "| ") || len(cells) < 3 || strings.HasPrefix(l, "| scenario") {
				continue
			}
			if !mine[strings.TrimPrefix(cells[0], "| ")+"|"+cells[1]] {
				kept = append(kept, l)
			}
		}
	}
	stamp := time.Now().UTC().Format("2006-01-02 15:04")
	var b strings.Builder
	fmt.Fprintf(&b, "# Reliability: the fault matrix\n\n")
	fmt.Fprintf(&b, "Written by the fault suite (`faults/`, report_test.go) when it runs with `-reliability` (`make chaos`, `make soak`); do not edit by hand. Each row is from the latest run that measured it (column *measured*).\n\n")
	outcome := "passed"
	if !passed {
		outcome = "FAILED (see the test log)"
	}
	fmt.Fprintf(&b, "- Latest run: %s UTC, %s, %s/%s, %d CPUs; outcome: %s\n", stamp, runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), outcome)
	fmt.Fprintf(&b, "- Its command: `cd faults && GOWORK=off go test %s`\n\n", strings.Join(os.Args[1:], " "))
	b.WriteString(`Columns: **ops** operations in the checked history (acquisitions and releases, Do calls and runs, Adds and Waits);
**check** porcupine's verdict on the history against the primitive's model (partitioned by name);
**overlaps** entries into the unfenced register while a holder it excludes was inside, and **lost** its lost increments
(a holder frozen by SIGSTOP past its lease and resumed writes without a fence: this is what the fence is for);
**rejected** reads and writes of the fenced counter refused for a stale token, and **fenced lost** increments the
fenced counter lost (must be 0); **recovery** after the SIGKILL of a holder, until another process acquired
(p50 / max, count); **leaked** keys without an expiry other than documented state (a Once's result, a WaitGroup's counter).
"—" where a figure does not apply (a Semaphore's permits and a WaitGroup are not fenced).

| scenario | primitive | size | faults | ops | check | overlaps | lost | rejected | fenced lost | recovery p50 / max | leaked | measured | reproduce |
|---|---|---|---|---:|---|---:|---:|---:|---:|---|---:|---|---|
`)
	for _, l := range kept {
		b.WriteString(l + "\n")
	}
	for _, r := range report.rows {
		rej, fl := "—", "—"
		if r.Fenced {
			rej, fl = fmt.Sprint(r.Rejected), fmt.Sprint(r.FencedLost)
		}
		rec := r.RecoveryNote
		if rec == "" {
			rec = "—"
			if len(r.Recovery) > 0 {
				rec = fmt.Sprintf("%v / %v (%d)", pct(r.Recovery, 50), pct(r.Recovery, 100), len(r.Recovery))
			}
		}
		check := r.Check
		if r.Failed {
			check += " (test FAILED)"
		}
		leaked := "—"
		if r.Leaked >= 0 {
			leaked = fmt.Sprint(r.Leaked)
		}
		ops, overlaps, lost := fmt.Sprint(r.Ops), fmt.Sprint(r.Overlaps), fmt.Sprint(r.Lost)
		if r.NoCounts {
			ops, overlaps, lost = "—", "—", "—"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | `%s` |\n",
			r.Scenario, r.Primitive, r.Size, r.Faults, ops, check, overlaps, lost, rej, fl, rec, leaked, stamp, r.Command)
	}
	return os.WriteFile(*reliabilityOut, []byte(b.String()), 0o644)
}
