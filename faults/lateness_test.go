package faults

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// lateFigures sum up the waits of a chaos run that their context ended:
// how long after its end (waitEnd.end) each returned, apart for the waits
// that a SIGSTOP of their own process overlapped (a process frozen past
// its waits' deadlines returns them late: that is the fault, not dsync),
// and how late the timers ending them ran.
type lateFigures struct {
	waits, late int   // not overlapped by a stop; of those, over 100 ms late beyond their process's lag
	excused     int   // not overlapped by a stop, over 100 ms late, within it with their process's lag taken out
	maxLate     int64 // ns
	worst       wend
	stopped     int   // overlapped by a SIGSTOP of their process
	stoppedLate int   // of those, over 100 ms late
	maxStopped  int64 // ns
	timerLate   int   // waits whose context's timer ran over 100 ms late
	maxTimer    int64 // ns
}

const lateBound = 100 * time.Millisecond

// lateness sums up waits; lagOf (nil: no probes) returns the lag spans of
// a process slot's probe: a wait late over the bound by no more than its
// own process's lag between its context's end and its return is excused
// (the process was not run: both CPUs busy), as a deploy's stall is.
func lateness(waits []wend, stops []fault, lagOf func(slot int) []lagSpan) lateFigures {
	var f lateFigures
	for _, w := range waits {
		late := w.Ret - w.End
		if w.End == 0 { // it returned before its context ended
			late = 0
		}
		if w.Timer > int64(lateBound) {
			f.timerLate++
		}
		f.maxTimer = max(f.maxTimer, w.Timer)
		stopped := false
		for _, s := range stops {
			if s.slot == w.Slot && s.at < w.Ret && s.till > w.Call {
				stopped = true
				break
			}
		}
		if stopped {
			f.stopped++
			if late > int64(lateBound) {
				f.stoppedLate++
			}
			f.maxStopped = max(f.maxStopped, late)
			continue
		}
		f.waits++
		if late > int64(lateBound) && lagOf != nil && late-lagWithin(w.End, w.Ret, lagOf(w.Slot)) <= int64(lateBound) {
			f.excused++
			continue
		}
		if late > int64(lateBound) {
			f.late++
		}
		if late > f.maxLate {
			f.maxLate, f.worst = late, w
		}
	}
	return f
}

// lagLate sums up the waits their context ended in a process whose
// probe measured its lag: those over lateBound late, and of those the
// ones the lag within [end, return] explains (without it they would have
// been within the bound).
type lagLate struct {
	waits, late, excused int
	worst                int64 // ns: the latest not excused
	worstLag             int64 // ns: its lag
}

func lateBeyondLag(waits []wend, lag ...[]lagSpan) lagLate {
	var f lagLate
	for _, w := range waits {
		if w.End == 0 { // it returned before its context ended
			continue
		}
		f.waits++
		late := w.Ret - w.End
		if late <= int64(lateBound) {
			continue
		}
		f.late++
		l := lagWithin(w.End, w.Ret, lag...)
		if l >= late-int64(lateBound) {
			f.excused++
			continue
		}
		if late > f.worst {
			f.worst, f.worstLag = late, l
		}
	}
	return f
}

func (f lagLate) String() string {
	return fmt.Sprintf("%d waits ended by their context, %d returned over %v after its end, %d of them excused by the probe's lag meanwhile; the latest not excused %v (lag %v)",
		f.waits, f.late, lateBound, f.excused, ms(f.worst), ms(f.worstLag))
}

func ms(ns int64) time.Duration { return time.Duration(ns).Round(time.Millisecond) }

// String is the figures as the report gives them.
func (f lateFigures) String() string {
	// How soon the runtime ran a goroutine the latest wait's end woke
	// (waitEnd.woke): a late return whose end's other goroutine ran as
	// late was the process's scheduling, not the wait's path.
	woke := "—"
	if f.worst.Woke != 0 && f.worst.End != 0 {
		woke = ms(f.worst.Woke - f.worst.End).String()
	}
	return fmt.Sprintf("latest return %v after its context ended (a goroutine its end woke ran %s after it), %d over %v (and %d over it by no more than their process's lag meanwhile, excused); %d more a SIGSTOP of their process overlapped, %d over, latest %v; timers ending them up to %v late, %d over %v",
		ms(f.maxLate), woke, f.late, lateBound, f.excused, f.stopped, f.stoppedLate, ms(f.maxStopped), ms(f.maxTimer), f.timerLate, lateBound)
}

// TestWaitEndMeasuresFromTheEnd: a wait is measured from the moment its
// context's Done closed (exact, the timer records it first), a call that
// ignores its context is counted late, one that returned by the clock
// before the context ended is not, and the parent leaves out only the
// waits a SIGSTOP of their own process overlapped.
func TestWaitEndMeasuresFromTheEnd(t *testing.T) {
	var tl chaosTally
	w := &chaosWorker{tl: &tl, mu: &sync.Mutex{}, rec: func(cev) {}}

	ctx, cancel, e := endAfter(context.Background(), 5*time.Millisecond, true)
	dl, ok := ctx.Deadline()
	require.True(t, ok, "a deadline context shows its deadline")
	require.Equal(t, e.due, dl.UnixNano())
	call := now()
	<-ctx.Done()
	ret := now()
	require.ErrorIs(t, ctx.Err(), context.DeadlineExceeded)
	require.NotZero(t, e.end())
	require.LessOrEqual(t, e.end(), ret, "Done closed after the moment recorded")
	require.GreaterOrEqual(t, e.end(), e.due)
	cancel()
	w.failed(ctx.Err(), call, ret, e)
	require.Zero(t, tl.Late)

	// A call that ignores its context: it returns 150 ms after the end.
	ctx, cancel, e = endAfter(context.Background(), time.Millisecond, false)
	call = now()
	<-ctx.Done()
	require.ErrorIs(t, ctx.Err(), context.Canceled)
	for now() < e.end()+int64(150*time.Millisecond) {
		time.Sleep(5 * time.Millisecond) // the call not looking at ctx
	}
	ret = now()
	cancel()
	w.failed(context.Canceled, call, ret, e)
	require.EqualValues(t, 1, tl.Late, "a call 150 ms after its context ended is late")
	require.GreaterOrEqual(t, tl.MaxLate, int64(150*time.Millisecond))

	// A call that saw its deadline by the clock before the timer ran.
	ctx, cancel, e = endAfter(context.Background(), time.Hour, true)
	call = now()
	cancel()
	w.failed(context.DeadlineExceeded, call, now(), e)
	require.Zero(t, e.end(), "the context ended by the caller's cancel, after the call")
	require.EqualValues(t, 1, tl.Late)
	require.ErrorIs(t, ctx.Err(), context.Canceled)

	// The parent's view: only a wait its own process's stop overlapped is
	// left out.
	ws := []wend{
		{Call: 100, Ret: 400, End: 200, Slot: 1}, // stopped 250..350: left out
		{Call: 100, Ret: 400, End: 200, Slot: 2}, // another process was stopped
		{Call: 360, Ret: 500, End: 380, Slot: 1}, // after the stop
		{Call: 100, Ret: 400, End: 0, Slot: 2, Timer: 300},
	}
	ms := int64(time.Millisecond)
	for i := range ws {
		ws[i].Call, ws[i].Ret, ws[i].End, ws[i].Timer = ws[i].Call*ms, ws[i].Ret*ms, ws[i].End*ms, ws[i].Timer*ms
	}
	f := lateness(ws, []fault{{slot: 1, at: 250 * ms, till: 350 * ms}}, nil)
	require.Equal(t, 3, f.waits)
	require.Equal(t, 2, f.late)
	require.Equal(t, 200*ms, f.maxLate)
	require.Equal(t, 1, f.stopped)
	require.Equal(t, 1, f.stoppedLate)
	require.Equal(t, 1, f.timerLate)

	// With probes: slot 2's 200 ms late wait is excused by 100 ms of its
	// own process's lag within it, not by slot 1's.
	lag := map[int][]lagSpan{2: {{From: 250 * ms, To: 350 * ms}}, 1: {{From: 600 * ms, To: 700 * ms}}}
	f = lateness(ws, []fault{{slot: 1, at: 250 * ms, till: 350 * ms}}, func(slot int) []lagSpan { return lag[slot] })
	require.Equal(t, 3, f.waits)
	require.Equal(t, 1, f.excused)
	require.Equal(t, 1, f.late, "slot 1's wait after the stop (120 ms late): its process's lag came after its return")
	lag[2] = []lagSpan{{From: 250 * ms, To: 340 * ms}}
	f = lateness(ws, []fault{{slot: 1, at: 250 * ms, till: 350 * ms}}, func(slot int) []lagSpan { return lag[slot] })
	require.Equal(t, 0, f.excused, "90 ms of lag does not excuse 200 ms")
	require.Equal(t, 2, f.late)
}

// TestLateBeyondLag: a wait late by more than the bound is excused only
// by lag measured between its context's end and its return, at least its
// excess over the bound.
func TestLateBeyondLag(t *testing.T) {
	ms := func(n int64) int64 { return n * int64(time.Millisecond) }
	waits := []wend{
		{End: ms(1000), Ret: ms(1050)}, // within the bound
		{End: ms(2000), Ret: ms(2218)}, // 218 ms late, 201 ms of lag within: excused
		{End: ms(3000), Ret: ms(3218)}, // 218 ms late, 50 ms of lag within: late
		{End: ms(4000), Ret: ms(4150)}, // 150 ms late, its lag before its end: late
		{End: 0, Ret: ms(5000)},        // returned before its end: not counted
		{End: ms(6000), Ret: ms(6101)}, // 101 ms late, 1 ms of lag split in two spans
	}
	lag := []lagSpan{
		{From: ms(2010), To: ms(2211)},
		{From: ms(3100), To: ms(3150)},
		{From: ms(3900), To: ms(3999)},
		{From: ms(6010), To: ms(6010) + ms(1)/2}, {From: ms(6050), To: ms(6050) + ms(1)/2},
	}
	f := lateBeyondLag(waits, lag)
	require.Equal(t, 5, f.waits)
	require.Equal(t, 4, f.late)
	require.Equal(t, 2, f.excused, "the 218 ms one with 201 ms of lag and the 101 ms one with 1 ms")
	require.Equal(t, ms(218), f.worst)
	require.Equal(t, ms(50), f.worstLag)
}
