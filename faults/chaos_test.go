package faults

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Scenario 1 of the reliability issue, for every primitive (Election
// and Group included): N child processes of G goroutines each contend for
// D on one primitive; every critical section (an Election's term, a
// Group's fn) writes a fenced counter (token-checked) and an unfenced
// register; a monkey SIGKILLs (and replaces) or SIGSTOPs a process every
// 0.5-1.5 s, a holder when one is known: the first stop of a run and one
// in three after it past the lease (a writer frozen inside its critical
// section, whose writes the fence must reject once thawed), the others
// within it; one acquisition in three has a short deadline or is
// cancelled by another goroutine. The histories are checked by porcupine
// against the primitive's model; tokens must follow real time; the fenced
// counter loses no update and, for the fenced primitives, rejects some;
// waits return within 100 ms of their context's end (those a SIGSTOP of
// their own process overlapped apart); an Election's observers end on the
// current state; after the run Redis shows no holder and no waiter within
// a lease and keeps no key without an expiry beyond the primitive's
// documented state.
//
// CI runs 4 x 8 x 10 s per primitive; make chaos runs 4 x 16 x 60 s and
// writes docs/reliability.md.
var (
	chaosProcs = flag.Int("chaos.procs", 4, "chaos scenario: child processes")
	chaosG     = flag.Int("chaos.g", 8, "chaos scenario: goroutines per process")
	chaosDur   = flag.Duration("chaos.dur", 10*time.Second, "chaos scenario: duration per primitive")
	chaosPrims = flag.String("chaos.prims", "", "chaos scenario: comma-separated primitives (default all)")
	chaosFault = flag.String("chaos.faults", "kill,stop,deploy", "chaos scenario: the process faults the monkey picks from (deploy: Client.Close and a new Client)")
	// Short stops stay within the lease (the margin); long ones outlast
	// it, so that a thawed holder's fenced writes meet the fence (a thawed
	// holder's lock context reads the lease clock: TestFaultStopMargin).
	chaosStopMax   = flag.Duration("chaos.stopmax", 400*time.Millisecond, "chaos scenario: longest short SIGSTOP (the margin: within the 1s lease)")
	chaosLongStop  = flag.Duration("chaos.longstop", 3*time.Second, "chaos scenario: longest SIGSTOP past the lease (from 1.5 leases; 0: none)")
	chaosLongShare = flag.Int("chaos.longshare", 3, "chaos scenario: after the first stop of a run (always past the lease), one stop in this many is past the lease")
	chaosThawKill  = flag.Duration("chaos.thawkill", 0, "chaos scenario: a writer frozen past the lease inside its critical section waits this long after its thaw before its fenced write, and the monkey's next fault is a SIGKILL of its process (what a starved CI run met by chance; 0: neither)")
)

const chaosLease = time.Second

// killQuiet is how long after a SIGKILL a deploy's stall is asserted: two
// leases and a margin. A killed process's holds lapse within a lease of
// its last renewal and its queue places within a lease of its last look,
// but a release in that lease grants a dead waiter of a FairMutex, an
// RWMutex or a Semaphore the lock or its permits, which then lapse a lease
// after the grant: up to two leases after the kill (dsync's
// TestSemaphoreDeadWaiterGrantHoldsALease; in two Semaphore rows of
// 2026-12-04 that looked for them, 19 grants to a killed process's
// waiters, made 15-996 ms after the kill, lapsing up to 1.996 s after it).
// With 1.5 leases, a deploy in a Semaphore row of make chaos (6574f52)
// found the new Client's waiters waiting 443 ms beyond the semaphore's
// being free, as behind such a grant. The margin covers a look the killed
// process had on its way.
const killQuiet = 2*chaosLease + chaosLease/5

// -chaos.dump DIR writes a violating run's events there (one JSON line
// each, after its slot and its epoch: see applyWipes), its faults and the
// server's data losses after them.
var chaosDump = flag.String("chaos.dump", "", "chaos scenario: write the events of a run whose history is not linearizable to this directory")

func dumpEvents(t *testing.T, kind string, all []cev, run *chaosRun) {
	if *chaosDump == "" {
		return
	}
	var b strings.Builder
	for _, e := range all {
		j, _ := json.Marshal(e)
		fmt.Fprintf(&b, "%d %d %s\n", e.Slot, e.epoch, j)
	}
	fmt.Fprintf(&b, "stops %+v\nkills %+v\ndeploys %+v\nwipes %+v\n", run.stops, run.kills, run.deploys, run.wipes)
	f := fmt.Sprintf("%s/%s-%d.events", *chaosDump, kind, time.Now().UnixNano())
	if err := os.WriteFile(f, []byte(b.String()), 0o644); err != nil {
		t.Logf("dump: %v", err)
		return
	}
	t.Logf("events written to %s", f)
}

var chaosKinds = []string{"mutex", "fair", "rw", "sem", "once", "oncevalue", "wg", "multi", "election", "group", "cond"}

var chaosKindName = map[string]string{
	"mutex": "Mutex", "fair": "FairMutex", "rw": "RWMutex", "sem": "Semaphore",
	"once": "Once", "oncevalue": "OnceValue", "wg": "WaitGroup", "multi": "MultiLock", "election": "Election", "group": "Group", "cond": "Cond",
}

func TestFaultChaos(t *testing.T) {
	kinds := chaosKinds
	if *chaosPrims != "" {
		kinds = strings.Split(*chaosPrims, ",")
	}
	for _, k := range kinds {
		if chaosKindName[k] == "" {
			t.Fatalf("unknown primitive %q (want one of %v)", k, chaosKinds)
		}
		t.Run(k, func(t *testing.T) { runChaos(t, k) })
	}
}

// chaosRun is the parent's view of one run.
type chaosRun struct {
	mu    sync.Mutex
	ev    []cev
	open  map[int]int // slot -> holds open (acq without rel)
	tally chaosTally
	waits []wend // waits that their context ended
	// budgets: releases whose own budget ran out (releaseBudgetSpent).
	budgets []wend
	kills   []fault
	stops   []fault
	killed  map[int]bool
	wipes   []wipe // FLUSHALL, or the server shut down without persistence
	// obsNotes: what each Election child's observer found at the end.
	obsNotes []string
	// Deploys (chaos_deploy_test.go): the children ready for one, and
	// what each deploy's child said, also sent to deployed.
	ready    map[int]bool
	deploys  []deployNote
	deployed chan deployNote
	// lags: the children's starvation probes (starve_test.go), where
	// deploys are measured.
	lags *lagLog
}

// A wipe is a stretch of time in which the server lost its data: from
// sending FLUSHALL (or SHUTDOWN NOSAVE) until the reply (or the empty
// server answering).
type wipe struct{ from, to int64 }

type fault struct {
	slot     int
	at, till int64
	held     bool // the process held when the fault struck, as far as the parent knew
	long     bool // a stop past the lease (longStop)
	trapped  bool // a long stop that froze a writer inside its critical section
	k        int  // trapped: the name of the writer's read
	tok      uint64
	wrote    <-chan struct{} // trapped: closed once the writer's fenced write reached the store
}

func (r *chaosRun) collect(t *testing.T, c *child, slot int) {
	for l := range c.lines {
		w, rest, _ := strings.Cut(l, " ")
		switch w {
		case "ev":
			var e cev
			if err := json.Unmarshal([]byte(rest), &e); err != nil {
				t.Errorf("bad event %q: %v", rest, err)
				continue
			}
			e.Slot = slot
			r.mu.Lock()
			r.ev = append(r.ev, e)
			switch e.Op {
			case "acq":
				r.open[slot]++
			case "rel":
				r.open[slot]--
			}
			r.mu.Unlock()
		case "wend", "budget": // a wait its context ended; a release whose budget ran out
			var e wend
			if err := json.Unmarshal([]byte(rest), &e); err != nil {
				t.Errorf("bad %s %q: %v", w, rest, err)
				continue
			}
			e.Slot = slot
			r.mu.Lock()
			if w == "wend" {
				r.waits = append(r.waits, e)
			} else {
				r.budgets = append(r.budgets, e)
			}
			r.mu.Unlock()
		case "lag":
			var s lagSpan
			if r.lags != nil && json.Unmarshal([]byte(rest), &s) == nil {
				r.lags.add(slot, s)
			}
		case "ready":
			r.mu.Lock()
			r.ready[slot] = true
			r.mu.Unlock()
		case "deploy":
			var n deployNote
			if err := json.Unmarshal([]byte(rest), &n); err != nil {
				t.Errorf("bad deploy %q: %v", rest, err)
				continue
			}
			n.Slot = slot
			r.mu.Lock()
			r.deploys = append(r.deploys, n)
			r.mu.Unlock()
			r.deployed <- n
		case "done":
			var tl chaosTally
			if err := json.Unmarshal([]byte(rest), &tl); err != nil {
				t.Errorf("bad tally %q: %v", rest, err)
			}
			r.mu.Lock()
			r.tally.Acq += tl.Acq
			r.tally.Cancelled += tl.Cancelled
			r.tally.Errs += tl.Errs
			r.tally.Lost += tl.Lost
			r.tally.Late += tl.Late
			r.tally.MaxLate = max(r.tally.MaxLate, tl.MaxLate)
			r.tally.TimerLate += tl.TimerLate
			r.tally.MaxTimer = max(r.tally.MaxTimer, tl.MaxTimer)
			r.tally.ObsStale += tl.ObsStale
			if tl.ObsNote != "" {
				r.obsNotes = append(r.obsNotes, tl.ObsNote)
			}
			r.mu.Unlock()
			return
		}
	}
	r.mu.Lock()
	dead := r.killed[slot]
	r.mu.Unlock()
	if !dead {
		t.Errorf("chaos child %d exited without done", slot)
	}
}

func runChaos(t *testing.T, kind string) {
	procs, g, dur := *chaosProcs, *chaosG, *chaosDur
	srv := startRedis(t)
	prefix := testPrefix()
	store := newChaosStore(chaosSemSize)
	url := store.serve(t)
	until := time.Now().Add(dur)
	run := &chaosRun{open: map[int]int{}, killed: map[int]bool{}, ready: map[int]bool{}, deployed: make(chan deployNote, 1)}
	deploys := slices.Contains(strings.Split(*chaosFault, ","), "deploy")
	if deploys {
		run.lags = newLagLog()
	}
	var wg sync.WaitGroup
	children := map[int]*child{}
	nextSlot := 1
	start := func() {
		slot := nextSlot
		nextSlot++
		run.mu.Lock()
		from := 0 // a new Once worker starts near the highest name reached
		for _, e := range run.ev {
			from = max(from, e.K)
		}
		run.mu.Unlock()
		if kind != "once" && kind != "oncevalue" {
			from = 0
		}
		env := []string{"FAULTS_STORE=" + url, "FAULTS_KIND=" + kind, "FAULTS_FROM=" + strconv.Itoa(max(from-2, 0)),
			"FAULTS_G=" + strconv.Itoa(g), "FAULTS_ID=" + strconv.Itoa(slot), "FAULTS_UNTIL=" + strconv.FormatInt(until.UnixNano(), 10)}
		if deploys {
			env = append(env, "FAULTS_DEPLOY=1", "FAULTS_LAG=1")
		}
		if *chaosThawKill > 0 {
			env = append(env, "FAULTS_THAWLAG="+chaosThawKill.String())
		}
		if *condProbe {
			env = append(env, "FAULTS_CONDPROBE=1")
		}
		c := startChild(t, "chaos", srv.Addr, prefix, chaosLease, env...)
		children[slot] = c
		wg.Add(1)
		go func() {
			defer wg.Done()
			run.collect(t, c, slot)
		}()
	}
	for range procs {
		start()
	}
	// A stop past the lease (longStop): 1.5 leases to -chaos.longstop.
	// Where the kind has a fenced read, the trap freezes the first
	// writer whose read arrives (inside its critical section, its lock
	// context checked); a kind without one, or a trap not sprung in
	// time, freezes process s (a holder, as the monkey picked it). The
	// trap waits a lease, and up to three while the run has time left
	// for the stop and a lease after it (another holder's read raises
	// the fence before the thawed writer writes). (In a CI-size run of
	// 99cfafc, whose first fault was this stop, 0.5-1.5 s into the run,
	// and whose trap waited one lease, 2 of 10 rows froze a writer
	// inside its critical section.)
	nlong := 0
	// longStop returns the slot of the writer it trapped (0: none).
	longStop := func(s int, held bool) int {
		d := 3*chaosLease/2 + rand.N(max(*chaosLongStop-3*chaosLease/2, 1))
		var tr *stopTrap
		if chaosFenced(kind) {
			var name func(int) bool
			if kind == "group" {
				name = groupTrapKey
			}
			tr = store.armStop(name)
			wait := max(chaosLease, min(3*chaosLease, time.Until(until)-d-chaosLease))
			select {
			case s = <-tr.slot:
				held = true
			case <-time.After(wait):
				if !store.disarm(tr) {
					s = <-tr.slot
					held = true
				} else {
					tr = nil
				}
			}
		}
		// The thaw comes a lease before the run's end where the run has
		// time for that (a later stop, longStopAgain), past the lease in
		// any case.
		d = max(3*chaosLease/2, min(d, time.Until(until)-chaosLease))
		c := children[s]
		at := now()
		c.signal(t, syscall.SIGSTOP)
		f := fault{slot: s, at: at, held: held, long: true, trapped: tr != nil, k: -1}
		if tr != nil {
			f.k, f.tok, f.wrote = tr.k, tr.tok, tr.wrote
			close(tr.frozen)
		}
		time.Sleep(d)
		if tr != nil {
			// The trapped writer stays frozen until another run's read
			// has raised its name's fence past its token (up to a lease
			// before the run's end): the thaw must meet the fence. (In
			// CI of 72874ff, 2026-12-04, the children were starved for
			// up to 2.8 s: no other Once run of the name began within
			// a 1.5-3 s stop, and the row had no fenced write to check.)
			for !store.raised(tr.k, tr.tok) && time.Until(until) > chaosLease {
				time.Sleep(5 * time.Millisecond)
			}
			if !store.raised(tr.k, tr.tok) {
				t.Logf("trapped stop of slot %d (name %d, token %d): thawed %v after it began, a lease before the run's end, and no other run's read has raised the fence", s, tr.k, tr.tok, time.Duration(now()-at).Round(time.Millisecond))
			}
		}
		c.signal(t, syscall.SIGCONT)
		f.till = now()
		run.mu.Lock()
		run.stops = append(run.stops, f)
		run.mu.Unlock()
		if tr != nil {
			// Thawed, the trapped writer writes with its token: no
			// fault strikes until that write has reached the store. (In
			// CI of dde9b2f, 2026-12-07, the Once row's next fault was a
			// SIGKILL of the thawed process, 3.3 s after the stop began,
			// before its starved writer had written: the row had no
			// rejected write to check. -chaos.thawkill makes that order
			// certain.)
			select {
			case <-tr.wrote:
			case <-time.After(time.Until(until) + 2*chaosLease):
				t.Logf("trapped stop of slot %d (name %d, token %d): its writer's fenced write had not reached the store %v after the thaw", s, tr.k, tr.tok, time.Duration(now()-f.till).Round(time.Millisecond))
			}
			return s
		}
		return 0
	}
	// longStopAgain: after a trapped stop whose thawed writer met no
	// fence (no other run of its name began while it was frozen: in a
	// CI-size Group row of 2026-11-28 no caller of the trapped key was
	// left waiting), the next stop is past the lease again, while the
	// run has time for one (a lease before the end, up to 3 s frozen).
	longStopAgain := func() bool {
		return chaosFenced(kind) && nlong > 0 && store.figures().fencedRejected == 0 && time.Until(until) > 3*chaosLease/2+2*chaosLease
	}
	// A deploy of process s: SIGUSR1 asks the child to close its Client
	// and open another, and the monkey waits for its answer (deployNote).
	// A deploy no other fault can have stalled waiters around (killQuiet
	// after a kill, when its holds, queue places and grants have lapsed;
	// a lease after a stop's thaw) is quiet: its stall is asserted. The
	// monkey waits for that before it deploys (no other fault strikes
	// meanwhile, nor in the deploy's window: the next fault comes 0.5 s
	// at least after the child's answer), so that every deploy is quiet;
	// one that would not be, with no time left to wait, is not made.
	var lastKill, lastThaw time.Time
	deploy := func(s int) bool {
		if wait := max(time.Until(lastKill.Add(killQuiet)), time.Until(lastThaw.Add(chaosLease))); wait > 0 {
			if time.Until(until)-wait < 2*chaosLease {
				return false
			}
			time.Sleep(wait)
		}
		run.mu.Lock()
		if !run.ready[s] || run.killed[s] {
			// Another child, ready for one (a child that has just
			// started is not).
			var ready []int
			for r := range children {
				if run.ready[r] && !run.killed[r] {
					ready = append(ready, r)
				}
			}
			slices.Sort(ready)
			s = -1
			if len(ready) > 0 {
				s = ready[rand.IntN(len(ready))]
			}
		}
		run.mu.Unlock()
		if s < 0 {
			t.Logf("deploy: no child ready for one")
			return false
		}
		quiet := time.Since(lastKill) >= killQuiet && time.Since(lastThaw) >= chaosLease
		if time.Until(until) < 2*chaosLease {
			t.Logf("deploy: too near the end")
			return false // too near the end: the child may be done before it answers
		}
		children[s].signal(t, syscall.SIGUSR1)
		select {
		case <-run.deployed:
			run.mu.Lock()
			run.deploys[len(run.deploys)-1].Quiet = quiet
			run.mu.Unlock()
		case <-time.After(20 * time.Second):
			t.Fatalf("chaos child %d did not answer a deploy within 20 s", s)
		}
		return true
	}
	// The monkey: a fault every 0.5-1.5 s, on a holder when the parent
	// knows of one. The first fault of a run is a stop past the lease
	// (longStop), and so is one stop in -chaos.longshare after it (every
	// stop, while the fence has refused nothing: longStopAgain); other
	// stops freeze a process 0.1-0.4 leases (-chaos.stopmax). With
	// deploys, the first fault is a deploy (the long stop comes next),
	// and one in three after it.
	ndeploy := 0
	killNext := 0 // -chaos.thawkill: the thawed writer's slot
	for deadline := time.Now().Add(5 * time.Second); deploys && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		run.mu.Lock()
		n := len(run.ready)
		run.mu.Unlock()
		if n > 0 {
			break // the first deploy has a child to strike
		}
	}
	for {
		time.Sleep(500*time.Millisecond + rand.N(time.Second))
		if time.Until(until) < 3*chaosLease {
			break
		}
		run.mu.Lock()
		var live, holders []int
		for s := range children {
			if run.killed[s] {
				continue
			}
			live = append(live, s)
			if run.open[s] > 0 {
				holders = append(holders, s)
			}
		}
		forceKill := killNext != 0 && !run.killed[killNext]
		run.mu.Unlock()
		slices.Sort(live)
		slices.Sort(holders)
		pool := live
		if len(holders) > 0 && rand.IntN(4) != 0 {
			pool = holders
		}
		s := pool[rand.IntN(len(pool))]
		if forceKill {
			s = killNext
		}
		killNext = 0
		held := slices.Contains(holders, s)
		c := children[s]
		faults := strings.Split(*chaosFault, ",")
		if forceKill {
			faults = []string{"kill"}
		} else if deploys && ndeploy == 0 && deploy(s) {
			ndeploy++
			continue
		}
		if *chaosLongStop > 0 && slices.Contains(faults, "stop") && (nlong == 0 || longStopAgain() || (faults[rand.IntN(len(faults))] == "stop" && rand.IntN(*chaosLongShare) == 0)) {
			nlong++
			if w := longStop(s, held); w != 0 && *chaosThawKill > 0 {
				killNext = w
			}
			lastThaw = time.Now()
			continue
		}
		f := faults[rand.IntN(len(faults))]
		if deploys && f == "deploy" && deploy(s) {
			ndeploy++
			continue
		}
		if f == "deploy" {
			f = "stop" // not ready for a deploy yet (it has just started)
		}
		if f == "kill" {
			run.mu.Lock()
			run.killed[s] = true // before the kill: its reader sees the end at once
			run.mu.Unlock()
			at := now()
			c.signal(t, syscall.SIGKILL)
			run.mu.Lock()
			run.kills = append(run.kills, fault{slot: s, at: at, held: held})
			run.mu.Unlock()
			store.forget(s)
			start()
			lastKill = time.Now()
			continue
		}
		d := chaosLease/10 + rand.N(max(*chaosStopMax-chaosLease/10, 1))
		at := now()
		c.signal(t, syscall.SIGSTOP)
		time.Sleep(d)
		c.signal(t, syscall.SIGCONT)
		lastThaw = time.Now()
		run.mu.Lock()
		run.stops = append(run.stops, fault{slot: s, at: at, till: now(), held: held})
		run.mu.Unlock()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Until(until) + 30*time.Second):
		t.Fatal("chaos children did not finish within 30 s of the end")
	}
	end := now()
	ev := run.ev
	slices.SortStableFunc(ev, func(a, b cev) int { return cmp.Compare(a.Ret, b.Ret) })

	// Redis after the run: within a lease no holder and no waiter remains.
	c := newDsync(t, srv.Addr, prefix, chaosLease)
	names := chaosUsedNames(kind, ev)
	var busy []string
	cleanAfter := time.Duration(0)
	t0 := time.Now()
	for {
		busy = busy[:0]
		if kind == "group" {
			// No Inspect for a Group: its records and running markers
			// must be gone (the last caller of each flight had the
			// result; a killed leader's marker lapses).
			keys, err := srv.do(t, "KEYS", prefix+":*group*").AsStrSlice()
			require.NoError(t, err)
			for _, k := range keys {
				if strings.HasSuffix(k, ":taghist") {
					// The history of a key's ended runs (Observer.HoldTag),
					// kept a minute after its last end for the waiters
					// that overlapped them: state with an end, not a run.
					ttl, err := srv.do(t, "PTTL", k).AsInt64()
					require.NoError(t, err)
					if ttl == -2 || ttl > 0 && ttl <= (time.Minute+time.Second).Milliseconds() {
						// -2: it expired between KEYS and PTTL (make
						// chaos of c8de45e reported one as left): gone.
						continue
					}
					k += fmt.Sprintf(" (PTTL %d ms: more than a minute, or none)", ttl)
				}
				busy = append(busy, k)
			}
		}
		for _, n := range names {
			sts, err := c.Inspect(context.Background(), n)
			if err != nil {
				t.Fatalf("Inspect %q: %v", n, err)
			}
			for _, st := range sts {
				if len(st.Holders) > 0 || len(st.Waiters) > 0 {
					busy = append(busy, fmt.Sprintf("%s %q: %d holders, %d waiters", st.Kind, n, len(st.Holders), len(st.Waiters)))
				}
			}
		}
		cleanAfter = time.Since(t0)
		if len(busy) == 0 || cleanAfter > chaosLease+time.Second {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	leaked, durable := chaosKeys(t, srv, prefix)

	fig := checkChaos(t, kind, ev, run, end)
	if kind == "cond" {
		cf := checkCond(t, ev, run)
		t.Logf("%v", cf)
		// Neither check may pass by having nothing to check.
		assert.NotZero(t, cf.lostChecked, "Cond: no Wait that gave up was checked for a lost signal (%d gave up)", cf.gaveUp)
		assert.NotZero(t, cf.bcastChecked, "Cond: no Wait was checked against a Broadcast (%d Broadcasts)", cf.broadcasts)
		fig.verdict += " (the lock); " + cf.String()
	}
	sf := store.figures()
	rec := recoveries(kind, ev, run.kills)
	p50, pmax := pct(rec, 50), pct(rec, 100)
	heldKills, heldStops := 0, 0
	for _, k := range run.kills {
		if k.held {
			heldKills++
		}
	}
	long, trapped, unwritten := 0, 0, 0
	longest := time.Duration(0)
	for _, s := range run.stops {
		if s.held {
			heldStops++
		}
		if s.long {
			long++
			longest = max(longest, time.Duration(s.till-s.at))
		}
		if s.trapped {
			trapped++
			select {
			case <-s.wrote:
			default:
				unwritten++
			}
		}
	}
	stops := fmt.Sprintf("%d stop ≤%v, %d past the lease ≤%v (%d inside a critical section; the longest %v: a trapped writer stays frozen until its fence is raised)", len(run.stops)-long, *chaosStopMax, long, *chaosLongStop, trapped, longest.Round(time.Millisecond))
	tl := run.tally
	var lagOf func(int) []lagSpan // the children's probes run with deploys
	if run.lags != nil {
		lagOf = run.lags.spans
	}
	lf := lateness(run.waits, run.stops, lagOf)
	if deploys {
		// A waiter's process is a child (every Client's connection is
		// direct to Redis): its probe's lag may excuse a stall over the
		// bound (excuseStalls).
		excuseStalls(fig.stalls, func(slot int) [][]lagSpan { return [][]lagSpan{run.lags.spans(slot)} })
		t.Logf("chaos %s: starvation probes (late ≥%v): %s", kindTitle(kind), lagProbeMin, run.lags.figures())
	}
	df := deployFigures(fig.stalls)
	if deploys {
		stops += ", " + df.String()
	}
	t.Logf("chaos %s: %d procs x %d goroutines, %v; faults: %d SIGKILL (%d of holders), SIGSTOP: %s (%d of holders); %d acquisitions (%d in the history, %d ops checked), %d waits ended by their context (%d in processes not killed): %s; %d lost holds, %d errors; porcupine: %s; fenced: %d writes accepted, %d stale reads/writes rejected, %d updates lost, %d stale reader checks; unfenced register: %d updates, %d lost, %d overlaps, %d torn reads; semaphore gauge most %d, above size %d; recovery after a holder's SIGKILL p50 %v max %v (%d); Redis clean after %v; keys without expiry: %d leaked %v, %d documented state",
		kindTitle(kind), procs, g, dur, len(run.kills), heldKills, stops, heldStops,
		tl.Acq, fig.acquisitions, fig.ops, len(run.waits), tl.Cancelled, lf, tl.Lost, tl.Errs,
		fig.verdict, sf.fencedAccepted, sf.fencedRejected, sf.fencedLost, sf.staleReads, sf.puts, sf.lostUpdates, sf.overlaps, sf.torn,
		sf.semMost, sf.semOver, p50, pmax, len(rec), cleanAfter.Round(time.Millisecond), len(leaked), leaked, durable)

	scenario := "1 chaos"
	if *chaosStopMax != 400*time.Millisecond || *chaosFault != "kill,stop,deploy" || *chaosLongStop != 3*time.Second || *chaosLongShare != 3 || *chaosThawKill != 0 {
		scenario = fmt.Sprintf("1 chaos (%s, SIGSTOP up to %v, past the lease up to %v one in %d)", *chaosFault, *chaosStopMax, *chaosLongStop, *chaosLongShare)
	}
	row := reportRow{
		Scenario: scenario, Primitive: kindTitle(kind),
		Size:   fmt.Sprintf("%d x %d x %v", procs, g, dur),
		Faults: fmt.Sprintf("%d kill, %s, %d cancel (%s); %d errors", len(run.kills), stops, len(run.waits), lf, tl.Errs),
		Ops:    int64(fig.ops), Check: fig.verdict,
		Overlaps: sf.overlaps, Lost: sf.lostUpdates, Rejected: sf.fencedRejected + sf.staleReads,
		FencedLost: sf.fencedLost, Fenced: chaosFenced(kind),
		Recovery: rec, Leaked: len(leaked),
		Command: fmt.Sprintf("cd faults && GOWORK=off go test -race -count=1 -run 'TestFaultChaos/^%s$' -chaos.procs %d -chaos.g %d -chaos.dur %v -chaos.stopmax %v -chaos.longstop %v -chaos.longshare %d .", kind, procs, g, dur, *chaosStopMax, *chaosLongStop, *chaosLongShare),
	}
	defer func() { row.Failed = t.Failed(); addRow(row) }()

	assert.Empty(t, busy, "%v after the run Redis still shows", cleanAfter)
	if deploys {
		// Every deploy is outside the other faults' windows (the monkey
		// waits for that), and each one's stall is asserted.
		assert.NotZero(t, df.n, "deploys: none struck")
		assert.Equal(t, df.n, df.quiet, "deploys in another fault's window (the monkey waits them out)")
		checkDeploys(t, fig.stalls)
		for _, d := range fig.stalls {
			if len(d.over) == 0 {
				continue
			}
			// What struck before it, for the diagnosis.
			var last int64
			for _, k := range run.kills {
				if k.at < d.note.Start {
					last = max(last, k.at)
				}
			}
			if last != 0 {
				t.Logf("deploy of slot %d: the last SIGKILL before it came %v before its Close", d.note.Slot, ms(d.note.Start-last))
			}
		}
	}
	assert.Empty(t, leaked, "keys without expiry left")
	assert.Zero(t, sf.fencedLost, "updates the fenced counter lost: a stale holder's read or write passed the fence")
	if chaosFenced(kind) && *chaosLongStop > 0 && slices.Contains(strings.Split(*chaosFault, ","), "stop") {
		// A writer frozen inside its critical section past its lease
		// writes with its token once thawed, after another holder's
		// read raised the fence: the fence must have refused it. At
		// every size (CI's 10 s a primitive too): the first long stop
		// comes early (the second fault, after the first deploy; the
		// first without deploys) and its trap waits for a writer inside
		// its critical section (longStop).
		assert.NotZero(t, trapped, "stops past the lease that froze a writer inside its critical section")
		assert.Zero(t, unwritten, "trapped writers whose fenced write never reached the store (their process killed before it: the trap checked nothing)")
		if !assert.NotZero(t, sf.fencedRejected, "fenced writes rejected: no thawed holder's write met the fence") {
			explainUnfenced(t, ev, run)
		}
	}
	assert.GreaterOrEqual(t, fig.acquisitions, 50, "operations completed: the contention did not happen")
	assert.NotZero(t, len(run.kills)+len(run.stops), "kills and stops: no fault struck")
	assert.NotZero(t, tl.Cancelled, "waits cancelled: no fault struck")
	// How late waits return after their context ended (its timer's
	// lateness excluded: measured from the moment the timer ended it),
	// their process not stopped meanwhile. In the 13:40 make chaos of
	// 2026-11-27 one WaitGroup wait of 15,816 returned 107 ms late, its
	// timer 2 ms late: the worst wait's woke (when a goroutine the end
	// woke ran) tells whether the runtime ran nothing meanwhile. Its
	// cause was Wait's: it looked at the counter about every millisecond,
	// so a look (MGET) was in flight nearly whenever its context ended,
	// and the look ran inline unless the Client was in doubt; rueidis
	// waits out a call in flight until its reply or the context's
	// deadline, not its cancellation (docs/design.md, "Waiting"), so the
	// Wait returned with the look's reply. Round trips that long are
	// measured: with both CPUs busy, the looks of TestRollingRestart's
	// WaitGroup replicas took 30-110 ms (2026-12-04, ba6ab27). Since
	// 8c83168 Wait looks once per message (or lease/3) and its look is
	// bounded by its context always (a goroutine of its own): the wait
	// returns at its context's end, asserted here at lateBound.
	if lf.late > 0 {
		t.Logf("waits that returned more than %v after their context ended, their process not stopped meanwhile: %d (worst %v: %+v; a goroutine woken by its end ran %v after it)", lateBound, lf.late, ms(lf.maxLate), lf.worst, time.Duration(lf.worst.Woke-lf.worst.End))
	}
	assert.Zero(t, lf.late, "waits that returned more than %v after their context ended (their process not stopped)", lateBound)
	// A Campaign granted the lock and then lost it before its term's
	// record, a Once or Group run begun and lost before f could start:
	// only if its process was frozen past the lease meanwhile.
	for _, e := range ev {
		if e.Op != "lacq" {
			continue
		}
		stopped := false
		for _, s := range run.stops {
			stopped = stopped || (s.slot == e.Slot && s.at < e.Ret && s.till > e.Call && time.Duration(s.till-s.at) > chaosLease/2)
		}
		if !stopped {
			t.Errorf("a call of worker %d (slot %d, %d..%d) returned ErrLockLost before its run could start, its process not frozen past the lease meanwhile", e.Who, e.Slot, e.Call, e.Ret)
		}
	}
	if kind == "election" {
		t.Logf("Election observers at the end: %v", run.obsNotes)
		assert.Zero(t, tl.ObsStale, "Election observers that did not end on the current state: %v", run.obsNotes)
	}
	// Calls with a live context used to fail when another caller's
	// context ended during a reconnect's dial (TestFaultSharedDial).
	assert.Zero(t, tl.Errs, "calls that failed with an error other than their context's (see stderr)")
	// A release that Redis did not answer within its own budget: only
	// under starvation (budgetExcused).
	checkBudgetReleases(t, run.budgets, lagOf)
}

func kindTitle(k string) string { return chaosKindName[k] }

// explainUnfenced logs, for each stop that froze a writer inside its
// critical section, what the other processes did with its name from a
// lease before the stop to a lease after the thaw: whether any run
// (acq) began there, and how their calls ended.
func explainUnfenced(t *testing.T, ev []cev, run *chaosRun) {
	for _, f := range run.stops {
		if !f.trapped {
			continue
		}
		t.Logf("trapped: slot %d frozen %d..%d (%v), name %d, token %d", f.slot, f.at, f.till, time.Duration(f.till-f.at).Round(time.Millisecond), f.k, f.tok)
		from, to := f.at-int64(chaosLease), f.till+int64(chaosLease)
		for _, e := range ev {
			if e.K == f.k && e.Ret >= from && e.Call <= to {
				t.Logf("  %s slot %d who %d tok %d out %q val %q lost %v: call %d (%+v after the stop), return %d", e.Op, e.Slot, e.Who, e.Tok, e.Out, e.Val, e.Lost, e.Call, time.Duration(e.Call-f.at).Round(time.Millisecond), e.Ret)
			}
		}
		for _, w := range run.waits {
			if w.K == f.k && w.Ret >= from && w.Call <= to {
				t.Logf("  wait ended by its context: slot %d who %d call %d (%+v after the stop), context end %d, return %d", w.Slot, w.Who, w.Call, time.Duration(w.Call-f.at).Round(time.Millisecond), w.End, w.Ret)
			}
		}
	}
	for _, k := range run.kills {
		t.Logf("SIGKILL of slot %d at %d", k.slot, k.at)
	}
	for _, d := range run.deploys {
		t.Logf("deploy: %+v", d)
	}
}

// groupTrapKey says whether a Group writer reading the fenced counter of
// key k now may be frozen past its lease: only in the first half of k's
// period (chaosGroupKeyEvery; the key is the clock, the parent's as the
// children's). The fence rejects the thawed writer only if another run of
// k began meanwhile, which takes a caller of k in another process still
// waiting when the run's lease lapses; a run that began near the end of
// its key's period may have none (the callers move on to the next key).
func groupTrapKey(k int) bool {
	n, p := time.Now().UnixNano(), int64(chaosGroupKeyEvery)
	return k == int(n/p%1_000_000) && n%p < p/2
}

// chaosFenced: the kind's holders write the fenced counter.
func chaosFenced(k string) bool { return k != "sem" && k != "wg" }

// chaosUsedNames are the names a kind's workers use.
func chaosUsedNames(kind string, ev []cev) []string {
	switch kind {
	case "multi":
		return []string{"m0", "m1", "m2"}
	case "election":
		return []string{"\x00election:c0"} // the FairMutex of election c0
	case "group":
		return nil // no Inspect: runChaos looks at its keys
	case "wg":
		var ns []string
		for k := range chaosWaitGroups {
			ns = append(ns, "w"+strconv.Itoa(k))
		}
		return ns
	case "once", "oncevalue":
		most := 0
		for _, e := range ev {
			most = max(most, e.K)
		}
		var ns []string
		for k := 0; k <= most+1; k++ {
			ns = append(ns, "o"+strconv.Itoa(k))
		}
		return ns
	}
	return []string{"c0"}
}

// chaosKeys lists the keys under prefix without an expiry: leaked, or the
// documented state that has none (a Once's done state, a WaitGroup's
// counter and generation).
func chaosKeys(t *testing.T, srv *redisServer, prefix string) (leaked []string, durable int) {
	keys, err := srv.do(t, "KEYS", prefix+":*").AsStrSlice()
	require.NoError(t, err)
	slices.Sort(keys)
	for _, k := range keys {
		ttl, _ := srv.do(t, "PTTL", k).AsInt64()
		if ttl != -1 {
			continue
		}
		if strings.HasSuffix(k, ":once") || strings.HasSuffix(k, ":oncevalue") || strings.HasSuffix(k, ":wg") || strings.HasSuffix(k, ":wg:gen") {
			durable++
			continue
		}
		leaked = append(leaked, k)
	}
	return leaked, durable
}

func pct(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := (len(s) - 1) * p / 100
	return s[i].Round(time.Millisecond)
}

// recoveries: for each SIGKILL of a process with a hold open, how long
// until another process next acquired (or, for a Once, ran f or saw it
// done on) a name the dead hold was on.
func recoveries(kind string, ev []cev, kills []fault) []time.Duration {
	if kind == "wg" {
		return nil
	}
	var out []time.Duration
	for _, k := range kills {
		// The dead process's holds open at the kill.
		open := map[int]cev{}
		for _, e := range ev {
			if e.Slot != k.slot || e.Ret > k.at {
				continue
			}
			switch e.Op {
			case "acq":
				open[e.Who] = e
			case "rel":
				delete(open, e.Who)
			}
		}
		// The names the dead holds were on (bits of a MultiLock's mask).
		names := map[int]bool{}
		on := func(e cev) (n []int) {
			if kind != "multi" {
				return []int{e.K}
			}
			for i := range chaosMultiNames {
				if e.K&(1<<i) != 0 {
					n = append(n, i)
				}
			}
			return n
		}
		for _, e := range open {
			for _, n := range on(e) {
				names[n] = true
			}
		}
		if len(names) == 0 {
			continue
		}
	next:
		for _, e := range ev {
			if e.Slot == k.slot || e.Ret <= k.at || (e.Op != "acq" && e.Op != "obs") {
				continue
			}
			for _, n := range on(e) {
				if names[n] {
					out = append(out, time.Duration(e.Ret-k.at))
					break next
				}
			}
		}
	}
	return out
}

// chaosFig is what the history check found.
type chaosFig struct {
	acquisitions, ops int
	verdict           string
	stalls            []deployStall // one per deploy
}

// checkChaos closes the holds of killed processes, then checks the
// history with porcupine against the kind's model, and tokens against
// real time.
func checkChaos(t *testing.T, kind string, ev []cev, run *chaosRun, end int64) chaosFig {
	t.Helper()
	// Holds (and Adds) a killed process left open: they ended in Redis
	// some time after they began and before the end of the run.
	open := map[int]cev{}
	fret := map[int]cev{}
	relc := map[int]cev{}
	addc := map[int64]cev{}
	// In call order, as in sweepHolds.
	byCall := slices.Clone(ev)
	slices.SortStableFunc(byCall, func(a, b cev) int { return cmp.Compare(a.Call, b.Call) })
	for _, e := range byCall {
		switch e.Op {
		case "acq":
			open[e.Who] = e
			delete(fret, e.Who)
			delete(relc, e.Who)
		case "relc":
			relc[e.Who] = e
		case "rel":
			delete(open, e.Who)
		case "fret":
			fret[e.Who] = e
		case "addc":
			addc[e.Seq] = e
		case "add":
			delete(addc, e.Seq)
		}
	}
	// A killed process renews nothing: its holds lapse in Redis within a
	// lease of the kill (and a command it sent runs by then).
	killedAt := map[int]int64{}
	for _, k := range run.kills {
		killedAt[k.slot] = k.at
	}
	// A hold open at the kill was still held then, unless its release
	// was under way (relc) or its process had been frozen long enough to
	// lose it before.
	longStop := map[int]bool{}
	for _, s := range run.stops {
		if time.Duration(s.till-s.at) > chaosLease/2 {
			longStop[s.slot] = true
		}
	}
	var closed []cev
	for who, a := range open {
		if !run.killed[a.Slot] {
			t.Errorf("worker %d of a live process left a hold open", who)
			continue
		}
		lapse := min(killedAt[a.Slot]+int64(chaosLease+100*time.Millisecond), end)
		from := killedAt[a.Slot]
		if r, ok := relc[who]; ok {
			from = r.Call
		} else if longStop[a.Slot] || kind == "once" || kind == "oncevalue" || kind == "group" {
			from = a.Ret
		}
		rel := cev{Op: "rel", Who: who, K: a.K, Read: a.Read, N: a.N, Tok: a.Tok, Call: from, Ret: lapse, Lost: true, Out: "fail", Slot: a.Slot}
		if f, ok := fret[who]; ok && f.Out == "ok" {
			rel.Out, rel.Val = "unknown", f.Val
			if kind == "once" {
				rel.Val = ""
			}
		}
		closed = append(closed, rel)
	}
	for _, a := range addc {
		if !run.killed[a.Slot] {
			t.Errorf("an Add of a live process never returned")
			continue
		}
		lapse := min(killedAt[a.Slot]+int64(chaosLease+100*time.Millisecond), end)
		closed = append(closed, cev{Op: "add", Who: a.Who, K: a.K, N: a.N, Call: a.Call, Ret: lapse, Out: "err", Slot: a.Slot})
	}
	all := append(slices.Clone(ev), closed...)
	all = frozenRuns(kind, all, run.stops)
	all = applyWipes(kind, all, run.wipes)
	if n, over := unseenCuts(all); n > 0 {
		t.Logf("deploys: %d runs of f cut by a Close that neither Do's error nor f's context showed (its caller's context had ended f's first); in %d of them another run began before f returned", n, over)
	}

	// Partition by name: each name is its own object.
	parts := map[int][]porcupine.Operation{}
	acqs := map[int][]cev{}
	nacq := 0
	for _, e := range all {
		if e.Op == "fret" || e.Op == "addc" || e.Op == "relc" || e.Op == "lacq" || e.Op == "cwc" || e.Op == "cw" || e.Op == "cs" {
			continue
		}
		if e.Op == "wait" && e.Out != "ok" {
			nacq++ // legal in every state and changes none: not worth the search
			continue
		}
		ks := []int{e.K}
		if kind == "multi" {
			ks = ks[:0]
			for i := range chaosMultiNames {
				if e.K&(1<<i) != 0 {
					ks = append(ks, i)
				}
			}
		}
		if e.Op == "acq" || e.Op == "add" || e.Op == "wait" || e.Op == "obs" {
			nacq++
		}
		if e.Op == "maybe" && kind == "once" {
			e.Val = ""
		}
		for _, k := range ks {
			k += e.epoch * 1_000_000 // each epoch between wipes is its own object
			tok := e.Tok
			if kind == "multi" {
				tok = e.Toks[k%1_000_000]
			}
			parts[k] = append(parts[k], porcupine.Operation{ClientId: e.Who, Input: e.modelIn(), Output: e.Out, Call: e.Call, Return: e.Ret})
			if e.Op == "acq" {
				a := e
				a.Tok = tok
				acqs[k] = append(acqs[k], a)
			}
		}
	}
	model := chaosModel(kind)
	bad, unknown, ops := 0, 0, 0
	var keys []int
	for k := range parts {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	pt := time.Now()
	defer func() {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		t.Logf("porcupine took %v (the process has %d MiB from the OS)", time.Since(pt).Round(time.Millisecond), ms.Sys>>20)
	}()
	for _, k := range keys {
		ops += len(parts[k])
		if kind == "rw" || (kind == "sem" && len(parts[k]) > 4000) {
			// Porcupine's search times out on RWMutex histories of a few
			// thousand operations (and on long Semaphore ones); the sweep
			// is exact for these models.
			if n, first := sweepHolds(parts[k], kind == "sem"); n > 0 {
				bad++
				t.Errorf("the history of name %d (%d operations) is not linearizable against the %s model: %d holds began beside holds they exclude; first: %s", k, len(parts[k]), kind, n, first)
				for _, s := range run.stops {
					t.Logf("  SIGSTOP of slot %d from %d to %d (%v, held %v)", s.slot, s.at, s.till, time.Duration(s.till-s.at).Round(time.Millisecond), s.held)
				}
				explainLost(t, kind, all, k, run.stops)
			}
			continue
		}
		// Long histories in windows (chaos_cuts_test.go); Once
		// histories are short (one name until f succeeds).
		var res porcupine.CheckResult
		where := ""
		switch kind {
		case "mutex", "fair", "multi", "election", "cond":
			res, where = checkLockWindows(model, parts[k], 60*time.Second)
		case "wg":
			res, where = checkWGWindows(parts[k], 60*time.Second)
		default:
			res = porcupine.CheckOperationsTimeout(model, coalesceObs(parts[k]), 60*time.Second)
		}
		switch res {
		case porcupine.Ok:
		case porcupine.Unknown:
			unknown++
			t.Errorf("porcupine: the check of name %d (%d operations) timed out: %s", k, len(parts[k]), where)
		default:
			bad++
			t.Errorf("porcupine: the history of name %d (%d operations) is not linearizable against the %s model: %s", k, len(parts[k]), kind, where)
			if kind == "once" || kind == "oncevalue" || kind == "group" {
				for _, e := range all {
					if e.K == k%1_000_000 && e.epoch == k/1_000_000 {
						t.Logf("  %s who %d slot %d tok %d out %q val %q lost %v: call %d, return %d", e.Op, e.Who, e.Slot, e.Tok, e.Out, e.Val, e.Lost, e.Call, e.Ret)
					}
				}
				for _, s := range run.stops {
					t.Logf("  SIGSTOP of slot %d from %d to %d (%v, inside a critical section %v)", s.slot, s.at, s.till, time.Duration(s.till-s.at).Round(time.Millisecond), s.trapped)
				}
			} else if len(parts[k]) <= 12 {
				for _, o := range parts[k] {
					in := o.Input.(chIn)
					t.Logf("  %s who %d out %q val %q n %d: call %d, return %d", in.op, in.who, in.out, in.val, in.n, o.Call, o.Return)
				}
				for _, w := range run.wipes {
					t.Logf("  wipe %d..%d", w.from, w.to)
				}
			}
			explainLost(t, kind, all, k, run.stops)
			dumpEvents(t, kind, all, run)
		}
	}
	verdict := "linearizable"
	switch {
	case bad > 0:
		verdict = fmt.Sprintf("VIOLATION (%d of %d names)", bad, len(keys))
	case unknown > 0:
		verdict = fmt.Sprintf("unknown (%d of %d names timed out)", unknown, len(keys))
	}
	for _, k := range keys {
		a := acqs[k]
		var pe []pevent
		for _, e := range a {
			pe = append(pe, pevent{Who: e.Who, Call: e.Call, Ret: e.Ret, Tok: e.Tok})
		}
		if len(pe) > 0 {
			checkTokensFast(t, pe)
		}
	}
	return chaosFig{acquisitions: nacq, ops: ops, verdict: verdict, stalls: deployStalls(kind, all, run.waits, run.deploys, run.wipes...)}
}

// frozenRuns: a Once run whose f context ended early for a reason other
// than a lost lease (Do's own context, cev.Frz) while a stop past half a
// lease overlapped it in its process may have lost its lease unseen (the
// deadline timer ran before the lease clock's at the thaw), and another
// run may have taken over: the run ended in Redis after its last valid
// check, and a nil from Do may be another run's success (Once.Do returns
// nil when one is stored): its outcome is unknown, and the Once was done
// by the return. (A Group leader's Do returns its own fn's value, recorded
// or not: its run is only made unknown.)
func frozenRuns(kind string, all []cev, stops []fault) []cev {
	for i, e := range all {
		if e.Op != "rel" || e.Frz == 0 {
			continue
		}
		frozen := false
		for _, s := range stops {
			if s.slot == e.Slot && time.Duration(s.till-s.at) > chaosLease/2 && s.till > e.Frz && s.at < e.Ret {
				frozen = true
			}
		}
		if !frozen {
			continue
		}
		all[i].Call = e.Frz
		if e.Out == "ok" {
			all[i].Out = "unknown"
		}
		if e.Out == "ok" && kind != "group" {
			all = append(all, cev{Op: "obs", Who: e.Who, K: e.K, Call: e.Frz, Ret: e.Ret, Out: "ok", Val: e.Val, Slot: e.Slot})
		}
	}
	return all
}

// unseenCuts counts the runs (of a Once or Group) that a deploy's Close
// began under with nothing in Do's return or f's context to show it
// (cev.Cut), and those of them that another run's acquisition (its f
// starting) overlapped before their f returned: recorded as running until
// f returned, each would have been two runs at once (chaosGen.cutBy).
func unseenCuts(all []cev) (n, overlapped int) {
	for _, r := range all {
		if r.Op != "rel" || r.Cut == 0 {
			continue
		}
		n++
		for _, a := range all {
			if a.Op == "acq" && a.K == r.K && a.epoch == r.epoch && a.Who != r.Who && a.Ret > r.Call && a.Ret < r.Cut {
				overlapped++
				break
			}
		}
	}
	return n, overlapped
}

// coalesceObs keeps, of a Once history's observations (Do returned nil
// without running f), the one that returned first for each value. The
// model's done state is absorbing (nothing leaves it; an observation
// changes nothing), so a set of observations of one value is linearizable
// exactly when the success is linearized before the earliest of their
// returns, which is what that one observation asks. Without this, the
// dozens of Do calls a run frozen past its lease leaves waiting, all
// returning together, made porcupine's search time out (2^n orders).
//
// For a Group (whose done state a new flight ends) it keeps two per value:
// the one that returned first and the one called last. The observations
// of one value are linearizable exactly when the flight's result is
// linearized before the earliest return and the next run after the
// latest call: what those two ask together.
func coalesceObs(ops []porcupine.Operation) []porcupine.Operation {
	first, last := map[string]int{}, map[string]int{} // value -> index in ops
	for i, o := range ops {
		in := o.Input.(chIn)
		if in.op != "obs" {
			continue
		}
		if f, ok := first[in.val]; !ok || o.Return < ops[f].Return {
			first[in.val] = i
		}
		if l, ok := last[in.val]; !ok || o.Call > ops[l].Call {
			last[in.val] = i
		}
	}
	out := ops[:0:0]
	for i, o := range ops {
		in := o.Input.(chIn)
		if in.op != "obs" || first[in.val] == i || last[in.val] == i {
			out = append(out, o)
		}
	}
	return out
}

// chIn is the model input of one chaos operation.
type chIn struct {
	op   string
	who  int
	read bool
	n    int64
	out  string
	val  string
}

func (e cev) modelIn() chIn {
	return chIn{op: e.Op, who: e.Who, read: e.Read, n: e.N, out: e.Out, val: e.Val}
}

type onceState struct {
	run  int // the worker running f, -1 if none
	done bool
	val  string
}

// chaosModel is the model of one name of a kind.
//
//	Mutex, FairMutex, MultiLock (per member): one holder at a time.
//	RWMutex: a writer alone, or readers (counted).
//	Semaphore: at most chaosSemSize permits held (counted).
//	Once, OnceValue: runs of f never overlap and none begins after one
//	succeeded; a Do that returns nil without running f returns after a
//	success (with its value, for OnceValue). A run whose outcome a kill
//	hid may or may not have succeeded.
//	WaitGroup: the counter never goes below zero (an Add that would is
//	refused, an Add refused must have), and a Wait returns nil only at a
//	moment the counter is zero. An Add whose outcome a kill hid may or may
//	not have been applied.
func chaosModel(kind string) porcupine.Model {
	describe := func(in, _ interface{}) string {
		i := in.(chIn)
		return fmt.Sprintf("%s(%d read=%v n=%d out=%s %s)", i.op, i.who, i.read, i.n, i.out, i.val)
	}
	switch kind {
	case "mutex", "fair", "multi", "election", "cond":
		return porcupine.Model{
			Init: func() interface{} { return -1 },
			Step: func(s, in, _ interface{}) (bool, interface{}) {
				st, i := s.(int), in.(chIn)
				switch i.op {
				case "acq":
					return st == -1, i.who
				case "end": // the end of a window (checkLockWindows)
					return st == i.who, st
				}
				return st == i.who, -1
			},
			Hash:              func(s interface{}) uint64 { return uint64(s.(int) + 1) },
			DescribeOperation: describe,
		}
	case "rw":
		// Readers by name (a bit each): a reader's release must follow
		// its own acquire, which keeps the search small.
		return porcupine.Model{
			Init: func() interface{} { return rwNamed{w: -1} },
			Step: func(s, in, _ interface{}) (bool, interface{}) {
				st, i := s.(rwNamed), in.(chIn)
				word, bit := (i.who/64)%len(st.r), uint64(1)<<(i.who%64)
				switch {
				case i.op == "acq" && !i.read:
					ok := st.w == -1 && st.r == [len(st.r)]uint64{}
					st.w = i.who
					return ok, st
				case i.op == "acq":
					ok := st.w == -1 && st.r[word]&bit == 0
					st.r[word] |= bit
					return ok, st
				case !i.read:
					ok := st.w == i.who
					st.w = -1
					return ok, st
				}
				ok := st.r[word]&bit != 0
				st.r[word] &^= bit
				return ok, st
			},
			Hash: func(s interface{}) uint64 {
				st := s.(rwNamed)
				h := uint64(st.w + 1)
				for i, w := range st.r {
					h ^= w * uint64(2*i+3)
				}
				return h
			},
			DescribeOperation: describe,
		}
	case "sem":
		return porcupine.Model{
			Init: func() interface{} { return int64(0) },
			Step: func(s, in, _ interface{}) (bool, interface{}) {
				st, i := s.(int64), in.(chIn)
				if i.op == "acq" {
					return st+i.n <= chaosSemSize, st + i.n
				}
				return st >= i.n, st - i.n
			},
			Hash:              func(s interface{}) uint64 { return uint64(s.(int64)) },
			DescribeOperation: describe,
		}
	case "once", "oncevalue":
		nm := porcupine.NondeterministicModel{
			Init: func() []interface{} { return []interface{}{onceState{run: -1}} },
			Step: func(s, in, _ interface{}) []interface{} {
				st, i := s.(onceState), in.(chIn)
				switch i.op {
				case "acq":
					if st.run == -1 && !st.done {
						return []interface{}{onceState{run: i.who}}
					}
				case "rel":
					if st.run != i.who {
						return nil
					}
					ok, fail := onceState{run: -1, done: true, val: i.val}, onceState{run: -1}
					switch i.out {
					case "ok":
						return []interface{}{ok}
					case "unknown":
						return []interface{}{ok, fail}
					}
					return []interface{}{fail}
				case "obs":
					if st.done && st.val == i.val {
						return []interface{}{st}
					}
				case "maybe": // a run's end from before a wipe, recorded or not
					if st.run == -1 && !st.done {
						return []interface{}{st, onceState{run: -1, done: true, val: i.val}}
					}
					return []interface{}{st}
				}
				return nil
			},
			Hash: func(s interface{}) uint64 {
				st := s.(onceState)
				h := uint64(st.run+1) << 1
				if st.done {
					h |= 1
				}
				return h
			},
			DescribeOperation: describe,
		}
		return nm.ToModel()
	case "wg":
		nm := wgModel()
		return nm.ToModel()
	case "group":
		nm := groupModel()
		return nm.ToModel()
	}
	panic("unknown kind " + kind)
}

// groupState is one key of a Group: the worker running fn (-1: none),
// and the result of the flight whose record is there (done).
type groupState struct {
	run  int
	done bool
	val  string
}

// groupModel is a Group key's model: fn runs at most once at a time (a
// run begins only when no run is under way; the record of the previous
// flight, if any, is gone by then), a run's end makes its result the
// flight's (ok), or may (unknown: its leader's context ended or its lease
// was lost), and a call that returned a result without running fn (obs)
// got the result of a flight whose record was there at some moment of the
// call.
func groupModel() porcupine.NondeterministicModel {
	return porcupine.NondeterministicModel{
		Init: func() []interface{} { return []interface{}{groupState{run: -1}} },
		Step: func(s, in, _ interface{}) []interface{} {
			st, i := s.(groupState), in.(chIn)
			switch i.op {
			case "acq":
				if st.run == -1 {
					return []interface{}{groupState{run: i.who}}
				}
			case "rel":
				if st.run != i.who {
					return nil
				}
				done := groupState{run: -1, done: true, val: i.val}
				if i.out == "ok" {
					return []interface{}{done}
				}
				return []interface{}{done, groupState{run: -1}}
			case "obs":
				if st.done && st.val == i.val {
					return []interface{}{st}
				}
			}
			return nil
		},
		Hash: func(s interface{}) uint64 {
			st := s.(groupState)
			h := fnv.New64a()
			fmt.Fprintf(h, "%d %v %s", st.run, st.done, st.val)
			return h.Sum64()
		},
		DescribeOperation: func(in, _ interface{}) string {
			i := in.(chIn)
			return fmt.Sprintf("%s(%d out=%s %s)", i.op, i.who, i.out, i.val)
		},
	}
}

// wgModel is the WaitGroup's model (see chaosModel); an "end" operation
// (the end of a window, checkWGWindows) asserts the counter is n.
func wgModel() porcupine.NondeterministicModel {
	describe := func(in, _ interface{}) string {
		i := in.(chIn)
		return fmt.Sprintf("%s(%d n=%d out=%s)", i.op, i.who, i.n, i.out)
	}
	return porcupine.NondeterministicModel{
		Init: func() []interface{} { return []interface{}{int64(0)} },
		Step: func(s, in, _ interface{}) []interface{} {
			c, i := s.(int64), in.(chIn)
			switch i.op {
			case "add":
				applies := c+i.n >= 0
				switch i.out {
				case "ok":
					if applies {
						return []interface{}{c + i.n}
					}
				case "inval":
					if !applies {
						return []interface{}{c}
					}
				default:
					if applies {
						return []interface{}{c + i.n, c}
					}
					return []interface{}{c}
				}
			case "wait":
				if i.out != "ok" || c == 0 {
					return []interface{}{c}
				}
			case "end":
				if c == i.n {
					return []interface{}{c}
				}
			}
			return nil
		},
		Hash:              func(s interface{}) uint64 { return uint64(s.(int64)) },
		DescribeOperation: describe,
	}
}

// explainLost logs, for each lost hold on name k, the acquisitions by
// others that returned while the lost holder still knew itself valid: the
// overlap porcupine found, in figures.
func explainLost(t *testing.T, kind string, ev []cev, k int, stops []fault) {
	on := func(e cev) bool {
		if kind == "multi" {
			return e.K&(1<<k) != 0
		}
		return e.K == k
	}
	acq := map[int]cev{}
	for _, e := range ev {
		if !on(e) {
			continue
		}
		switch e.Op {
		case "acq":
			acq[e.Who] = e
		case "rel":
			if !e.Lost {
				continue
			}
			a := acq[e.Who]
			for _, o := range ev {
				if o.Op == "acq" && on(o) && o.Who != e.Who && o.Ret > a.Ret && o.Ret < e.Call && !(o.Read && a.Read) {
					thaw := "not stopped"
					for _, s := range stops {
						if s.slot == e.Slot && s.at < e.Call && s.till > a.Ret {
							thaw = fmt.Sprintf("SIGSTOP for %v, the check %v after SIGCONT", time.Duration(s.till-s.at).Round(time.Millisecond), time.Duration(e.Call-s.till))
						}
					}
					t.Logf("lost hold of worker %d (slot %d, token %d; %s): its lock context still reported it valid %v after worker %d (slot %d) was granted token %d",
						e.Who, e.Slot, a.Tok, thaw, time.Duration(e.Call-o.Ret), o.Who, o.Slot, o.Tok)
					break
				}
			}
		}
	}
}

// checkTokensFast is checkTokens in O(n log n): for every acquisition b,
// each acquisition that returned before b was called has a smaller token.
func checkTokensFast(t *testing.T, acq []pevent) {
	t.Helper()
	byRet := slices.Clone(acq)
	slices.SortFunc(byRet, func(a, b pevent) int { return cmp.Compare(a.Ret, b.Ret) })
	best := make([]uint64, len(byRet)) // largest token among byRet[:i+1]
	for i, a := range byRet {
		best[i] = a.Tok
		if i > 0 {
			best[i] = max(best[i], best[i-1])
		}
	}
	bad := 0
	for _, b := range acq {
		i, _ := slices.BinarySearchFunc(byRet, b.Call, func(a pevent, call int64) int { return cmp.Compare(a.Ret, call) })
		if i > 0 && best[i-1] >= b.Tok {
			if bad < 5 {
				t.Errorf("token %d granted to an acquisition called after one with token %d had returned", b.Tok, best[i-1])
			}
			bad++
		}
	}
	if bad > 0 {
		t.Errorf("%d acquisitions out of real-time token order", bad)
	}
}

// rwNamed is an RWMutex's state with its readers by worker (bit who).
type rwNamed struct {
	w int
	r [16]uint64
}

// sweepRW decides whether an RWMutex or Semaphore history is linearizable
// against the rw or sem model, exactly and in O(n log n): a history of
// holds is linearizable
// if and only if the holds, each taken from the return of its acquire to
// the call of its release (the latest acquire and the earliest release
// the history allows), never put a writer beside another holder (nor more
// than chaosSemSize permits together; Semaphore holds have n > 0). Moving
// either point elsewhere only lengthens a hold. It returns the number of
// holds that began beside a holder they exclude.
func sweepRW(ops []porcupine.Operation, sem bool) int {
	n, _ := sweepHolds(ops, sem)
	return n
}

// sweepHolds is sweepRW, with a description of the first overlap.
func sweepHolds(ops []porcupine.Operation, sem bool) (int, string) {
	type hold struct {
		who      int
		read     bool
		n        int64
		from, to int64
		acqCall  int64
		relRet   int64
	}
	type point struct {
		at    int64
		start bool
		h     *hold
	}
	var pts []point
	open := map[int]porcupine.Operation{}
	// In call order, each worker's release follows its acquire (a release
	// that failed may have its return pushed past the worker's next
	// acquire).
	ops = slices.Clone(ops)
	slices.SortStableFunc(ops, func(a, b porcupine.Operation) int { return cmp.Compare(a.Call, b.Call) })
	for _, o := range ops {
		in := o.Input.(chIn)
		if in.op == "acq" {
			open[in.who] = o
			continue
		}
		a, ok := open[in.who]
		if !ok {
			return 1, fmt.Sprintf("a release by %d without an acquire", in.who)
		}
		delete(open, in.who)
		if o.Call < a.Return {
			// A lost hold its holder never saw valid (relEvent: the
			// release is called at the last valid check, here none after
			// the acquire returned): it had no moment that the history
			// forces, and its holder used nothing under it.
			continue
		}
		h := &hold{who: in.who, read: in.read, from: a.Return, to: o.Call, acqCall: a.Call, relRet: o.Return}
		if sem {
			h.n = in.n
		}
		pts = append(pts, point{h.from, true, h}, point{h.to, false, h})
	}
	slices.SortFunc(pts, func(a, b point) int {
		if c := cmp.Compare(a.at, b.at); c != 0 {
			return c
		}
		switch { // ends first at one instant
		case !a.start && b.start:
			return -1
		case a.start && !b.start:
			return 1
		}
		return 0
	})
	inside := map[*hold]bool{}
	bad := 0
	first := ""
	var permits int64
	for _, p := range pts {
		h := p.h
		if !p.start {
			if inside[h] {
				delete(inside, h)
				permits -= h.n
			}
			continue
		}
		conflict := false
		if sem {
			permits += h.n
			conflict = permits > chaosSemSize
			if conflict && first == "" {
				first = fmt.Sprintf("worker %d took %d permits at %d (acquire called %d, held to %d, release returned %d) beside", h.who, h.n, h.from, h.acqCall, h.to, h.relRet)
				for o := range inside {
					first += fmt.Sprintf(" [worker %d: %d permits from %d to %d, acquire called %d, release returned %d]", o.who, o.n, o.from, o.to, o.acqCall, o.relRet)
				}
			}
		}
		for o := range inside {
			if !sem && (!h.read || !o.read) {
				conflict = true
				if first == "" {
					first = fmt.Sprintf("worker %d (read %v) held from %d to %d (acquire called %d, release returned %d) beside worker %d (read %v) held from %d to %d (acquire called %d, release returned %d)",
						h.who, h.read, h.from, h.to, h.acqCall, h.relRet, o.who, o.read, o.from, o.to, o.acqCall, o.relRet)
				}
			}
		}
		if conflict {
			bad++
		}
		if h.to > h.from { // a hold of no length has already ended
			inside[h] = true
		} else {
			permits -= h.n
		}
	}
	return bad, first
}

// wipeGrantSlack is the slack on the stretch after a wipe in which a Client
// may still grant a Mutex locally from a hold Redis has lost (applyWipes):
// the parent's and the children's clocks are the same machine's wall
// clock, read around the calls.
const wipeGrantSlack = 50 * time.Millisecond

// applyWipes accounts for the moments the server lost its data (FLUSHALL,
// a restart without persistence). A Once's or WaitGroup's state starts
// again from nothing: each stretch between wipes (an epoch) is its own
// object; a Once run or a Wait that overlaps a wipe is left out (its
// outcome is recorded nowhere, or may have been), and an Add that does may
// or may not count in the epoch it was called in (run before the data
// went) and in the epoch after it (run after). A lock held across a wipe was
// released by it. A Client that held a Mutex when the data went may still
// hand it to its own waiters without a round trip, with tokens below those
// Redis grants meanwhile, but only while its hold was confirmed in Redis
// (acquired, handed over or renewed: a command sent before the wipe) less
// than lease/30 ago, so to waiters that called before wipe.to +
// chaosLease/30: acquisitions that begin within that (+ wipeGrantSlack)
// after a wipe are left out of the lock histories, and only the fence
// (which rejects the stale tokens) is checked for them. Such a stale hold,
// or one held across the wipe, stays valid until its Client learns of the
// wipe (its next handoff or release through Redis, or its renewal within
// lease/3); that is why a hold that began before the wipe counts as
// released at the wipe, and a left-out acquisition's release is left out
// too.
func applyWipes(kind string, all []cev, wipes []wipe) []cev {
	if len(wipes) == 0 {
		return all
	}
	slices.SortFunc(wipes, func(a, b wipe) int { return cmp.Compare(a.from, b.from) })
	// epoch is the number of wipes that ended by t; inside reports t
	// within one.
	epoch := func(t int64) (n int, inside bool) {
		for _, w := range wipes {
			if w.to <= t {
				n++
			} else if w.from <= t {
				inside = true
			}
		}
		return n, inside
	}
	clean := func(e cev) (int, bool) {
		a, ia := epoch(e.Call)
		b, ib := epoch(e.Ret)
		return b, a == b && !ia && !ib
	}
	byCall := slices.Clone(all)
	slices.SortStableFunc(byCall, func(a, b cev) int { return cmp.Compare(a.Call, b.Call) })
	// Not in byCall's array: an event may add one (a "maybe", an Add
	// before a wipe) besides itself.
	out := make([]cev, 0, len(byCall))
	switch kind {
	case "once", "oncevalue", "wg":
		runEpoch := map[int]int{} // -1: the run's start was left out
		for _, e := range byCall {
			n, ok := clean(e)
			switch {
			case e.Op == "acq":
				if !ok {
					runEpoch[e.Who] = -1
					continue
				}
				runEpoch[e.Who] = n
			case e.Op == "rel":
				re, started := runEpoch[e.Who]
				if e.Out != "fail" && (!ok || re < 0 || re != n) {
					// A run that ended across a wipe may have recorded its
					// result after it, in the epoch it returned in.
					m := n
					if _, in := epoch(e.Ret); in {
						m++
					}
					out = append(out, cev{Op: "maybe", Who: e.Who, K: e.K, Call: wipes[m-1].to, Ret: max(e.Ret, wipes[m-1].to), Val: e.Val, epoch: m})
				}
				if !started || re < 0 {
					continue
				}
				if !ok || re != n {
					e.Out = "unknown"
				}
				n = re
			case e.Op == "add" && !ok:
				// Run before the data went, it counts in the epoch it
				// was called in, until that epoch's wipe; run after, in
				// the epoch after the wipe. Either may be.
				if a, _ := epoch(e.Call); a < len(wipes) {
					out = append(out, cev{Op: "add", Who: e.Who, K: e.K, N: e.N, Out: "err", Call: e.Call, Ret: min(e.Ret, wipes[a].to), Slot: e.Slot, epoch: a})
				}
				if _, in := epoch(e.Ret); in {
					n++
				}
				e.Out, e.Call = "err", wipes[n-1].to
				e.Ret = max(e.Ret, e.Call)
			case !ok:
				continue // a Wait, or a Do that saw f done
			}
			e.epoch = n
			out = append(out, e)
		}
		return out
	}
	acq := map[int]cev{}
	skip := map[int]bool{}
	for _, e := range byCall {
		switch e.Op {
		case "acq":
			acq[e.Who] = e
			skip[e.Who] = false
			for _, w := range wipes {
				if e.Call >= w.from && e.Call <= w.to+int64(chaosLease/30+wipeGrantSlack) {
					skip[e.Who] = true
				}
			}
			if skip[e.Who] {
				continue
			}
		case "rel":
			if skip[e.Who] {
				continue
			}
			a := acq[e.Who]
			for _, w := range wipes {
				if a.Call < w.to && e.Call > w.from {
					e.Call = max(w.from, a.Call) // the wipe released it
					break
				}
			}
		}
		out = append(out, e)
	}
	return out
}
