package faults

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
)

// Cond in scenario 1 (issue 25). The workers share the Cond of Mutex c0:
// each turn one takes the lock (an acquisition of the Mutex history, its
// critical section a fenced write) and then, 14 times in 20, Waits on the
// Cond (a release and, woken, a re-acquisition of the lock: the lock
// history checks by porcupine that every return from Wait holds it), 5
// times Signals and once Broadcasts, under the lock, then unlocks (fewer
// signals than waits, so that waiters queue and some give up: the lost
// signal check looks at those). Under
// the lock, the registrations (Wait registers before it releases) and the
// signals are in the order of the holds they were made in, which the
// Mutex's history fixes: checkCond checks them against what dsync/cond.go
// documents (see there).

// condProbe (-chaos.condprobe) replays the scenario in which scenario 1's
// Cond found a dsync bug (2026-11-28 06:43, 1 CI-size run in 3; fixed in
// 8c89f13): a waiter whose Wait failed with its context (short: waitCtx)
// unlocks its lock context to learn whether Wait had released the lock.
// Before the fix UnlockContext returned nil after Wait had released the
// lock and the Client had handed it to another of its goroutines (whose
// acquisition had returned 0.6 ms before), the lock went to another
// process, and the first process went on handing it on locally: two
// processes held it (porcupine: not linearizable). Now such an
// UnlockContext returns ErrNotHeld (the hold was handed on), and the
// probe's runs must be linearizable: it is a regression check. Run
//
//	cd faults && GOWORK=off go test -race -count=3 -run 'TestFaultChaos/^cond$' -chaos.condprobe .
//
// Without it, waiters wait with a deadline of 0.2-3 s added to the lock
// context, and never unlock a lock context Wait may have released.
var condProbe = flag.Bool("chaos.condprobe", false, "chaos scenario: Cond waiters unlock their lock context after a failed Wait (the scenario of a dsync bug fixed in 8c89f13: a regression check)")

// condSlack is how long before a waiter's context ended a signal must have
// been given to be owed to it: a wakeup's message, or, lost, the waiter's
// next look (every lease/3), and the 100 ms of a return.
const condSlack = chaosLease/3 + lateBound

func (w *chaosWorker) condLoop() {
	var g *chaosGen
	var m *dsync.Mutex
	var cd *dsync.Cond
	for w.running() {
		if ng := w.gen(); ng != g || m == nil {
			g = ng
			m = w.c.NewMutex("c0")
			cd = w.c.NewCond(m)
		}
		r := rand.IntN(20)
		actx, cancel, ended := waitCtx(g.ownerCtx(context.Background()))
		probe := os.Getenv("FAULTS_CONDPROBE") == "1"
		if r < 14 && !probe {
			// A waiter takes the lock without a deadline (Wait's
			// re-acquisition runs under this context); its wait for a
			// signal has one (condWait).
			actx, cancel = context.WithCancel(g.ownerCtx(context.Background()))
			ended = &waitEnd{}
		}
		// Wait's release of the lock is noted (withReleased) for the
		// deploys' stall measure.
		actx, released := withReleased(actx)
		call := now()
		lctx, err := m.LockContext(actx)
		ret := now()
		if err != nil {
			cancel()
			if !g.closed(err, nil) {
				w.failedOn(0, err, call, ret, ended)
			}
			continue
		}
		w.count(func(t *chaosTally) { t.Acq++ })
		tok, _ := dsync.FencingToken(lctx)
		acq := cev{Op: "acq", Call: call, Ret: ret, Tok: tok}
		w.emit(acq)
		lastValid := call
		w.exclusive(lctx, 0, tok, &lastValid)
		switch {
		case r < 14:
			if lctx.Err() != nil {
				break
			}
			lctx, acq, lastValid = w.condWait(g, m, cd, lctx, acq, ret, lastValid, probe, ended, released)
			if lctx == nil {
				cancel()
				continue // the hold ended in Wait
			}
		default:
			if lctx.Err() == nil {
				which := "one"
				if r == 19 {
					which = "all"
				}
				sctx, scancel := context.WithTimeout(context.Background(), 3*time.Second)
				scall := now()
				if which == "one" {
					err = cd.Signal(sctx)
				} else {
					err = cd.Broadcast(sctx)
				}
				sret := now()
				scancel()
				out := "ok"
				if err != nil {
					out = "err"
					if errors.Is(err, dsync.ErrClosed) {
						out = "closed"
					} else {
						w.count(func(t *chaosTally) { t.Errs++ })
						fmt.Fprintln(os.Stderr, "chaos cond:", err)
					}
				}
				w.emit(cev{Op: "cs", Call: scall, Ret: sret, Val: which, Out: out, Hold: ret})
			}
		}
		rcall := now()
		w.emit(cev{Op: "relc", Call: rcall, Ret: rcall})
		uerr := m.UnlockContext(lctx)
		rret := now()
		cancel()
		if uerr != nil && g.closed(uerr, lctx) {
			w.emit(cev{Op: "rel", Tok: acq.Tok, Call: lastValid, Ret: max(rret, g.closeEnd), Out: "closed", Cl: true})
			continue
		}
		rel, lost := relEvent(acq, lctx, uerr, lastValid, rcall, rret)
		if lost {
			w.count(func(t *chaosTally) { t.Lost++ })
		}
		if uerr != nil && !lost {
			w.count(func(t *chaosTally) { t.Errs++ })
			fmt.Fprintln(os.Stderr, "chaos cond: unlock:", uerr)
		}
		w.emit(rel)
	}
}

// condWait is one Wait with the lock lctx holds (acquired at held). It
// returns the lock context the worker holds after it (nil: none), its
// acquisition and its last valid check.
func (w *chaosWorker) condWait(g *chaosGen, m *dsync.Mutex, cd *dsync.Cond, lctx context.Context, acq cev, held, lastValid int64, probe bool, ended *waitEnd, released *atomic.Int64) (context.Context, cev, int64) {
	// The wait for a signal ends after 0.2-3 s (a deadline added to the
	// lock context): long enough that it cannot end before Wait has
	// released the lock (a Wait that fails then leaves the lock held).
	// With -chaos.condprobe the wait runs under the acquisition's context
	// (waitCtx: often short), and a Wait that failed with it is told apart
	// by unlocking lctx again: that found a dsync bug (condProbe).
	dctx := lctx
	if !probe {
		var dcancel context.CancelFunc
		dctx, dcancel, ended = endAfter(lctx, time.Duration(200+rand.IntN(2801))*time.Millisecond, true)
		defer dcancel()
	}
	wcall := now()
	w.emit(cev{Op: "cwc", Call: wcall, Ret: wcall, Hold: held})
	w.emit(cev{Op: "relc", Call: wcall, Ret: wcall}) // Wait releases the lock
	released.Store(0)
	nctx, err := cd.Wait(dctx)
	wret := now()
	cw := cev{Op: "cw", Call: wcall, Ret: wret, Hold: held, End: ended.end()}
	rel := cev{Op: "rel", Tok: acq.Tok, Call: wcall, Ret: wret}
	if r := released.Load(); r >= wcall && r <= wret {
		rel.Ret = r // the release inside Wait returned then
	}
	switch {
	case err == nil:
		cw.Out = "woken"
		w.emit(cw)
		w.emit(rel)
		tok, _ := dsync.FencingToken(nctx)
		nacq := cev{Op: "acq", Call: wcall, Ret: wret, Tok: tok, Wake: true}
		w.emit(nacq)
		w.count(func(t *chaosTally) { t.Acq++ })
		lv := wcall
		w.exclusive(nctx, 0, tok, &lv)
		return nctx, nacq, lv
	case g.closed(err, nil):
		// Wait released the lock, or Close did (after the last valid
		// check), by the time Close returned.
		cw.Out = "closed"
		rel.Call, rel.Ret, rel.Cl = lastValid, max(wret, g.closeEnd), true
	case errors.Is(err, dsync.ErrNotHeld):
		// Lost before Wait (its process frozen past the lease): nothing
		// released, nothing registered.
		cw.Out = "notheld"
		rel.Call, rel.Lost = lastValid, true
		w.count(func(t *chaosTally) { t.Lost++ })
	case strings.HasPrefix(err.Error(), "dsync: cond ") && probe:
		// Its context ended: before Wait released the lock (then it is
		// still held), or while it waited for a signal.
		ucall := now()
		uerr := m.UnlockContext(lctx)
		uret := now()
		if uerr == nil {
			cw.Out = "held"
			rel.Call, rel.Ret = ucall, uret
		} else {
			cw.Out = "gaveup"
			w.failedOn(-1, err, wcall, wret, ended) // a wait for a signal, not the lock
		}
	case strings.HasPrefix(err.Error(), "dsync: cond "):
		// Its deadline ended the wait for a signal.
		cw.Out = "gaveup"
		w.failedOn(-1, err, wcall, wret, ended) // a wait for a signal, not the lock
	default:
		// Woken, and its re-acquisition of the lock ended (its context).
		cw.Out = "wokenfail"
		if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
			w.count(func(t *chaosTally) { t.Errs++ })
			fmt.Fprintln(os.Stderr, "chaos cond: wait:", err)
		}
	}
	w.emit(cw)
	w.emit(rel)
	return nil, acq, lastValid
}

// condFigs is what checkCond found.
type condFigs struct {
	woken, wokenFail, gaveUp, closed, other int // Waits by outcome
	signals, broadcasts, uncertain          int // certain ones, and those not (made by a process stopped meanwhile, or failed)
	lostChecked, bcastChecked               int // waits the two checks applied to
	lost, missed                            int // violations
}

func (f condFigs) String() string {
	return fmt.Sprintf("Cond: %d Waits woken (+%d woken whose re-lock ended), %d gave up, %d closed by a deploy, %d other; %d Signals, %d Broadcasts under the lock (+%d uncertain); no lost signal: %d waits that gave up checked, %d owed a signal; Broadcast: %d waits checked, %d not woken",
		f.woken, f.wokenFail, f.gaveUp, f.closed, f.other, f.signals, f.broadcasts, f.uncertain, f.lostChecked, f.lost, f.bcastChecked, f.missed)
}

// checkCond checks a Cond history (condLoop). Registrations and signals
// are made under the lock, so a Wait called (cwc) before a signal was
// called registered before it; a waiter whose process was not frozen,
// killed or deployed from its hold to the moment in question kept its
// place (it renews it every lease/3). It checks:
//
//   - Broadcast wakes every waiter registered before it: a Wait called
//     before a Broadcast that had not returned when the Broadcast began
//     does not give up (return with its deadline's error while waiting
//     for a signal), unless its deadline came within condSlack of the
//     Broadcast's return or its process was faulted meanwhile. (Woken, it
//     re-acquires the lock, which a later deploy's Close may cut.)
//   - No lost signal: a Wait that gave up (its context ended while it
//     waited for a signal) was not owed one. Signals go to the waiters in
//     arrival order, and a signal given to a waiter that is gone passes on,
//     so a waiter is signalled at the latest by the (k+1)-th Signal after
//     its registration, k being the waiters registered before it and
//     still waiting then (counted generously: every Wait called before
//     it that returned after its call, or never, its process killed). If
//     more Signals than that began after its registration and returned
//     condSlack before its context ended, a signal was lost. Waits with a
//     waiter ahead of them whose process was faulted meanwhile (its
//     signal passes on only when its place lapses) are not checked, nor
//     Signals whose maker's process was frozen meanwhile (its hold may
//     have been lost: not ordered).
//
// Every return from Wait holding the lock is the lock history's check.
func checkCond(t *testing.T, ev []cev, run *chaosRun) condFigs {
	t.Helper()
	var f condFigs
	type wait struct {
		who, slot       int
		hold, call, ret int64 // ret 0: never returned (its process killed)
		end             int64
		out             string
	}
	var waits []*wait
	open := map[int]*wait{}
	type sig struct {
		slot            int
		hold, call, ret int64
		all             bool
	}
	var sigs []sig
	byCall := slices.Clone(ev)
	slices.SortStableFunc(byCall, func(a, b cev) int { return int(a.Call - b.Call) })
	for _, e := range byCall {
		switch e.Op {
		case "cwc":
			w := &wait{who: e.Who, slot: e.Slot, hold: e.Hold, call: e.Call}
			waits = append(waits, w)
			open[e.Who] = w
		case "cw":
			w := open[e.Who]
			if w == nil || w.call != e.Call {
				t.Errorf("a Cond wait's return without its call: %+v", e)
				continue
			}
			delete(open, e.Who)
			w.ret, w.end, w.out = e.Ret, e.End, e.Out
		case "cs":
			s := sig{slot: e.Slot, hold: e.Hold, call: e.Call, ret: e.Ret, all: e.Val == "all"}
			if e.Out != "ok" || faultedProc(run, e.Slot, e.Hold, e.Ret) {
				f.uncertain++
				continue
			}
			if s.all {
				f.broadcasts++
			} else {
				f.signals++
			}
			sigs = append(sigs, s)
		}
	}
	for _, w := range waits {
		switch w.out {
		case "woken":
			f.woken++
		case "wokenfail":
			f.wokenFail++
		case "gaveup":
			f.gaveUp++
		case "closed":
			f.closed++
		default:
			f.other++
		}
	}
	registered := func(w *wait) bool { return w.out != "notheld" && w.out != "held" }
	slack := int64(condSlack)
	// Broadcast.
	for _, b := range sigs {
		if !b.all {
			continue
		}
		for _, w := range waits {
			if !registered(w) || w.call >= b.call || (w.ret != 0 && w.ret <= b.call) || w.ret == 0 {
				continue
			}
			if (w.end != 0 && w.end <= b.ret+slack) || faultedProc(run, w.slot, w.hold, min(w.ret, b.ret+slack)) {
				continue
			}
			f.bcastChecked++
			// Woken, it re-acquires the lock, which may take long under
			// contention: a deploy may cut that (closed).
			if w.out == "gaveup" {
				f.missed++
				if f.missed <= 5 {
					t.Errorf("Cond: a Broadcast (%d..%d, slot %d) did not wake worker %d (slot %d), waiting since %d: its Wait returned %q at %d, its context ended at %d", b.call, b.ret, b.slot, w.who, w.slot, w.call, w.out, w.ret, w.end)
				}
			}
		}
	}
	// No lost signal.
	for _, w := range waits {
		if w.out != "gaveup" || w.end == 0 || faultedProc(run, w.slot, w.hold, w.ret) {
			continue
		}
		ahead, skip := 0, false
		for _, v := range waits {
			if v == w || !registered(v) || v.call >= w.call || (v.ret != 0 && v.ret <= w.call) {
				continue
			}
			if v.ret == 0 {
				// Its process was killed: its place lapsed within
				// condPlaceLapse of the kill. Gone before w registered,
				// it was not ahead of w; otherwise a signal given to it
				// passed on only when its place lapsed: not checked.
				if k, ok := killedAt(run, v.slot); ok && k+int64(condPlaceLapse) < w.call {
					continue
				}
				skip = true
				break
			}
			ahead++
			// A deploy's Close takes its waiters' places back at once,
			// handing on a signal given to them (Client.Close): it does
			// not exempt w. A stop or a kill of v's process may keep a
			// signal at v's place past w's end.
			if faultedProcBy(run, v.slot, w.call, min(w.end, v.ret), false) {
				skip = true
				break
			}
		}
		if skip {
			continue
		}
		f.lostChecked++
		owed := 0
		for _, s := range sigs {
			if !s.all && s.call > w.call && s.ret < w.end-slack {
				owed++
			}
		}
		if owed > ahead {
			f.lost++
			if f.lost <= 5 {
				t.Errorf("Cond: worker %d (slot %d) waited from %d and gave up at %d (its context ended at %d) with %d waiters ahead of it, after %d Signals given from its registration to %v before its context ended: a signal was lost", w.who, w.slot, w.call, w.ret, w.end, ahead, owed, condSlack)
			}
		}
	}
	return f
}

// condPlaceLapse is how soon after its process was killed a Cond
// waiter's place is gone: it renews the place every lease/3, and a place
// lapses a lease after its last renewal.
const condPlaceLapse = chaosLease + lateBound

// killedAt is when process slot was killed, if it was.
func killedAt(run *chaosRun, slot int) (int64, bool) {
	for _, k := range run.kills {
		if k.slot == slot {
			return k.at, true
		}
	}
	return 0, false
}

// faultedProc reports a fault of process slot (a SIGSTOP, a SIGKILL, a
// deploy) that overlapped [from, to].
func faultedProc(run *chaosRun, slot int, from, to int64) bool {
	return faultedProcBy(run, slot, from, to, true)
}

// faultedProcBy is faultedProc, deploys counted only with deploys.
func faultedProcBy(run *chaosRun, slot int, from, to int64, deploys bool) bool {
	for _, s := range run.stops {
		if s.slot == slot && s.at <= to && s.till >= from {
			return true
		}
	}
	for _, k := range run.kills {
		if k.slot == slot && k.at <= to {
			return true
		}
	}
	for _, d := range run.deploys {
		if deploys && d.Slot == slot && d.Start <= to && d.End >= from {
			return true
		}
	}
	return false
}
