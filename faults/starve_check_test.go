package faults

import (
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestFaultStallExcusedOnlyByLag: a deploy's stall over deployBound is
// excused only by a lag of the probes, within the stretch that makes it,
// of at least its excess; without one (no probe, a lag elsewhere, a lag
// too short, one process's lag counted twice) it fails checkDeploys, as
// does every stretch over the bound that is not excused, however the
// deploy's worst one fares. A failed opening of the next Client is
// excused likewise, and only if it was the harness's own connection.
func TestFaultStallExcusedOnlyByLag(t *testing.T) {
	msec := int64(time.Millisecond)
	d := deployNote{Slot: 1, Name: "chaos1g0", Ident: "chaos1g0/1", Start: 1000 * msec, End: 1010 * msec, Quiet: true}
	held := []cev{
		{Op: "acq", Who: 10, Slot: 1, Call: 800 * msec, Ret: 900 * msec},
		{Op: "rel", Who: 10, Slot: 1, Call: 950 * msec, Ret: 1010 * msec, Out: "closed", Cl: true},
		// The lock, free from the Close's return (1010), given 290 ms
		// later to a waiter of slot 2: an excess of 190 ms.
		{Op: "acq", Who: 20, Slot: 2, Call: 950 * msec, Ret: 1300 * msec},
		{Op: "rel", Who: 20, Slot: 2, Call: 1301 * msec, Ret: 1400 * msec},
	}
	span := func(from, to int64) lagSpan { return lagSpan{From: from * msec, To: to * msec} }
	check := func(name string, evs []cev, lagOf func(int) [][]lagSpan, wantErrs, wantExcused int) deployFigs {
		t.Helper()
		ds := deployStalls("mutex", evs, nil, []deployNote{d})
		require.Len(t, ds, 1, name)
		require.NotEmpty(t, ds[0].over, "%s: a stretch over the bound", name)
		if lagOf != nil {
			excuseStalls(ds, lagOf)
		}
		var e errorsOf
		checkDeploys(&e, ds)
		assert.Len(t, e.errs, wantErrs, "%s: %v", name, e.errs)
		f := deployFigures(ds)
		assert.Equal(t, wantExcused, f.excused, name)
		assert.Equal(t, 290*msec, f.worst.stall, "%s: the raw worst stall is kept", name)
		return f
	}
	// The waiter's process (slot 2) and the test process (the proxy).
	lags := func(test, child []lagSpan) func(int) [][]lagSpan {
		return func(slot int) [][]lagSpan {
			if slot != 2 {
				return nil
			}
			return [][]lagSpan{test, child}
		}
	}
	check("no probe", held, nil, 1, 0)
	check("probes never late", held, lags(nil, nil), 1, 0)
	f := check("the waiter's process late 200 ms in the stretch", held, lags(nil, []lagSpan{span(1050, 1250)}), 0, 1)
	assert.Equal(t, 200*msec, f.excusedLag)
	assert.Contains(t, f.String(), "1 excused by starvation")
	check("the test process late 190 ms in it, in two spans", held, lags([]lagSpan{span(1020, 1120), span(1200, 1290)}, nil), 0, 1)
	check("late 150 ms only: less than the excess", held, lags(nil, []lagSpan{span(1050, 1200)}), 1, 0)
	check("late 300 ms, but before the lock was free", held, lags([]lagSpan{span(700, 1000)}, nil), 1, 0)
	check("half of a 300 ms lag in the stretch", held, lags([]lagSpan{span(860, 1160)}, nil), 1, 0)
	check("two processes late at the same moment count once", held, lags([]lagSpan{span(1050, 1200)}, []lagSpan{span(1050, 1200)}), 1, 0)
	check("two processes late one after the other add up", held, lags([]lagSpan{span(1050, 1150)}, []lagSpan{span(1150, 1250)}), 0, 1)

	// A second waiter over the bound in the same deploy (of slot 3,
	// waiting from 1000: free 1010-1300 as slot 2's, and again from 1400
	// until it was given the lock 150 ms later): each stretch is weighed
	// on its own, and the lag that excuses the worst does not excuse the
	// one after it.
	two := append(append([]cev(nil), held...),
		cev{Op: "acq", Who: 30, Slot: 3, Call: 1000 * msec, Ret: 1550 * msec},
		cev{Op: "rel", Who: 30, Slot: 3, Call: 1551 * msec, Ret: 1552 * msec})
	both := func(slot int) [][]lagSpan { return [][]lagSpan{{span(1050, 1250)}} }
	f = check("the worst excused, another not", two, both, 1, 2)
	assert.Equal(t, 3, f.overs)
	assert.Equal(t, 150*msec, f.unexcused)

	// The next Client's openings: 600 ms attempts that failed.
	d.OpenFails = []openFail{
		{From: 2000 * msec, To: 2600 * msec, Err: "its rueidis client: context deadline exceeded", Dial: true},
		{From: 3000 * msec, To: 3600 * msec, Err: "its rueidis client: context deadline exceeded", Dial: true},
		{From: 4000 * msec, To: 4600 * msec, Err: "probe: context deadline exceeded"},
	}
	opens := func(int) [][]lagSpan {
		return [][]lagSpan{{span(1050, 1250), span(2050, 2550), span(3050, 3200), span(4050, 4550)}}
	}
	ds := deployStalls("mutex", held, nil, []deployNote{d})
	excuseStalls(ds, opens)
	var e errorsOf
	checkDeploys(&e, ds)
	of := ds[0].note.OpenFails
	assert.True(t, of[0].excused, "the harness's connection, late 500 ms of 600")
	assert.False(t, of[1].excused, "late 150 ms of 600")
	assert.False(t, of[2].excused, "not the harness's connection")
	assert.Len(t, e.errs, 2, "%v", e.errs)
	f = deployFigures(ds)
	assert.Equal(t, 3, f.openFails)
	assert.Equal(t, 1, f.openExcused)
}

// TestFaultLagProbeSeesStarvation: the probe records the time its process
// did not run it. With one P taken by a goroutine that never yields (Go
// preempts it every 10 ms or so), the probe's 1 ms sleeps end late, and
// the spans it records lie within the busy stretch.
func TestFaultLagProbeSeesStarvation(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	got := make(chan lagSpan, 1<<12)
	stop := startLagProbe(func(s lagSpan) {
		select {
		case got <- s:
		default:
		}
	})
	time.Sleep(5 * time.Millisecond) // the probe asleep, due to wake
	from := now()
	for now()-from < int64(100*time.Millisecond) {
	}
	to := now()
	stop()
	close(got)
	var n int
	var lag int64
	for s := range got {
		if s.To > from && s.From < to {
			n++
			lag += min(s.To, to) - max(s.From, from)
		}
	}
	require.Positive(t, n, "the probe was late while its P was busy")
	assert.GreaterOrEqual(t, lag, int64(10*time.Millisecond), "late for at least a preemption slice")
}

// releaseBudget is how long a release waits for Redis' answer to one try
// (dsync's cleanupTimeout).
const releaseBudget = 2 * time.Second

// budgetExcused says whether a release that Redis did not answer within its
// own budget is explained by starvation: its process's probes were late at
// least the budget less deployBound within it (a try is answered within
// deployBound on this loopback server unless the process stalls).
func budgetExcused(lag int64) bool { return lag >= int64(releaseBudget-deployBound) }

// checkBudgetReleases reports each release whose own budget ran out
// (releaseBudgetSpent) that starvation does not excuse; lagOf returns a
// process's probes (nil: none, nothing excused).
func checkBudgetReleases(t interface {
	Errorf(string, ...any)
	Logf(string, ...any)
}, bs []wend, lagOf func(int) []lagSpan) {
	excused := 0
	for _, b := range bs {
		var lag int64
		if lagOf != nil {
			lag = lagWithin(b.Call, b.Ret, lagOf(b.Slot))
		}
		if budgetExcused(lag) {
			excused++
			continue
		}
		t.Errorf("a release by worker %d (slot %d) of name %d got no answer within its own %v budget with its context live (%v), its process's probes late only %v meanwhile", b.Who, b.Slot, b.K, releaseBudget, time.Duration(b.Ret-b.Call).Round(time.Millisecond), time.Duration(lag).Round(time.Millisecond))
	}
	if len(bs) > 0 {
		t.Logf("%d releases got no answer within their own %v budget, %d of them excused by starvation (probes late >= %v within them)", len(bs), releaseBudget, excused, releaseBudget-deployBound)
	}
}

// TestFaultBudgetReleaseExcusedOnlyByLag: a release that spent its own
// budget is excused only by its process's probes late at least the budget
// less deployBound within it; a lag of another process, one outside it, or
// one too short fails the check, as does any release without probes.
func TestFaultBudgetReleaseExcusedOnlyByLag(t *testing.T) {
	ms := int64(time.Millisecond)
	b := wend{Call: 1000 * ms, Ret: 3100 * ms, Slot: 1, K: 0, Who: 2}
	lags := map[int][]lagSpan{
		1: {{From: 1050 * ms, To: 3000 * ms}}, // 1.95 s within it
		2: {{From: 1000 * ms, To: 3100 * ms}},
	}
	cases := []struct {
		name  string
		lagOf func(int) []lagSpan
		bad   bool
	}{
		{"starved within", func(s int) []lagSpan { return lags[s] }, false},
		{"no probes", nil, true},
		{"another process starved", func(s int) []lagSpan { return map[int][]lagSpan{2: lags[2]}[s] }, true},
		{"starved elsewhere", func(int) []lagSpan { return []lagSpan{{From: 4000 * ms, To: 7000 * ms}} }, true},
		{"starved too briefly", func(int) []lagSpan { return []lagSpan{{From: 1000 * ms, To: 2800 * ms}} }, true},
	}
	for _, c := range cases {
		var e errorsOf
		checkBudgetReleases(&e, []wend{b}, c.lagOf)
		assert.Equal(t, c.bad, len(e.errs) > 0, "%s: %v", c.name, e.errs)
	}
}
