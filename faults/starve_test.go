package faults

import (
	"fmt"
	"slices"
	"sync"
	"time"
)

// Starvation (issue 39). With both CPUs busy (two `yes >/dev/null` loops
// beside the suite), whole processes go unscheduled for tens of
// milliseconds at a time (dsync's TestRollingRestart: up to 103 ms at
// once in 3 processes, loopback round trips of 30-110 ms, the waits
// woken by their messages at once). A deploy's stall, the time a waiter
// of another Client waited beyond the lock's being free, then measures
// the scheduler as well as dsync. So every process whose scheduling a
// stall depends on runs a probe (startLagProbe): a goroutine that sleeps
// 1 ms in a loop and records each time it ran late, and by how much, on
// the clock the histories use (now). A stall over deployBound is excused
// only if, within the very free stretch that makes it, the probes of the
// processes involved (the waiter's, and the test process, which hosts
// the proxy every Client's connection goes through) were late by at
// least the excess (stall - deployBound): what dsync had of the CPU in
// that stretch was then within the bound (excuseStalls). Nothing is
// excused without a measured lag: on an idle machine the probes are not
// late by a millisecond, and no stall is excused.

// lagSpan is a stretch in which a process's probe was not run: from when
// its 1 ms sleep was due to end to when it ran again (unix ns).
type lagSpan struct {
	From int64 `json:"from"`
	To   int64 `json:"to"`
}

// lagProbeMin is the lateness a probe records: a sleep of 1 ms that
// returned at least this much late (less is timer slack, not
// starvation; what is not recorded is never counted as lag).
const lagProbeMin = time.Millisecond

// startLagProbe starts a process's probe; emit receives each late span.
// stop ends it (and returns once it has).
func startLagProbe(emit func(lagSpan)) (stop func()) {
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			select {
			case <-done:
				return
			default:
			}
			t0 := now()
			time.Sleep(time.Millisecond)
			t1 := now()
			if due := t0 + int64(time.Millisecond); t1-due >= int64(lagProbeMin) {
				emit(lagSpan{From: due, To: t1})
			}
		}
	}()
	return func() { close(done); <-stopped }
}

// lagLog gathers the probes' spans by process: lagTest for the test
// process, a child's slot for a child.
type lagLog struct {
	mu sync.Mutex
	by map[int][]lagSpan
}

const lagTest = -1

func newLagLog() *lagLog { return &lagLog{by: map[int][]lagSpan{}} }

func (l *lagLog) add(proc int, s lagSpan) {
	l.mu.Lock()
	l.by[proc] = append(l.by[proc], s)
	l.mu.Unlock()
}

// clear drops the spans recorded so far (out of the heap before the
// soak measures it).
func (l *lagLog) clear() {
	l.mu.Lock()
	l.by = map[int][]lagSpan{}
	l.mu.Unlock()
}

// spans returns proc's spans, sorted by start.
func (l *lagLog) spans(proc int) []lagSpan {
	l.mu.Lock()
	out := slices.Clone(l.by[proc])
	l.mu.Unlock()
	slices.SortFunc(out, func(a, b lagSpan) int { return int(a.From - b.From) })
	return out
}

// figures: how many late spans, the longest, the total, for the test
// process and for the children together.
func (l *lagLog) figures() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var test string
	var kids, n int
	var worst, total int64
	for p, ss := range l.by {
		var w, tot int64
		for _, s := range ss {
			w = max(w, s.To-s.From)
			tot += s.To - s.From
		}
		if p == lagTest {
			test = fmt.Sprintf("test process: %d late, the longest %v, %v in all; ", len(ss), ms(w), ms(tot))
			continue
		}
		kids++
		n += len(ss)
		worst = max(worst, w)
		total += tot
	}
	return fmt.Sprintf("%s%d children: %d late, the longest %v, %v in all", test, kids, n, ms(worst), ms(total))
}

// lagWithin is how long, within [from, to], at least one of the lists'
// probes was late (the union of their spans, clipped): a process's
// stretch of lag and another's at the same moment count once.
func lagWithin(from, to int64, lists ...[]lagSpan) int64 {
	var ss []lagSpan
	for _, l := range lists {
		for _, s := range l {
			if s.To > from && s.From < to {
				ss = append(ss, lagSpan{From: max(s.From, from), To: min(s.To, to)})
			}
		}
	}
	slices.SortFunc(ss, func(a, b lagSpan) int { return int(a.From - b.From) })
	var sum, at int64 = 0, from
	for _, s := range ss {
		if s.To <= at {
			continue
		}
		sum += s.To - max(s.From, at)
		at = s.To
	}
	return sum
}

// excused says whether a stretch of d (ns) in which the probes were late
// lag (ns) is explained by starvation: without the lag it would have been
// within deployBound.
func excused(d, lag int64) bool {
	return d > int64(deployBound) && lag >= d-int64(deployBound)
}

// excuseStalls weighs each deploy's stretches over deployBound (and its
// next Client's failed openings, deployNote.OpenFails) against the lag of
// the probes of the processes involved: lagOf(slot) returns them for a
// waiter (or a deploying Client) of process slot slot (nil: none, nothing
// excused).
func excuseStalls(ds []deployStall, lagOf func(slot int) [][]lagSpan) {
	for i := range ds {
		d := &ds[i]
		for j := range d.over {
			o := &d.over[j]
			o.lag = lagWithin(o.from, o.to, lagOf(o.slot)...)
			o.excused = excused(o.to-o.from, o.lag)
		}
		for j := range d.note.OpenFails {
			f := &d.note.OpenFails[j]
			f.lag = lagWithin(f.From, f.To, lagOf(d.note.Slot)...)
			f.excused = f.Dial && excused(f.To-f.From, f.lag)
		}
	}
}

// errorsOf records what a check reports (checkDeploys).
type errorsOf struct{ errs []string }

func (e *errorsOf) Helper()             {}
func (e *errorsOf) Logf(string, ...any) {}
func (e *errorsOf) Errorf(format string, args ...any) {
	e.errs = append(e.errs, fmt.Sprintf(format, args...))
}
