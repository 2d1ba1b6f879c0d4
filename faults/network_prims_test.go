package faults

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Network faults for the primitives with a queue or permits (FairMutex,
// RWMutex, Semaphore): three Clients behind a proxy, two goroutines each,
// contend on one lock for 3 s (acquisitions with a 3 s deadline, or 1-50 ms,
// or cancelled after 0-30 ms, as in the chaos scenario) while the fault
// strikes: latency (a 300 ms round trip), toxiproxy's timeout (data stops,
// the connection closes after 200 ms), resets, limit_data (connections cut
// after 2 KiB) in bursts of 300 ms every 800 ms, or a blackhole of 1.5
// leases. The history must be linearizable, no call may return more than
// 100 ms after its context ended (when its Done channel closed: on a
// loaded machine Go runs the deadline timer late, and how late is
// reported apart; see waitEnd), and once the fault is gone, while the
// Clients stay open, Redis must show within 6 s no holder, no waiter, no
// entry in the raw queue structures, every permit free, and no wakeup
// channel subscribed.
//
// Deploys (issue 25) strike in every row: from 100 ms after the start,
// every 100-250 ms, through the strikes and after them until 3 deploys
// were outside every strike's window (netQuietDeploys: the run then
// outlasts the 3 s of strikes by a few seconds) and until a lease before
// the end, one of the three
// processes (in turn) closes its Client gracefully, whatever its two workers
// are doing (holding, one in two deploys waiting up to a lease to catch a
// writer inside its critical section, waiting, between calls), and opens
// a new one, with its own rueidis client through the proxy, on which the
// workers go on (chaos_deploy_test.go's chaosDeploy, as in scenario 1).
// Nothing of the closed Client may be in Redis once its Close returned
// (looked at directly, not through the proxy); for a quiet deploy (see
// netQuiet; every row has netQuietDeploys) no waiter of another Client may wait more than deployBound
// beyond the lock's being free (deployStalls). A deploy a strike overlaps
// is measured and reported, not held to the bound: under latency a grant
// takes 150 ms to arrive, under resets its message may be lost and the
// waiter's lease/3 poll finds it; and what a Close that could not reach
// Redis leaves is left to the leases (Client.Close), so it must be gone
// within netLeftBound of Close's return instead.
func TestFaultNetworkPrimitives(t *testing.T) {
	faults := []string{"none", "latency", "timeout", "reset", "limit_data", "blackhole"}
	for _, kind := range []string{"fair", "rw", "sem"} {
		for _, f := range faults {
			t.Run(kind+"/"+f, func(t *testing.T) { networkPrim(t, kind, f) })
		}
	}
}

var netCleanBound = 6 * time.Second

func networkPrim(t *testing.T, kind, fault string) {
	const lease = time.Second
	dur := 3 * time.Second
	srv := startRedis(t)
	px := newProxy(t, srv.Addr)
	prefix := testPrefix()
	// Every Client, the proxy and the store are in this process: its
	// starvation probe is the one a deploy's stall over the bound is
	// weighed against (excuseStalls; in CI of 72874ff, 2026-12-04, the
	// children of scenario 1 beside it were late by up to 2.8 s).
	lags := newLagLog()
	defer startLagProbe(func(s lagSpan) { lags.add(lagTest, s) })()
	store := newChaosStore(chaosSemSize)
	url := store.serve(t)
	res := chaosRes{remote{url: url, hc: newHTTPClient(t)}, 0}
	var (
		mu  sync.Mutex
		ev  []cev
		tl  chaosTally
		tmu sync.Mutex
		seq atomic.Int64
		wg  sync.WaitGroup
	)
	// Each process's succession of Clients (deploys): the prober and the
	// leftover scan talk to Redis directly, each Client through the proxy
	// with its own rueidis client.
	direct := client(t, srv.Addr)
	deps := make([]*chaosDeploy, 3)
	for c := range deps {
		d, err := newChaosDeployDial(c, direct, proxyDial(px.Addr), prefix, lease)
		require.NoError(t, err)
		t.Cleanup(d.close)
		deps[c] = d
	}
	ends := make([]int64, 6) // when each worker stopped
	var cancelled []wend     // the waits their context ended (under mu)
	// The strikes come in the first dur; the workers go on until the
	// deploys are done (halt), up to netRunMax.
	start := time.Now()
	until := start.Add(dur)
	halt := make(chan struct{})
	for c := range 3 {
		for g := range 2 {
			w := &chaosWorker{c: deps[c].gen().c, res: res, who: c*2 + g, until: start.Add(netRunMax), halt: halt, tl: &tl, mu: &tmu, seq: &seq, dep: deps[c],
				rec:  func(e cev) { e.Slot = c; mu.Lock(); ev = append(ev, e); mu.Unlock() },
				wrec: func(e wend) { e.Slot = c; mu.Lock(); cancelled = append(cancelled, e); mu.Unlock() }}
			wg.Add(1)
			go func() {
				defer wg.Done()
				w.lockLoop(kind, w.lockKind(kind))
				ends[w.who] = now()
			}()
		}
	}
	// The deploys.
	var (
		notes []deployNote
		gone  = make([]chan int64, 0, 64) // per deploy: when nothing of the closed Client was left (0: not by netLeftBound)
		dwg   sync.WaitGroup
	)
	// The fault; strikes records when each was on (guarded by smu: the
	// deploys read it); struckAll is closed once the last has ended.
	var (
		strikes   [][2]int64
		smu       sync.Mutex
		struckAll = make(chan struct{})
	)
	strike := func(off func(), on int64) {
		off()
		smu.Lock()
		strikes = append(strikes, [2]int64{on, now()})
		smu.Unlock()
	}
	deployed := make(chan struct{})
	go func() {
		defer close(deployed)
		defer close(halt)
		time.Sleep(100 * time.Millisecond)
		// Deploys every 100-250 ms through the strikes, and after them
		// until netQuietDeploys are outside every strike's window (from
		// a lease after the last strike's end: in a blackhole the next
		// Client opens only when it is over, and strikes of 300 ms every
		// 800 ms leave no deploy quiet), and the run has lasted dur.
		// Then the run goes on for a lease: the last deploy begins a
		// lease before the end, since a Client sweeps its idle wakeup
		// channels every 2 s from its opening, so one opened later keeps
		// them longer past the end, and the check of the subscriptions
		// after the run would take up to a second more (measured: 3.5-4.0
		// s instead of 3.0 with deploys up to 300 ms before the end).
		quiet := 0
		for i := 0; ; i++ {
			over := false
			select {
			case <-struckAll:
				over = true
			default:
			}
			if over && quiet >= netQuietDeploys && time.Until(until) <= lease {
				break
			}
			if time.Since(start) > netRunMax-2*lease {
				break // netRunMax: the check after the run says what is missing
			}
			d := deps[i%3]
			g := d.gen()
			n := d.deploy(rand.IntN(2) == 0)
			n.Slot = d.slot
			notes = append(notes, n)
			smu.Lock()
			if netQuiet(n, strikes, lease) && over {
				quiet++
			}
			smu.Unlock()
			ch := make(chan int64, 1)
			gone = append(gone, ch)
			dwg.Add(1)
			go func() { defer dwg.Done(); ch <- netGone(d, g, n) }()
			if over && quiet < netQuietDeploys {
				// After the strikes: wait out the last one's window.
				smu.Lock()
				var last int64
				for _, s := range strikes {
					last = max(last, s[1])
				}
				smu.Unlock()
				if w := time.Until(time.Unix(0, last).Add(lease)); w > 0 {
					time.Sleep(w)
				}
			}
			time.Sleep(time.Duration(100+rand.IntN(151)) * time.Millisecond)
		}
		time.Sleep(lease)
	}()
	struck := 0
	time.Sleep(300 * time.Millisecond)
	switch fault {
	case "none": // the control
	case "blackhole":
		on := now()
		off := px.blackhole(t)
		time.Sleep(3 * lease / 2)
		strike(off, on)
		struck = 1
	default:
		for time.Until(until) > time.Second {
			var off func()
			on := now()
			switch fault {
			case "latency":
				off = px.latency(t, 150*time.Millisecond)
			case "timeout":
				off = px.timeoutToxic(t, 200)
			case "reset":
				off = px.reset(t)
			case "limit_data":
				off = px.limitData(t, 2048)
			}
			time.Sleep(300 * time.Millisecond)
			strike(off, on)
			struck++
			time.Sleep(500 * time.Millisecond)
		}
	}
	close(struckAll)
	wg.Wait()
	end := now()
	ran := time.Since(start).Round(100 * time.Millisecond)
	healed := time.Now()
	<-deployed
	dwg.Wait()
	waits := netWaits(ev, ends)

	// After the fault, with every Client still open.
	c := newDsync(t, srv.Addr, prefix, lease)
	base := prefix + ":{c0}:" + kind
	raw := map[string][]string{
		"fair": {"LLEN " + base + ":queue", "ZCARD " + base + ":places"},
		"rw":   {"LLEN " + base + ":queue", "ZCARD " + base + ":places", "ZCARD " + base + ":readers"},
		"sem":  {"LLEN " + base + ":waiters", "HLEN " + base + ":want", "ZCARD " + base + ":holders"},
	}[kind]
	var left []string
	clean := func() bool {
		left = left[:0]
		sts, err := c.Inspect(context.Background(), "c0")
		if err != nil {
			left = append(left, err.Error())
		}
		for _, st := range sts {
			if len(st.Holders) > 0 || len(st.Waiters) > 0 {
				left = append(left, fmt.Sprintf("%s: %d holders, %d waiters", st.Kind, len(st.Holders), len(st.Waiters)))
			}
			if st.Kind == dsync.KindSemaphore && st.Free != chaosSemSize {
				left = append(left, fmt.Sprintf("%d of %d permits free", st.Free, chaosSemSize))
			}
		}
		for _, q := range raw {
			if n, _ := srv.do(t, strings.Fields(q)...).AsInt64(); n != 0 {
				left = append(left, fmt.Sprintf("%s = %d", q, n))
			}
		}
		return len(left) == 0
	}
	deadline := time.Now().Add(netCleanBound)
	for !clean() && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	cleanAfter := time.Since(healed)
	// Wakeup subscriptions linger 2 s after their last waiter and are
	// swept every 2 s: every channel must be gone within 5 s.
	var subs []string
	const subsBound = 5 * time.Second
	for sd := time.Now().Add(subsBound); ; time.Sleep(50 * time.Millisecond) {
		subs, _ = srv.do(t, "PUBSUB", "CHANNELS", prefix+":{*").AsStrSlice() // the locks' channels
		if len(subs) == 0 || time.Now().After(sd) {
			break
		}
	}
	subsAfter := time.Since(healed)
	run := &chaosRun{open: map[int]int{}, killed: map[int]bool{}}
	slices.SortStableFunc(ev, func(a, b cev) int { return cmp.Compare(a.Ret, b.Ret) })
	fig := checkChaos(t, kind, ev, run, end)
	sf := store.figures()
	leftAt := make([]int64, len(gone))
	for i, ch := range gone {
		leftAt[i] = <-ch
	}
	ds := netDeployStalls(kind, ev, waits, notes, strikes, lease)
	excuseStalls(ds, func(int) [][]lagSpan { return [][]lagSpan{lags.spans(lagTest)} })
	t.Logf("starvation probe (late ≥%v): %s", lagProbeMin, lags.figures())
	var dq, dl []deployStall
	var ll []int64 // leftAt of dl
	for i, d := range ds {
		if d.note.Quiet {
			dq = append(dq, d)
			t.Logf("quiet deploy of slot %d (%s): Close %v, stall %v (%d free stretches): %s; left %v", d.note.Slot, d.note.Name, ms(d.note.End-d.note.Start), ms(d.stall), d.gaps, d.waiter, d.note.Left)
			continue
		}
		dl, ll = append(dl, d), append(ll, leftAt[i])
		t.Logf("deploy of slot %d (%s) in a strike's window: Close %v (%q), stall %v (not asserted): %s; left at Close's return %v, gone %v after",
			d.note.Slot, d.note.Name, ms(d.note.End-d.note.Start), d.note.Err, ms(d.stall), d.waiter, d.note.Left, ms(max(leftAt[i]-d.note.End, 0)))
	}
	dtext := netDeployText(dq, dl, ll)
	t.Logf("%s under %s (%d strikes in %v, run %v): %d acquisitions, %d ops checked (%s), %d waits cancelled, worst return %v after the context ended (%d over 100 ms; its timers ran up to %v late, %d over 100 ms), %d holds lost, %d Redis errors; fenced: %d stale rejected, %d lost; Redis clean %v after the fault (left: %v); %d wakeup channels still subscribed %v after it",
		kindTitle(kind), fault, struck, dur, ran, tl.Acq, fig.ops, fig.verdict, tl.Cancelled, ms(tl.MaxLate), tl.Late, ms(tl.MaxTimer), tl.TimerLate, tl.Lost, tl.Errs,
		sf.fencedRejected+sf.staleReads, sf.fencedLost, cleanAfter.Round(time.Millisecond), left, len(subs), subsAfter.Round(time.Millisecond))
	row := reportRow{Scenario: "3 network: " + fault, Primitive: kindTitle(kind), Size: fmt.Sprintf("3 Clients x 2 x %v (strikes in the first %v)", ran, dur),
		Faults: fmt.Sprintf("%d strikes, %s, %d cancel (latest return %v after its context ended; its timers up to %v late); %d errors", struck, dtext, tl.Cancelled, ms(tl.MaxLate), ms(tl.MaxTimer), tl.Errs),
		Ops:    int64(fig.ops), Check: fig.verdict,
		Overlaps: sf.overlaps, Lost: sf.lostUpdates, Rejected: sf.fencedRejected + sf.staleReads, FencedLost: sf.fencedLost, Fenced: kind != "sem",
		RecoveryNote: fmt.Sprintf("clean %v after; %d channels subscribed %v after", cleanAfter.Round(time.Millisecond), len(subs), subsAfter.Round(time.Millisecond)),
		Leaked:       -1,
		Command:      fmt.Sprintf("cd faults && GOWORK=off go test -race -count=1 -run 'TestFaultNetworkPrimitives/^%s$/^%s$' .", kind, fault)}
	defer func() { row.Failed = t.Failed(); addRow(row) }()
	assert.Empty(t, left, "%v after the fault Redis still shows", netCleanBound)
	assert.Empty(t, subs, "%v after the fault, every waiter gone and the Clients open, wakeup channels still subscribed", subsAfter)
	// A return over the bound is excused only by the lag the test
	// process's probe measured between the context's end and the return
	// (every Client, the proxy and the store run in it): a make test with
	// both CPUs busy saw a Semaphore wait return 218 ms after its end
	// while the probe was 201 ms late.
	mu.Lock()
	lf := lateBeyondLag(cancelled, lags.spans(lagTest))
	mu.Unlock()
	t.Logf("late returns: %s", lf)
	row.Faults += fmt.Sprintf(" (returns over 100 ms after the context's end: %d, %d of them excused by the probe's lag)", lf.late, lf.excused)
	assert.EqualValues(t, tl.Late, lf.late, "the waits counted late by the workers and by their records")
	assert.Zero(t, lf.late-lf.excused, "calls that returned more than 100 ms after their context ended, beyond the lag the probe measured meanwhile (%s; the worst: %s)", lf, tl.Worst)
	assert.Zero(t, sf.fencedLost, "updates the fenced counter lost")
	assert.GreaterOrEqual(t, fig.acquisitions, 20, "acquisitions: the scenario did not happen")
	assert.NotZero(t, tl.Cancelled, "cancelled waits: the scenario did not happen")
	// Deploys: quiet ones as scenario 1's; the others' Close and the
	// next Client must work, and what the Close left must be gone within
	// netLeftBound (their stalls are reported only).
	// Every row has netQuietDeploys deploys outside every strike's
	// window, each asserted (the deploys go on after the strikes).
	assert.GreaterOrEqual(t, len(dq), netQuietDeploys, "deploys outside every strike's window (of %d)", len(notes))
	checkDeploys(t, dq)
	for i, d := range dl {
		n := d.note
		if ll[i] == 0 {
			t.Errorf("deploy of slot %d in a strike's window: Client %s (%s) still had keys in Redis %v after its Close returned (%v after it began): %v", n.Slot, n.Name, n.Ident, netLeftBound, ms(n.End-n.Start), n.Left)
		}
	}
}

// newHTTPClient is an HTTP client for a store in this process, its idle
// connections closed when t ends.
func newHTTPClient(t testing.TB) *http.Client {
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Timeout: 5 * time.Second, Transport: tr}
}

// proxyDial makes a Client's own rueidis client through the proxy at
// addr, as client(t, addr) with the rows' 1 s ConnWriteTimeout; the
// Client's deploy closes it.
func proxyDial(addr string) func() (rueidis.Client, error) {
	return func() (rueidis.Client, error) {
		return rueidis.NewClient(rueidis.ClientOption{
			InitAddress:       []string{addr},
			DisableCache:      true,
			ConnWriteTimeout:  time.Second,
			Dialer:            net.Dialer{Timeout: 500 * time.Millisecond, KeepAlive: time.Second},
			BlockingPoolSize:  32,
			PipelineMultiplex: -1,
		})
	}
}

// netLeftBound is how soon after its Close returned nothing of a Client
// closed in a strike's window may be left in Redis: what Close could not
// take back is left to the leases (Client.Close), a hold lapses a lease
// after its last renewal (before Close began), a dead queue place a lease
// after its last look, and the queue keys expire 2 leases after their
// last change (fair_lib.lua). A quiet deploy's Close must leave nothing.
const netLeftBound = 2 * time.Second

// netGone waits until nothing of g, closed by the deploy n of d, is left
// in Redis (looked at directly), polling until netLeftBound after n.End;
// it returns when (0: not by then).
func netGone(d *chaosDeploy, g *chaosGen, n deployNote) int64 {
	if len(n.Left) == 0 {
		return n.End
	}
	for deadline := n.End + int64(netLeftBound); ; time.Sleep(20 * time.Millisecond) {
		if len(d.leftBy(g)) == 0 {
			return now()
		}
		if now() > deadline {
			return 0
		}
	}
}

// netWaits are the waits that the events do not show: a worker's
// acquisitions that ended without the lock (by their context, or an
// error) record no event in these rows (chaosWorker.failedOn), so the
// stretch from a worker's release (or from its last acquisition) to its
// next acquisition's call (or its end) is taken as one wait, on name 0
// (these rows' only name), whose context's end is not known: its end is
// its return. After a hold a deploy's Close released (Cl) the worker
// waited for its next Client: that stretch is no wait.
func netWaits(ev []cev, ends []int64) []wend {
	by := map[int][]cev{}
	for _, e := range ev { // each worker's in the order it emitted them
		if e.Op == "acq" || e.Op == "rel" {
			by[e.Who] = append(by[e.Who], e)
		}
	}
	var ws []wend
	for who, es := range by {
		from := int64(0)
		for _, e := range es {
			switch {
			case e.Op == "acq":
				if from != 0 && e.Call > from {
					ws = append(ws, wend{Who: who, Slot: who / 2, Call: from, Ret: e.Call})
				}
				from = 0
			case e.Cl:
				from = 0
			default:
				from = e.Ret
			}
		}
		if from != 0 && ends[who] > from {
			ws = append(ws, wend{Who: who, Slot: who / 2, Call: from, Ret: ends[who]})
		}
	}
	return ws
}

// netDeployStalls measures every deploy's stall (deployStalls measures
// only quiet ones: all are passed as quiet) and then marks which are
// quiet. As scenario 1 counts a deploy quiet a lease after a stop's thaw
// (1.5 after a kill), a deploy is quiet here when no strike was on from a
// lease before its Close began to deployWindow after it returned: a
// strike, like a stop, leaves waits whose wakeup message was lost (found
// by the lease/3 poll) and holds whose release or renewal did not get
// through (lapsed by a lease). With strikes of 300 ms every 800 ms (and
// a blackhole of 1.5 leases) in 3 s, that leaves the deploys of the
// "none" rows quiet, and hardly any in the others.
func netDeployStalls(kind string, ev []cev, waits []wend, notes []deployNote, strikes [][2]int64, lease time.Duration) []deployStall {
	all := slices.Clone(notes)
	for i := range all {
		all[i].Quiet = true
	}
	ds := deployStalls(kind, ev, waits, all)
	for i := range ds {
		ds[i].note.Quiet = netQuiet(ds[i].note, strikes, lease)
	}
	return ds
}

// netQuiet reports whether deploy n is outside every strike's window:
// none on from a lease before its Close began to deployWindow after it
// returned.
func netQuiet(n deployNote, strikes [][2]int64, lease time.Duration) bool {
	for _, s := range strikes {
		if s[0] < n.End+int64(deployWindow) && s[1]+int64(lease) > n.Start {
			return false
		}
	}
	return true
}

// netQuietDeploys is how many deploys outside every strike's window each
// network row makes and asserts (e725502 had lowered the row's
// requirement to one deploy of any kind: a blackhole row made only two,
// its next Client opening only after the blackhole; now the deploys go on
// after the strikes until there are this many).
const netQuietDeploys = 3

// netRunMax bounds a network row's run, deploys after the strikes
// included.
const netRunMax = 20 * time.Second

// netDeployText is the deploys' part of a row: the quiet ones (asserted)
// and those in a strike's window (reported), with gone the moments
// nothing of the latter's Clients was left (0: not within netLeftBound).
func netDeployText(dq, dl []deployStall, gone []int64) string {
	q, l := deployFigures(dq), deployFigures(dl)
	lleft, lgone := 0, int64(0)
	for i, d := range dl {
		if len(d.note.Left) > 0 {
			lleft++
		}
		if gone[i] == 0 {
			lgone = -1
		} else if lgone >= 0 {
			lgone = max(lgone, gone[i]-d.note.End)
		}
	}
	text := fmt.Sprintf("%d deploys (%d of holders, %d inside a critical section, %d holds ended by Close; Close ≤%v): %d quiet",
		q.n+l.n, q.cutBy+l.cutBy, q.inside+l.inside, q.cut+l.cut, ms(max(q.maxClose, l.maxClose)), q.n)
	if q.n > 0 {
		text += fmt.Sprintf(" (waiters of other Clients waited ≤%v beyond the lock's being free, %d free stretches, %d over %v; left in Redis after Close: %d)",
			ms(q.worst.stall), q.gaps, q.over, deployBound, q.left)
	}
	if l.n > 0 {
		gone := fmt.Sprintf("gone ≤%v after", ms(lgone))
		if lgone < 0 {
			gone = fmt.Sprintf("not all gone within %v", netLeftBound)
		}
		text += fmt.Sprintf(", %d in a strike's window, not asserted (waited ≤%v beyond the lock's being free, %d over %v; %d left some at Close's return, %s)",
			l.n, ms(l.worst.stall), l.over, deployBound, lleft, gone)
	}
	return text
}

// TestFaultNetworkDeployChecksCatchViolations: the network rows' deploy
// measure is not blind. A worker whose waits ended without the lock (no
// event) after its release, while the lock was free from a Close's
// return, counts as stalled for that stretch; the stretch after a hold a
// Close released (the worker waited for its next Client) is no wait; a
// deploy is quiet only with no strike from a lease before its Close to
// deployWindow after it returned.
func TestFaultNetworkDeployChecksCatchViolations(t *testing.T) {
	msec := int64(time.Millisecond)
	ev := []cev{
		{Op: "acq", Who: 0, Slot: 0, Call: 800 * msec, Ret: 900 * msec},
		{Op: "rel", Who: 0, Slot: 0, Call: 950 * msec, Ret: 1010 * msec, Out: "closed", Cl: true},
		{Op: "acq", Who: 0, Slot: 0, Call: 1500 * msec, Ret: 1501 * msec},
		{Op: "rel", Who: 0, Slot: 0, Call: 1502 * msec, Ret: 1503 * msec},
		{Op: "acq", Who: 4, Slot: 2, Call: 100 * msec, Ret: 110 * msec},
		{Op: "rel", Who: 4, Slot: 2, Call: 120 * msec, Ret: 130 * msec},
		{Op: "acq", Who: 4, Slot: 2, Call: 1300 * msec, Ret: 1301 * msec},
		{Op: "rel", Who: 4, Slot: 2, Call: 1302 * msec, Ret: 1303 * msec},
	}
	ws := netWaits(ev, []int64{2000 * msec, 0, 0, 0, 1310 * msec, 0})
	// Worker 4: 130..1300 and 1303..1310; worker 0: 1503..2000, not
	// 1010..1500 (after its Close).
	want := []wend{{Who: 0, Slot: 0, Call: 1503 * msec, Ret: 2000 * msec}, {Who: 4, Slot: 2, Call: 130 * msec, Ret: 1300 * msec}, {Who: 4, Slot: 2, Call: 1303 * msec, Ret: 1310 * msec}}
	slices.SortFunc(ws, func(a, b wend) int { return cmp.Or(cmp.Compare(a.Who, b.Who), cmp.Compare(a.Call, b.Call)) })
	assert.Equal(t, want, ws)
	d := deployNote{Slot: 0, Start: 1000 * msec, End: 1010 * msec}
	ds := netDeployStalls("fair", ev, ws, []deployNote{d}, nil, time.Second)
	require.Len(t, ds, 1)
	assert.True(t, ds[0].note.Quiet)
	assert.Equal(t, 290*msec, ds[0].stall, "worker 4's failed waits while the lock was free from the Close's return")
	// Strikes: one that ended less than a lease before the Close, one
	// that began within deployWindow after it: not quiet, still measured.
	for _, s := range [][2]int64{{0, 10 * msec}, {1300 * msec, 1600 * msec}} {
		ds = netDeployStalls("fair", ev, ws, []deployNote{d}, [][2]int64{s}, time.Second)
		assert.False(t, ds[0].note.Quiet, "strike %v", s)
		assert.Equal(t, 290*msec, ds[0].stall)
	}
	ds = netDeployStalls("fair", ev, ws, []deployNote{d}, [][2]int64{{-1000 * msec, -5 * msec}, {1500 * msec, 1600 * msec}}, time.Second)
	assert.True(t, ds[0].note.Quiet)
}
