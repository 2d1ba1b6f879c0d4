package faults

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dsync/dsync/dsync"
)

func init() {
	childRoles["chaos"] = childChaos
}

// A cev is one operation of the chaos scenario, printed by the child that
// made it. Op is
//
//	acq   an acquisition returned (for a Once: f began; Call is Do's call)
//	rel   a hold ended (Call..Ret bounds the moment it ended in Redis)
//	fret  a Once's f returned (Out ok or fail), before Do records it
//	obs   a Once's Do returned nil without running f (Val: OnceValue's value)
//	addc  a WaitGroup Add is about to be sent (Seq pairs it with its add)
//	add   a WaitGroup Add returned (Out ok, inval or err)
//	wait  a WaitGroup Wait returned (Out ok, or why not)
//	lacq  an Election's Campaign lost its grant before the term began
//	cwc   a Cond's Wait is called (chaos_cond_test.go)
//	cw    a Cond's Wait returned (Out: woken, wokenfail, gaveup, closed,
//	      notheld, held)
//	cs    a Cond's Signal (Val one) or Broadcast (all) returned
type cev struct {
	Op    string    `json:"op"`
	Who   int       `json:"who"`
	K     int       `json:"k"` // name index; a MultiLock's bitmask of names
	Read  bool      `json:"read,omitempty"`
	N     int64     `json:"n,omitempty"`
	Call  int64     `json:"call"`
	Ret   int64     `json:"ret"`
	Tok   uint64    `json:"tok,omitempty"`
	Toks  [3]uint64 `json:"toks,omitzero"` // a MultiLock's member tokens
	Lost  bool      `json:"lost,omitempty"`
	Out   string    `json:"out,omitempty"`
	Val   string    `json:"val,omitempty"`
	Seq   int64     `json:"seq,omitempty"`
	Frz   int64     `json:"frz,omitempty"`  // a run's rel: f's context ended early; its last valid check (frozenRuns)
	Cl    bool      `json:"cl,omitempty"`   // a rel: a deploy's Close ended the hold (or run)
	Cut   int64     `json:"cut,omitempty"`  // a Cl rel of a run that only the time of Close showed cut (chaosGen.cutBy): when f returned
	Wake  bool      `json:"wake,omitempty"` // an acq: a Cond's Wait re-acquired the lock
	Hold  int64     `json:"hold,omitempty"` // cwc, cw, cs: when the hold they were made in began (its acquire's return)
	End   int64     `json:"end,omitempty"`  // cw: when the wait's context ended (0: not by the return)
	Got   int64     `json:"got,omitempty"`  // an acq: when its hold began (AcquireDone.HeldSince, before the call returned; 0: not noted)
	Att   int       `json:"att,omitempty"`  // an acq: AcquireDone.Attempts of the acquisition, if AttOK
	AttOK bool      `json:"attok,omitempty"`
	Gots  [3]int64  `json:"gots,omitzero"` // a MultiLock's acq: its members' Got
	Slot  int       `json:"-"`             // the process, set by the parent
	epoch int       // the stretch between server data losses (applyWipes)
}

// chaosTally is what one child counted.
type chaosTally struct {
	Acq       int64  `json:"acq"`       // acquisitions (runs, for a Once)
	Cancelled int64  `json:"cancelled"` // waits ended by their context
	Errs      int64  `json:"errs"`      // other errors
	Lost      int64  `json:"lost"`      // holds that ended lost
	Late      int64  `json:"late"`      // waits that returned > 100 ms after their context ended (waitEnd.end)
	MaxLate   int64  `json:"maxLate"`   // ns
	TimerLate int64  `json:"timerLate"` // waits whose context's timer ran > 100 ms after it was due
	MaxTimer  int64  `json:"maxTimer"`  // ns: the latest such timer
	Stray     int64  `json:"stray"`     // unexpected errors, text in stderr
	ObsStale  int64  `json:"obsStale"`  // Election observers that did not end on the current state
	ObsNote   string `json:"obsNote,omitempty"`
	Worst     string `json:"worst,omitempty"` // the latest return's error
}

// A waitEnd says when the context of one wait ended. A timer due at its
// end (the deadline, or the moment another goroutine cancels it) records
// the time, then closes the context's Done channel: the context ends at
// fired exactly. On a loaded machine Go runs timers late (measured 80-150
// ms on 2 busy cores), the deadline timer of a context.WithTimeout too, so
// a deadline is not the moment a context ends: a wait on Done cannot
// return before the runtime has run its timer. The timer's own lateness
// is reported apart (timerLate).
type waitEnd struct {
	due      int64        // when the context was due to end
	fired    atomic.Int64 // when its timer ended it (0: not yet)
	released int64        // when the caller cancelled it, after the call returned
	// woke is when a goroutine started at the context's end ran (a
	// context.AfterFunc): how soon the runtime ran anything woken by it,
	// reported beside a late wait to tell the runtime's delay from dsync's.
	woke atomic.Int64
}

// end is when the context ended, 0 if it had not when the caller
// cancelled it after the call returned (the call returned first, having
// seen its deadline by the clock).
func (e *waitEnd) end() int64 { return e.fired.Load() }

// timerLate is how late the timer ran; for one that had not run when the
// caller cancelled the context after its due time, how late it was at
// least by then.
func (e *waitEnd) timerLate() int64 {
	if f := e.fired.Load(); f != 0 {
		return f - e.due
	}
	return max(e.released-e.due, 0)
}

// timedCtx ends the context c when the timer of e runs: Done closes at
// e.fired. With a deadline (dl non-zero) it is a context.WithTimeout as a
// wait sees it: Deadline reports it, Err says DeadlineExceeded.
type timedCtx struct {
	context.Context // a cancelCtx; the timer cancels it with cause DeadlineExceeded
	dl              time.Time
}

func (c timedCtx) Deadline() (time.Time, bool) {
	if c.dl.IsZero() {
		return c.Context.Deadline()
	}
	return c.dl, true
}

func (c timedCtx) Err() error {
	err := c.Context.Err()
	if err != nil && !c.dl.IsZero() && context.Cause(c.Context) == context.DeadlineExceeded {
		return context.DeadlineExceeded
	}
	return err
}

// endAfter returns a context of parent that ends after d (as a deadline
// if deadline is set), and the waitEnd that says when it did.
func endAfter(parent context.Context, d time.Duration, deadline bool) (context.Context, context.CancelFunc, *waitEnd) {
	cctx, cancel := context.WithCancelCause(parent)
	t0 := time.Now()
	e := &waitEnd{due: t0.Add(d).UnixNano()}
	ctx := timedCtx{Context: cctx}
	if deadline {
		ctx.dl = t0.Add(d)
	}
	tm := time.AfterFunc(d, func() { e.fired.Store(now()); cancel(context.DeadlineExceeded) })
	context.AfterFunc(cctx, func() { e.woke.Store(now()) })
	return ctx, func() {
		e.released = now()
		tm.Stop()
		cancel(context.Canceled)
	}, e
}

// A wend is one wait that its context ended, printed by the child for the
// parent, which leaves out of the lateness bound the waits that a SIGSTOP
// of their own process overlapped.
type wend struct {
	Call  int64 `json:"call"`
	Ret   int64 `json:"ret"`
	End   int64 `json:"end"`   // waitEnd.end (0: after Ret)
	Timer int64 `json:"timer"` // waitEnd.timerLate
	Woke  int64 `json:"woke"`  // waitEnd.woke (0: not by the return)
	K     int   `json:"k"`     // the name (a MultiLock's mask) waited for
	Who   int   `json:"who"`
	Slot  int   `json:"-"` // the process, set by the parent
}

const chaosSemSize = 3

// releaseBudgetSpent is in the error of a release whose own budget ran out
// with its caller's context live (dsync's cleanupTimeout, 2 s): Redis did
// not answer that long.
const releaseBudgetSpent = "within its 2s budget"

// chaosMultiNames is how many names a MultiLock's subsets are drawn from
// (m0..m2: its members are Mutexes, which must not be the Mutex kind's c0
// where both run at once with one key prefix, as in the soak); the other
// lock kinds contend on c0, WaitGroups use w0..w15 and Onces go through o0,
// o1, ... in sequence.
const chaosMultiNames = 3

type chaosWorker struct {
	c     *dsync.Client
	res   chaosRes
	who   int
	until time.Time
	tl    *chaosTally
	mu    *sync.Mutex // guards tl
	seq   *atomic.Int64
	rec   func(cev)    // where events go; nil: printed for the parent
	wrec  func(wend)   // with rec: where the waits that their context ended go (nil: nowhere)
	dep   *chaosDeploy // the process's succession of Clients (deploys); nil: c only
	// halt, when set, ends the work before until once it is closed.
	halt <-chan struct{}
}

// running reports whether the worker goes on: until has not come, nor
// halt closed.
func (w *chaosWorker) running() bool {
	if w.halt != nil {
		select {
		case <-w.halt:
			return false
		default:
		}
	}
	return time.Now().Before(w.until)
}

// gen is the worker's current Client when the process deploys (w.c is set
// to it), nil otherwise.
func (w *chaosWorker) gen() *chaosGen {
	g := w.dep.gen()
	if g != nil {
		w.c = g.c
	}
	return g
}

func (w *chaosWorker) emit(e cev) {
	e.Who = w.who
	if w.rec != nil {
		w.rec(e)
		return
	}
	say("ev", e)
}

func (w *chaosWorker) count(f func(t *chaosTally)) {
	w.mu.Lock()
	f(w.tl)
	w.mu.Unlock()
}

// waitCtx returns the context of one acquisition: most wait up to 3 s,
// one in five gives up after 1-50 ms, one in ten is cancelled by another
// goroutine after 0-30 ms. The waitEnd says when it ended.
func waitCtx(parent context.Context) (context.Context, context.CancelFunc, *waitEnd) {
	switch r := rand.IntN(10); {
	case r < 7:
		return endAfter(parent, 3*time.Second, true)
	case r < 9:
		return endAfter(parent, time.Duration(1+rand.IntN(50))*time.Millisecond, true)
	}
	return endAfter(parent, time.Duration(rand.IntN(31))*time.Millisecond, false)
}

// failed counts an acquisition called at call that returned err at ret;
// e says when its context ended, for lateness.
func (w *chaosWorker) failed(err error, call, ret int64, e *waitEnd) {
	w.failedOn(-1, err, call, ret, e)
}

// failedOn is failed for a wait on name k (-1: none of the deploy check's).
func (w *chaosWorker) failedOn(k int, err error, call, ret int64, e *waitEnd) {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		end, timer := e.end(), e.timerLate()
		late := ret - end
		w.count(func(t *chaosTally) {
			t.Cancelled++
			if end != 0 && late > int64(100*time.Millisecond) {
				t.Late++
			}
			if end != 0 && late > t.MaxLate {
				t.MaxLate = late
				t.Worst = err.Error()
			}
			if timer > int64(100*time.Millisecond) {
				t.TimerLate++
			}
			t.MaxTimer = max(t.MaxTimer, timer)
		})
		we := wend{Call: call, Ret: ret, End: end, Timer: timer, Woke: e.woke.Load(), K: k, Who: w.who}
		switch {
		case w.rec == nil:
			say("wend", we)
		case w.wrec != nil:
			w.wrec(we)
		}
		return
	}
	w.count(func(t *chaosTally) { t.Errs++ })
	if w.rec != nil {
		time.Sleep(10 * time.Millisecond) // back off a Redis error
		return
	}
	// How long after its context ended, only if it did (e nil or End 0:
	// the call's context had not ended, and ret less 0 is no duration).
	ended := ""
	if e != nil && e.end() != 0 {
		ended = fmt.Sprintf("; %v after its context ended", time.Duration(ret-e.end()))
	}
	fmt.Fprintf(os.Stderr, "chaos worker %d: %v (%T%s)\n", w.who, err, errors.Unwrap(err), ended)
	time.Sleep(10 * time.Millisecond) // back off a Redis error
}

// pause is the work inside a critical section: 0-2 ms.
func pause() { time.Sleep(time.Duration(rand.IntN(2001)) * time.Microsecond) }

// thawLag is -chaos.thawkill's wait, in a child (FAULTS_THAWLAG).
func thawLag() {
	if d, err := time.ParseDuration(os.Getenv("FAULTS_THAWLAG")); err == nil {
		time.Sleep(d)
	}
}

// exclusive is a writer's critical section on name index k with token
// tok: an increment of the fenced counter (read and write both carry the
// token), then an increment of the unfenced register. Each step checks the
// lock context first, as a careful holder does; a holder frozen after its
// check writes anyway, which is what the fence is for. lastValid is the
// latest moment the holder knew its hold valid: before each check.
func (w *chaosWorker) exclusive(lctx context.Context, k int, tok uint64, lastValid *int64) {
	t0 := now()
	if lctx.Err() != nil {
		return
	}
	*lastValid = t0
	if v, ok := w.res.num("fr", k, tok, 0); ok {
		w.dep.trapped(lctx)
		if time.Duration(now()-t0) > chaosLease {
			thawLag() // frozen past the lease by the monkey's trap
		}
		pause()
		w.res.do("fw", k, tok, v+1)
	}
	t1 := now()
	if lctx.Err() != nil {
		return
	}
	*lastValid = t1
	v, _ := w.res.num("win", k, 0, 0)
	pause()
	w.res.do("wout", k, 0, v+1)
}

// shared is a reader's critical section: the fence must not have seen a
// writer with a larger token, and the register must not change under it.
func (w *chaosWorker) shared(lctx context.Context, k int, tok uint64, lastValid *int64) {
	t0 := now()
	if lctx.Err() != nil {
		return
	}
	*lastValid = t0
	w.res.do("fc", k, tok, 0)
	v, _ := w.res.num("rin", k, 0, 0)
	pause()
	w.res.do("rout", k, 0, v)
}

// relEvent records the end of a hold acquired at acq: Call..Ret bounds the
// moment Redis stopped counting it. Released normally, that is the
// release call; lost (or refused with ErrNotHeld), it lapsed after the
// holder last knew it valid and before the holder saw it gone; a release
// that failed otherwise may leave the hold in Redis until its lease runs
// out.
func relEvent(acq cev, lctx context.Context, uerr error, lastValid, rcall, rret int64) (cev, bool) {
	e := cev{Op: "rel", K: acq.K, Read: acq.Read, N: acq.N, Tok: acq.Tok, Call: rcall, Ret: rret}
	lost := errors.Is(context.Cause(lctx), dsync.ErrLockLost) || errors.Is(uerr, dsync.ErrNotHeld)
	switch {
	case lost:
		e.Call, e.Lost = lastValid, true
	case uerr != nil:
		e.Ret = rret + int64(2*chaosLease)
	}
	return e, lost
}

// lockOps are the acquire and release of the kinds held through a lock
// context.
type lockOps struct {
	acquire func(ctx context.Context, read bool, n int64) (context.Context, error)
	release func(lctx context.Context, read bool, n int64) error
	pick    func() (read bool, n int64, k int)
	toks    func() [3]uint64 // MultiLock: the members' tokens of the last acquire
}

func (w *chaosWorker) lockLoop(kind string, ops lockOps) {
	var g *chaosGen
	for w.running() {
		if ng := w.gen(); ng != g {
			g, ops = ng, w.lockKind(kind) // a deploy: the next Client's
		}
		read, n, k := ops.pick()
		tctx, got := withAcquired(g.ownerCtx(context.Background()))
		actx, cancel, ended := waitCtx(tctx)
		call := now()
		lctx, err := ops.acquire(actx, read, n)
		ret := now()
		if err != nil {
			cancel()
			if g.closed(err, nil) {
				continue // a waiter of the Client a deploy closed
			}
			if kind == "election" && errors.Is(err, dsync.ErrLockLost) {
				// Granted, and lost before the term's record (Campaign):
				// the process was frozen past the lease in between; the
				// parent checks that a stop overlapped the call.
				w.emit(cev{Op: "lacq", K: k, Call: call, Ret: ret})
				continue
			}
			w.failedOn(k, err, call, ret, ended)
			continue
		}
		w.count(func(t *chaosTally) { t.Acq++ })
		tok, _ := dsync.FencingToken(lctx)
		o := got.only()
		acq := cev{Op: "acq", K: k, Read: read, N: n, Call: call, Ret: ret, Tok: tok, Got: o.at, Att: o.attempts, AttOK: o.seen}
		if ops.toks != nil {
			acq.Toks = ops.toks()
			for i := range acq.Gots {
				acq.Gots[i] = got.of("m" + strconv.Itoa(i)).at
			}
		}
		w.emit(acq)
		// The hold existed at some moment of the acquire call; it is
		// known valid later only where a check of its context says so
		// (a process frozen between the grant and the return gets a hold
		// whose lease has lapsed: its first check sees it lost).
		lastValid := call
		switch {
		case kind == "sem":
			if t0 := now(); lctx.Err() == nil {
				lastValid = t0
				w.dep.trapped(lctx)
				w.res.do("sin", 0, 0, n)
				pause()
				w.res.do("sout", 0, 0, n)
			}
		case kind == "multi":
			for i := range chaosMultiNames {
				if k&(1<<i) != 0 {
					w.exclusive(lctx, i, acq.Toks[i], &lastValid)
				}
			}
		case read:
			w.shared(lctx, k, tok, &lastValid)
		default:
			w.exclusive(lctx, k, tok, &lastValid)
		}
		rcall := now()
		w.emit(cev{Op: "relc", K: k, Call: rcall, Ret: rcall})
		uerr := ops.release(lctx, read, n)
		rret := now()
		// Before cancel: whether the wait's context had ended, or its
		// deadline passed by the release's return (its timer can fire
		// late: starved processes' timers were up to 2 s late; dsync
		// reads a deadline passed as reached, ctxErr).
		dl, hasDL := actx.Deadline()
		byCtx := actx.Err() != nil || (hasDL && rret >= dl.UnixNano())
		cancel()
		if uerr != nil && g.closed(uerr, lctx) {
			// Close released the hold: after its holder last knew it
			// valid, by the time Close returned.
			w.emit(cev{Op: "rel", K: k, Read: read, N: n, Tok: tok, Call: lastValid, Ret: max(rret, g.closeEnd), Out: "closed", Cl: true})
			continue
		}
		rel, lost := relEvent(acq, lctx, uerr, lastValid, rcall, rret)
		if lost {
			w.count(func(t *chaosTally) { t.Lost++ })
		}
		switch {
		case uerr != nil && !lost && byCtx && (errors.Is(uerr, context.DeadlineExceeded) || errors.Is(uerr, context.Canceled)):
			// Its context's: a release under a lock context whose
			// deadline (the wait's, 1-50 ms for one in five) was near
			// gets that deadline plus dsync's cleanup grace (40 ms); a
			// round trip longer than that (both CPUs busy) leaves the
			// release to the lease, and the history keeps the hold for
			// two leases (relEvent).
			if w.rec == nil {
				fmt.Fprintln(os.Stderr, "chaos worker: release ended by its context's deadline:", uerr)
			}
		case uerr != nil && !lost && w.rec == nil && strings.Contains(uerr.Error(), releaseBudgetSpent):
			// Redis did not answer within the release's own budget:
			// excused only if this process's probes were late that long
			// meanwhile (the parent checks: checkBudgetReleases).
			say("budget", wend{Call: rcall, Ret: rret, K: k, Who: w.who})
			fmt.Fprintln(os.Stderr, "chaos worker: release, its budget spent:", uerr)
		case uerr != nil && !lost:
			w.count(func(t *chaosTally) { t.Errs++ })
			if w.rec == nil {
				fmt.Fprintln(os.Stderr, "chaos worker: release:", uerr)
			}
		}
		w.emit(rel)
	}
}

// tokLocker is a MultiLock member that keeps the token of its last
// acquisition (a MultiLock's own context carries none).
type tokLocker struct {
	m   *dsync.Mutex
	tok atomic.Uint64
}

func (l *tokLocker) LockContext(ctx context.Context) (context.Context, error) {
	lctx, err := l.m.LockContext(ctx)
	if err == nil {
		tok, _ := dsync.FencingToken(lctx)
		l.tok.Store(tok)
	}
	return lctx, err
}

func (l *tokLocker) UnlockContext(ctx context.Context) error { return l.m.UnlockContext(ctx) }

func (w *chaosWorker) lockKind(kind string) lockOps {
	c := w.c
	one := func() (bool, int64, int) { return false, 1, 0 }
	switch kind {
	case "mutex", "fair":
		var l dsync.ContextLocker = c.NewMutex("c0")
		if kind == "fair" {
			l = c.NewFairMutex("c0")
		}
		return lockOps{
			acquire: func(ctx context.Context, _ bool, _ int64) (context.Context, error) { return l.LockContext(ctx) },
			release: func(lctx context.Context, _ bool, _ int64) error { return l.UnlockContext(lctx) },
			pick:    one,
		}
	case "rw":
		rw := c.NewRWMutex("c0")
		return lockOps{
			acquire: func(ctx context.Context, read bool, _ int64) (context.Context, error) {
				if read {
					return rw.RLockContext(ctx)
				}
				return rw.LockContext(ctx)
			},
			release: func(lctx context.Context, read bool, _ int64) error {
				if read {
					return rw.RUnlockContext(lctx)
				}
				return rw.UnlockContext(lctx)
			},
			pick: func() (bool, int64, int) { return rand.IntN(4) != 0, 1, 0 },
		}
	case "sem":
		s := c.NewSemaphore("c0", chaosSemSize)
		return lockOps{
			acquire: func(ctx context.Context, _ bool, n int64) (context.Context, error) { return s.Acquire(ctx, n) },
			release: func(lctx context.Context, _ bool, n int64) error { return s.Release(lctx, n) },
			pick:    func() (bool, int64, int) { return false, 1 + rand.Int64N(chaosSemSize), 0 },
		}
	case "multi":
		// Subsets of the names c0..c2: each pair, and all three. Members
		// are given in one order everywhere (by name), as MultiLock asks
		// of lockers it cannot order itself.
		masks := []int{3, 5, 6, 7}
		mls := map[int]*dsync.MultiLock{}
		lockers := map[int][]*tokLocker{}
		for _, m := range masks {
			var ls []dsync.ContextLocker
			for i := range chaosMultiNames {
				if m&(1<<i) != 0 {
					tl := &tokLocker{m: c.NewMutex(fmt.Sprint("m", i))}
					ls = append(ls, tl)
					lockers[m] = append(lockers[m], tl)
				}
			}
			mls[m] = dsync.NewMultiLock(ls...)
		}
		var cur int
		return lockOps{
			acquire: func(ctx context.Context, _ bool, _ int64) (context.Context, error) { return mls[cur].LockContext(ctx) },
			release: func(lctx context.Context, _ bool, _ int64) error { return mls[cur].UnlockContext(lctx) },
			pick: func() (bool, int64, int) {
				cur = masks[rand.IntN(len(masks))]
				return false, 1, cur
			},
			toks: func() (t [3]uint64) {
				j := 0
				for i := range chaosMultiNames {
					if cur&(1<<i) != 0 {
						t[i] = lockers[cur][j].tok.Load()
						j++
					}
				}
				return t
			},
		}
	case "election":
		// Leadership of election c0: Campaign with the value "who/seq",
		// the term's fenced writes (the term is the token), Resign. The
		// model is the Mutex's: one leader at a time, so at most one per
		// term; terms follow real time (checkTokensFast).
		e := c.NewElection("c0")
		var seq int
		return lockOps{
			acquire: func(ctx context.Context, _ bool, _ int64) (context.Context, error) {
				seq++
				return e.Campaign(ctx, fmt.Sprintf("%d/%d", w.who, seq))
			},
			release: func(lctx context.Context, _ bool, _ int64) error { return e.Resign(lctx) },
			pick:    one,
		}
	}
	panic("unknown kind " + kind)
}

// observeElection follows election c0 with Observe until the workers are
// done (stop closed), then checks that the observer ends on the current
// state: within 3 leases of the end its latest delivery and Leader agree
// (the same term and owner, or no leader). It reports what it found.
func observeElection(c *dsync.Client, dep *chaosDeploy, stop <-chan struct{}) (ok bool, note string) {
	g := dep.gen()
	if g != nil {
		c = g.c
	}
	e := c.NewElection("c0")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := e.Observe(ctx)
	var last dsync.Leader
	n, deploys := 0, 0
	// reopen follows the election on the next Client when a deploy's
	// Close closed the channel.
	reopen := func() bool {
		if g == nil {
			return false
		}
		select {
		case <-g.next:
		case <-time.After(10 * time.Second):
			return false
		}
		g = dep.gen()
		c, e = g.c, g.c.NewElection("c0")
		ch = e.Observe(ctx)
		deploys++
		return true
	}
	for {
		select {
		case l, open := <-ch:
			if !open {
				if reopen() {
					continue
				}
				return false, "the observer's channel closed early"
			}
			last, n = l, n+1
			continue
		case <-stop:
		}
		break
	}
	deadline := time.After(3 * chaosLease)
	for {
		cur, err := e.Leader(context.Background())
		if errors.Is(err, dsync.ErrNoLeader) {
			cur, err = dsync.Leader{}, nil
		}
		if err == nil && cur.Term == last.Term && cur.Owner == last.Owner && cur.Value == last.Value {
			return true, fmt.Sprintf("%d deliveries (%d Clients), ends on term %d", n, deploys+1, last.Term)
		}
		select {
		case l, open := <-ch:
			if !open {
				if reopen() {
					continue
				}
				return false, "the observer's channel closed early"
			}
			last, n = l, n+1
		case <-time.After(20 * time.Millisecond):
		case <-deadline:
			return false, fmt.Sprintf("3 leases after the end the observer's latest is term %d owner %q value %q, Leader says term %d owner %q value %q (%v)", last.Term, last.Owner, last.Value, cur.Term, cur.Owner, cur.Value, err)
		}
	}
}

var errChaosFail = errors.New("f failed on purpose")

// onceLoop walks the names o0, o1, ...: Do on each until it returns nil
// (f ran and succeeded here or elsewhere). f fails one time in three.
func (w *chaosWorker) onceLoop(value bool) {
	k, _ := strconv.Atoi(os.Getenv("FAULTS_FROM"))
	for w.running() {
		g := w.gen()
		name := "o" + strconv.Itoa(k)
		tctx, got := withAcquired(g.ownerCtx(context.Background()))
		actx, cancel, ended := waitCtx(tctx)
		var (
			ran       bool
			acq       cev
			fret      int64
			fval      string // the value f returned
			lastValid int64
			fctxSaved context.Context
		)
		call := now()
		f := func(fctx context.Context) (string, error) {
			ran, fctxSaved = true, fctx
			tok, _ := dsync.FencingToken(fctx)
			o := got.of(name)
			acq = cev{Op: "acq", K: k, Call: call, Ret: now(), Tok: tok, Got: o.at, Att: o.attempts, AttOK: o.seen}
			w.emit(acq)
			w.count(func(t *chaosTally) { t.Acq++ })
			lastValid = call // as in lockLoop: valid from a check on
			w.exclusive(fctx, k, tok, &lastValid)
			val := fmt.Sprintf("%d/%d", w.who, tok)
			fval = val
			fret = now()
			if rand.IntN(3) == 0 {
				w.emit(cev{Op: "fret", K: k, Call: fret, Ret: fret, Out: "fail"})
				return "", errChaosFail
			}
			w.emit(cev{Op: "fret", K: k, Call: fret, Ret: fret, Out: "ok", Val: val})
			return val, nil
		}
		var val string
		var err error
		if value {
			val, err = dsync.OnceValue(w.c, name, f)(actx)
		} else {
			err = w.c.NewOnce(name).Do(actx, func(fctx context.Context) error {
				var ferr error
				val, ferr = f(fctx)
				return ferr
			})
			if err == nil && !ran {
				val = ""
			}
		}
		ret := now()
		cancel()
		seen := ran && g.closed(err, fctxSaved)
		if ran && (seen || g.cutBy(ret)) {
			// A deploy's Close cut the run (released as failed), or
			// came as its result was being recorded: it ended after
			// the run last knew it valid, by the time Close returned.
			// (Close began before Do returned, which may say nil: see
			// cutBy.)
			rel := cev{Op: "rel", K: k, Tok: acq.Tok, Call: lastValid, Ret: max(ret, g.closeEnd), Out: "unknown", Val: fval, Cl: true}
			if !value {
				rel.Val = ""
			}
			if !seen {
				rel.Cut = fret
			}
			w.emit(rel)
			if err == nil {
				// Do returned nil: the Once was done (with val) by then.
				obs := cev{Op: "obs", K: k, Call: call, Ret: ret, Out: "ok", Val: val}
				if !value {
					obs.Val = ""
				}
				w.emit(obs)
				k++
			}
			continue
		}
		if !ran && err != nil && g.closed(err, nil) {
			continue
		}
		switch {
		case ran:
			rel := cev{Op: "rel", K: k, Tok: acq.Tok, Call: fret, Ret: ret, Out: "fail"}
			if errors.Is(err, dsync.ErrLockLost) || errors.Is(context.Cause(fctxSaved), dsync.ErrLockLost) {
				// The run's lease lapsed: it ended after the run last knew
				// it valid. Its result may still have been recorded (no
				// other run took over): then Do returned nil.
				rel.Call, rel.Lost = lastValid, true
				w.count(func(t *chaosTally) { t.Lost++ })
			}
			if !rel.Lost && fctxSaved.Err() != nil {
				// f's context ended otherwise (Do's own context): if that
				// was while the process was frozen past the run's lease
				// (its deadline passed meanwhile and ended f's context
				// before the lease clock did), the lease lapsed after the
				// run last knew it valid and another run may have taken
				// over. The parent, which knows the stops, decides
				// (frozenRuns).
				rel.Frz = lastValid
			}
			// Whether another run may have taken over before this one's
			// result reached Redis: its lease was seen lost (also by the
			// recording itself: a run whose lease lapsed unseen before its
			// result landed, another run having begun since, ends f's
			// context with ErrLockLost), or the value Do returned is not
			// f's.
			superseded := rel.Lost || (value && val != fval)
			var done *cev
			switch {
			case err == nil && superseded:
				// Do returned nil: with the result another run recorded
				// after taking over (Do returns what is stored), or with
				// this run's own if none took over. This run's outcome is
				// unknown; the Once was done, with that value, by the
				// time Do returned.
				rel.Out, rel.Val = "unknown", val
				done = &cev{Op: "obs", K: k, Call: rel.Call, Ret: ret, Out: "ok", Val: val}
			case err == nil:
				rel.Out, rel.Val = "ok", val
			case errors.Is(err, errChaosFail), errors.Is(err, dsync.ErrLockLost):
			default: // a Redis error: the result may or may not be recorded
				rel.Out, rel.Val = "unknown", fval
				w.count(func(t *chaosTally) { t.Errs++ })
				if w.rec == nil {
					fmt.Fprintln(os.Stderr, "chaos once:", err)
				}
			}
			if !value {
				rel.Val = ""
			}
			w.emit(rel)
			if done != nil {
				if !value {
					done.Val = ""
				}
				w.emit(*done)
			}
			if err == nil {
				k++
			}
		case err == nil:
			w.emit(cev{Op: "obs", K: k, Call: call, Ret: ret, Out: "ok", Val: val})
			k++
		case w.lostBeforeStart(err, k, call, ret):
		default:
			w.failedOn(k, err, call, ret, ended)
		}
	}
}

// lostBeforeStart records a Once or Group call whose run began and was
// lost before f could start (ErrLockLost, f not run: its process frozen
// past the lease between the begin and f; record.go's runF): as an
// Election's grant lost before its term's record, the parent checks that
// a stop past the lease overlapped the call ("lacq").
func (w *chaosWorker) lostBeforeStart(err error, k int, call, ret int64) bool {
	if !errors.Is(err, dsync.ErrLockLost) {
		return false
	}
	w.emit(cev{Op: "lacq", K: k, Call: call, Ret: ret})
	return true
}

// chaosGroupKeyEvery is how long the Group workers stay on one key: the
// key is the wall clock in such periods, the same in every process, so
// that each key's history (its flights) stays short for porcupine.
const chaosGroupKeyEvery = 250 * time.Millisecond

// groupLoop calls Do of Group g0 on the key of the moment; fn, when this
// call runs it, writes the fenced counter of the key with the run's token
// and returns "who/seq", or fails one time in three with an error that
// names it. A run is an acq and a rel (Out ok: its result, or unknown: the
// run ended by its context, its lease or a Redis error, so its result may
// or may not be the flight's); a call that got a flight's result without
// running fn is an obs with that result (an error as "err who/seq").
func (w *chaosWorker) groupLoop() {
	var gen *chaosGen
	g := dsync.NewGroup[string](w.c, "g0")
	seq := 0
	for w.running() {
		if ng := w.gen(); ng != gen {
			gen, g = ng, dsync.NewGroup[string](w.c, "g0")
		}
		seq++
		k := int(time.Now().UnixNano() / int64(chaosGroupKeyEvery) % 1_000_000)
		id := fmt.Sprintf("%d/%d", w.who, seq)
		actx, cancel, ended := waitCtx(gen.ownerCtx(context.Background()))
		var (
			ran       bool
			acq       cev
			fret      int64
			fval      string
			lastValid int64
			fctxSaved context.Context
		)
		call := now()
		f := func(fctx context.Context) (string, error) {
			ran, fctxSaved = true, fctx
			tok, _ := dsync.FencingToken(fctx)
			acq = cev{Op: "acq", K: k, Call: call, Ret: now(), Tok: tok}
			w.emit(acq)
			w.count(func(t *chaosTally) { t.Acq++ })
			lastValid = call
			w.exclusive(fctx, k, tok, &lastValid)
			fret = now()
			if rand.IntN(3) == 0 {
				fval = "err " + id
				w.emit(cev{Op: "fret", K: k, Call: fret, Ret: fret, Out: "ok", Val: fval})
				return "", fmt.Errorf("%w %s", errChaosFail, id)
			}
			fval = id
			w.emit(cev{Op: "fret", K: k, Call: fret, Ret: fret, Out: "ok", Val: fval})
			return id, nil
		}
		v, _, err := g.Do(actx, "k"+strconv.Itoa(k), f)
		ret := now()
		cancel()
		if ran {
			// A deploy's Close began while the run was under way: it may
			// have ended the run in Redis (as in onceLoop) even if Do
			// returned f's value, which is then this call's alone.
			seen := gen.closed(err, fctxSaved)
			if seen || gen.cutBy(ret) {
				rel := cev{Op: "rel", K: k, Tok: acq.Tok, Call: lastValid, Ret: max(ret, gen.closeEnd), Out: "unknown", Val: fval, Cl: true}
				if !seen {
					rel.Cut = fret
				}
				w.emit(rel)
				continue
			}
		} else if err != nil && gen.closed(err, nil) {
			continue
		}
		got := v // the result this call got: a value, or "err who/seq"
		if err != nil {
			if msg, i := err.Error(), strings.Index(err.Error(), errChaosFail.Error()+" "); i >= 0 {
				got = "err " + msg[i+len(errChaosFail.Error())+1:]
			} else {
				got = ""
			}
		}
		switch {
		case ran:
			rel := cev{Op: "rel", K: k, Tok: acq.Tok, Call: fret, Ret: ret, Out: "unknown", Val: fval}
			if errors.Is(err, dsync.ErrLockLost) || errors.Is(context.Cause(fctxSaved), dsync.ErrLockLost) {
				rel.Call, rel.Lost = lastValid, true
				w.count(func(t *chaosTally) { t.Lost++ })
			} else if fctxSaved.Err() != nil {
				rel.Frz = lastValid // as in onceLoop
			}
			if got == fval && !rel.Lost {
				rel.Out = "ok" // the flight's result, as its leader's Do returned it
			}
			if got != "" && got != fval {
				w.count(func(t *chaosTally) { t.Errs++ })
				fmt.Fprintf(os.Stderr, "chaos group: the leader's Do returned %q, its fn %q\n", got, fval)
			}
			w.emit(rel)
		case got != "":
			w.emit(cev{Op: "obs", K: k, Call: call, Ret: ret, Out: "ok", Val: got})
		case w.lostBeforeStart(err, k, call, ret):
		default:
			w.failedOn(k, err, call, ret, ended)
		}
	}
}

const chaosWaitGroups = 16

// wgLoop, on one of 16 WaitGroups: four times in ten a task (Add 1, work,
// Done), once a task with a Wait of 1-20 ms inside it (certainly cut
// short), three times a Wait of 50-500 ms, otherwise an Add(-1) that may
// find the counter at zero (and repairs the counters of tasks whose
// process was killed).
func (w *chaosWorker) wgLoop() {
	var g *chaosGen
	add := func(k int, d int64) error {
		g = w.gen()
		seq := w.seq.Add(1)
		call := now()
		w.emit(cev{Op: "addc", K: k, N: d, Call: call, Seq: seq})
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		err := w.c.NewWaitGroup("w"+strconv.Itoa(k)).Add(ctx, d)
		cancel()
		e := cev{Op: "add", K: k, N: d, Call: call, Ret: now(), Seq: seq, Out: "ok"}
		switch {
		case errors.Is(err, dsync.ErrInvalidArgument):
			e.Out = "inval"
		case g.closed(err, nil):
			e.Out = "err" // a deploy's Close: applied or not
			e.Ret = max(e.Ret, g.closeEnd)
		case err != nil:
			e.Out = "err"
			w.count(func(t *chaosTally) { t.Errs++ })
			fmt.Fprintln(os.Stderr, "chaos wg:", err)
		}
		w.emit(e)
		w.count(func(t *chaosTally) { t.Acq++ })
		return err
	}
	for w.running() {
		g = w.gen()
		k := rand.IntN(chaosWaitGroups)
		switch r := rand.IntN(10); {
		case r < 4:
			if add(k, 1) == nil {
				pause()
				_ = add(k, -1)
			}
		case r < 5:
			// A waiter cancelled while the counter is certainly above
			// zero: its own task is not done.
			if add(k, 1) == nil {
				ctx, cancel, ended := endAfter(context.Background(), time.Duration(1+rand.IntN(20))*time.Millisecond, true)
				call := now()
				err := w.c.NewWaitGroup("w" + strconv.Itoa(k)).Wait(ctx)
				ret := now()
				cancel()
				e := cev{Op: "wait", K: k, Call: call, Ret: ret, Out: "ok"}
				switch {
				case g.closed(err, nil):
					e.Out = "closed"
				case err != nil:
					e.Out = "timeout"
					w.failed(err, call, ret, ended)
				}
				w.emit(e)
				_ = add(k, -1)
			}
		case r < 8:
			d := time.Duration(50+rand.IntN(451)) * time.Millisecond
			ctx, cancel, ended := endAfter(context.Background(), d, true)
			call := now()
			err := w.c.NewWaitGroup("w" + strconv.Itoa(k)).Wait(ctx)
			ret := now()
			cancel()
			e := cev{Op: "wait", K: k, Call: call, Ret: ret, Out: "ok"}
			switch {
			case g.closed(err, nil):
				e.Out = "closed"
			case err != nil:
				e.Out = "timeout"
				w.failed(err, call, ret, ended)
			}
			w.emit(e)
			w.count(func(t *chaosTally) { t.Acq++ })
		default:
			_ = add(k, -1)
		}
		// 2-10 ms between operations keeps a 60 s history within what
		// porcupine checks in seconds.
		time.Sleep(time.Duration(2000+rand.IntN(8001)) * time.Microsecond)
	}
}

// childChaos runs FAULTS_G workers of FAULTS_KIND until FAULTS_UNTIL (unix
// ns), worker ids FAULTS_ID*FAULTS_G + i, then says "done" with its tally.
func childChaos(c *dsync.Client, res remote) int {
	g, _ := strconv.Atoi(os.Getenv("FAULTS_G"))
	id, _ := strconv.Atoi(os.Getenv("FAULTS_ID"))
	u, _ := strconv.ParseInt(os.Getenv("FAULTS_UNTIL"), 10, 64)
	kind := os.Getenv("FAULTS_KIND")
	var (
		wg  sync.WaitGroup
		mu  sync.Mutex
		tl  chaosTally
		seq atomic.Int64
	)
	seq.Store(int64(id) << 32)
	// Deploys (chaos_deploy_test.go): the workers' Clients are the
	// deployer's; a SIGUSR1 closes the current one and opens the next.
	var dep *chaosDeploy
	if os.Getenv("FAULTS_DEPLOY") == "1" {
		lease, _ := time.ParseDuration(os.Getenv("FAULTS_LEASE"))
		var err error
		dep, err = newChaosDeploy(id, childRC, os.Getenv("FAULTS_PREFIX"), lease)
		if err != nil {
			fmt.Fprintln(os.Stderr, "chaos child: opening its Client:", err)
			return 2
		}
		if tags := os.Getenv("FAULTS_DEPLOY_SCAN"); tags != "" {
			dep.scan = strings.Split(tags, ",")
		}
		stop, stopped := make(chan struct{}), make(chan struct{})
		dep.listen()
		go func() { defer close(stopped); dep.run(stop) }()
		defer func() { close(stop); <-stopped; dep.close() }()
		say("ready", "")
	}
	for i := range g {
		w := &chaosWorker{c: c, res: chaosRes{res, id}, who: id*g + i, until: time.Unix(0, u), tl: &tl, mu: &mu, seq: &seq, dep: dep}
		wg.Add(1)
		go func() {
			defer wg.Done()
			switch kind {
			case "once":
				w.onceLoop(false)
			case "oncevalue":
				w.onceLoop(true)
			case "wg":
				w.wgLoop()
			case "group":
				w.groupLoop()
			case "cond":
				w.condLoop()
			default:
				w.lockLoop(kind, w.lockKind(kind))
			}
		}()
	}
	if kind == "election" {
		stop := make(chan struct{})
		obs := make(chan struct{})
		go func() {
			defer close(obs)
			ok, note := observeElection(c, dep, stop)
			mu.Lock()
			if !ok {
				tl.ObsStale++
			}
			tl.ObsNote = note
			mu.Unlock()
		}()
		wg.Wait()
		close(stop)
		<-obs
		say("done", tl)
		return 0
	}
	wg.Wait()
	say("done", tl)
	return 0
}
