package dsync_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
)

// The rolling restart (issues 24 and 30): 4 replicas, each a Client on
// connections of its own, contend on one primitive while each replica in
// turn closes its Client and opens a new one. A deploy must hand
// everything over: no waiter waits more than rollBound after the lock is
// free because of a closed Client, observers see a closed leader's term
// end within rollBound, nothing is left in Redis for a closed Client once
// its Close returned, no two holders, tokens strictly increasing.

var (
	rollingDur   = flag.Duration("rolling.dur", 10*time.Second, "how long TestRollingRestart runs per primitive")
	rollingEvery = flag.Duration("rolling.every", 250*time.Millisecond, "time between two restarts in TestRollingRestart (4 replicas restart in turn: each every 4x this)")
)

const (
	rollReplicas = 4
	rollLease    = 6 * time.Second
	rollBound    = 100 * time.Millisecond
)

// A rollClient is one Client of a replica, from its opening to its Close.
type rollClient struct {
	c    *dsync.Client
	rc   rueidis.Client
	name string // its WithClientName, in every owner it makes
	id   string // dsync.ClientID
	next chan struct{}
	// closeStart and closeEnd are when its Close began and returned (set
	// before next is closed).
	closeStart, closeEnd time.Duration
}

type rollReplica struct {
	i   int
	gen int
	cur atomic.Pointer[rollClient]
}

// A rollHold is one hold (a lock, an Election term, a Once's or Group's
// run of f) as the holder saw it.
type rollHold struct {
	what       string // the lock: holds of one lock must not overlap
	excl       bool
	lctx       context.Context
	tok        uint64
	start, end time.Duration
	closedBy   *rollClient // the hold ended by this Client's Close
	unlocking  atomic.Bool
	lockCancel bool // its lock context had ended when it was recorded
}

type rolling struct {
	t      *testing.T
	prefix string
	t0     time.Time
	rc     rueidis.Client
	opts   []dsync.Option
	ctx    context.Context
	reps   [rollReplicas]*rollReplica

	mu      sync.Mutex
	fails   []string
	holds   []*rollHold
	live    map[string][]*rollHold // per lock, holds not known ended
	lastTok map[string]uint64
	closed  []*rollClient
	stopAt  time.Duration // when the workers were told to stop
	// onClose, if set, runs just before a Client's Close begins.
	onClose func(cl *rollClient)
}

func (r *rolling) now() time.Duration { return time.Since(r.t0) }

func (r *rolling) fail(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.fails) < 20 {
		r.fails = append(r.fails, fmt.Sprintf("%v: ", r.now().Round(time.Millisecond))+fmt.Sprintf(format, args...))
	}
}

func (r *rolling) open(rep *rollReplica) *rollClient {
	rep.gen++
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{server(r.t).Addr}, DisableCache: true})
	require.NoError(r.t, err)
	name := fmt.Sprintf("roll%dg%d", rep.i, rep.gen)
	c, err := dsync.NewClient(rc, append(slices.Clone(r.opts), dsync.WithClientName(name))...)
	require.NoError(r.t, err)
	return &rollClient{c: c, rc: rc, name: name, id: dsync.ClientID(c), next: make(chan struct{})}
}

// restart closes rep's Client, checks that nothing of it is left in Redis,
// and opens the next one.
func (r *rolling) restart(rep *rollReplica) {
	old := rep.cur.Load()
	if r.onClose != nil {
		r.onClose(old)
	}
	old.closeStart = r.now()
	require.NoError(r.t, old.c.Close())
	old.closeEnd = r.now()
	if left := r.leftBy(old); len(left) > 0 {
		r.fail("Client %s left in Redis after its Close returned: %v", old.name, left)
	}
	old.rc.Close()
	r.mu.Lock()
	r.closed = append(r.closed, old)
	r.mu.Unlock()
	rep.cur.Store(r.open(rep))
	close(old.next)
}

// leftBy lists the keys under the test's prefix that name cl (its name
// is in every owner it made, its id in every wait id), with what names it.
// Not the Client's state: an Election's record, which is history (the
// owners of past terms), and the tombstones of attempts that were taken
// back, which make an acquire of that attempt that arrives late a no-op:
// a Semaphore's undone marks (each lives one lease) and the undo marks of
// the other locks' fresh owners (<lock>:x:<owner>, a minute; a mark
// without that expiry is reported).
func (r *rolling) leftBy(cl *rollClient) []string {
	ctx := context.Background()
	keys, err := r.rc.Do(ctx, r.rc.B().Keys().Pattern(r.prefix+":*").Build()).AsStrSlice()
	require.NoError(r.t, err)
	var left []string
	mark := func(k, s string) {
		if strings.Contains(s, cl.name+"/") || strings.Contains(s, cl.id) {
			left = append(left, fmt.Sprintf("%q: %q", k, s))
		}
	}
	for _, k := range keys {
		if strings.HasSuffix(k, "}:election") || strings.HasSuffix(k, "}:sem:undone") {
			continue
		}
		if strings.Contains(k, ":x:") {
			ttl, err := r.rc.Do(ctx, r.rc.B().Pttl().Key(k).Build()).AsInt64()
			if err == nil && ttl > 0 && ttl <= time.Minute.Milliseconds() {
				continue
			}
		}
		mark(k, k)
		typ, _ := r.rc.Do(ctx, r.rc.B().Type().Key(k).Build()).ToString()
		var vals []string
		switch typ {
		case "string":
			v, _ := r.rc.Do(ctx, r.rc.B().Get().Key(k).Build()).ToString()
			vals = []string{v}
		case "hash":
			m, _ := r.rc.Do(ctx, r.rc.B().Hgetall().Key(k).Build()).AsStrMap()
			for f, v := range m {
				vals = append(vals, f+"="+v)
			}
		case "list":
			vals, _ = r.rc.Do(ctx, r.rc.B().Lrange().Key(k).Start(0).Stop(-1).Build()).AsStrSlice()
		case "zset":
			vals, _ = r.rc.Do(ctx, r.rc.B().Zrange().Key(k).Min("0").Max("-1").Build()).AsStrSlice()
		case "set":
			vals, _ = r.rc.Do(ctx, r.rc.B().Smembers().Key(k).Build()).AsStrSlice()
		}
		for _, v := range vals {
			mark(k, v)
		}
	}
	return left
}

// acquired records a hold that its holder has just been given.
func (r *rolling) acquired(what string, excl bool, lctx context.Context) *rollHold {
	h := &rollHold{what: what, excl: excl, lctx: lctx, start: r.now()}
	h.tok, _ = dsync.FencingToken(lctx)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.live == nil {
		r.live, r.lastTok = map[string][]*rollHold{}, map[string]uint64{}
	}
	r.holds = append(r.holds, h)
	if lctx.Err() != nil {
		// Ended (by a Close) before it was recorded: not a holder now.
		h.lockCancel = true
		return h
	}
	live := r.live[what][:0]
	for _, o := range r.live[what] {
		if o.lctx.Err() != nil || o.unlocking.Load() {
			continue
		}
		live = append(live, o)
		if o.excl || excl {
			r.fails = append(r.fails, fmt.Sprintf("two holders of %s: token %d (since %v) and token %d", what, o.tok, o.start, h.tok))
		}
	}
	r.live[what] = append(live, h)
	if excl {
		if h.tok <= r.lastTok[what] {
			r.fails = append(r.fails, fmt.Sprintf("%s: token %d after token %d", what, h.tok, r.lastTok[what]))
		}
		r.lastTok[what] = h.tok
	}
	return h
}

// released records the end of h: err is its release's (ErrClosed: the
// Client's Close released it).
func (r *rolling) released(h *rollHold, cl *rollClient, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	h.end = r.now()
	if errors.Is(err, dsync.ErrClosed) || errors.Is(context.Cause(h.lctx), dsync.ErrClosed) {
		h.closedBy = cl
	}
}

// work holds for 1-3 ms, less if the lock context ends.
func work(lctx context.Context) {
	t := time.NewTimer(time.Duration(1000+rand.IntN(2000)) * time.Microsecond)
	defer t.Stop()
	select {
	case <-t.C:
	case <-lctx.Done():
	}
}

// loop runs body on rep's current Client until the run ends; a call that
// ErrClosed ended goes on with the replica's next Client.
func (r *rolling) loop(wg *sync.WaitGroup, rep *rollReplica, body func(cl *rollClient) error) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		for r.ctx.Err() == nil {
			cl := rep.cur.Load()
			err := body(cl)
			switch {
			case r.ctx.Err() != nil:
				return
			case errors.Is(err, dsync.ErrClosed):
				select {
				case <-cl.next:
				case <-r.ctx.Done():
					return
				}
			case err != nil:
				r.fail("%s: %v", cl.name, err)
				return
			}
		}
	}()
}

// runRolling runs the workers start starts on the 4 replicas while they
// restart in turn every rollingEvery, for rollingDur; then it ends them
// and closes every Client.
func runRolling(t *testing.T, start func(r *rolling, wg *sync.WaitGroup), setup ...func(r *rolling)) *rolling {
	r := &rolling{t: t, prefix: testPrefix(t), rc: newRueidis(t)}
	r.opts = []dsync.Option{dsync.WithKeyPrefix(r.prefix), dsync.WithLease(rollLease)}
	r.t0 = time.Now()
	for _, f := range setup {
		f(r)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.ctx = ctx
	for i := range r.reps {
		rep := &rollReplica{i: i}
		rep.cur.Store(r.open(rep))
		r.reps[i] = rep
	}
	var wg sync.WaitGroup
	start(r, &wg)
	tick := time.NewTicker(*rollingEvery)
	end := time.After(*rollingDur)
	for k := 0; ; k++ {
		select {
		case <-tick.C:
			r.restart(r.reps[k%rollReplicas])
			continue
		case <-end:
		}
		break
	}
	tick.Stop()
	r.stopAt = r.now()
	cancel()
	wg.Wait()
	for _, rep := range r.reps {
		cl := rep.cur.Load()
		cl.c.Close()
		cl.rc.Close()
	}
	return r
}

// check fails t with what the run found.
func (r *rolling) check() {
	r.t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.t.Logf("%d restarts, %d holds", len(r.closed), len(r.holds))
	require.Empty(r.t, r.fails)
}

// maxFree is the longest time a lock sat free between two holds while the
// run went on: from the end of a hold (its release, or its Client's Close
// returning, which released it) to the next hold's start, or to the end of
// the run. Every replica waits for the lock all the time, so a free lock is
// a waiter that has not been given it. With runs (a Once's or Group's
// runs of f for one name), only a run that a Close cut leaves the name
// for another to run.
func (r *rolling) maxFree(what string, runs bool) (time.Duration, *rollHold) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var hs []*rollHold
	for _, h := range r.holds {
		if h.what != what || h.end == 0 {
			continue
		}
		if h.closedBy != nil && h.closedBy.closeEnd > h.end {
			h.end = h.closedBy.closeEnd
		}
		hs = append(hs, h)
	}
	slices.SortFunc(hs, func(a, b *rollHold) int { return int(a.start - b.start) })
	var worst time.Duration
	var after *rollHold
	var lastEnd time.Duration
	var last *rollHold
	for i, h := range hs {
		if i > 0 && h.start-lastEnd > worst && (!runs || last.closedBy != nil) {
			worst, after = h.start-lastEnd, last
		}
		if h.end > lastEnd {
			lastEnd, last = h.end, h
		}
	}
	if last != nil && r.stopAt-lastEnd > worst && (!runs || last.closedBy != nil) {
		worst, after = r.stopAt-lastEnd, last
	}
	return worst, after
}

// rollLock is a lock kind of the rolling restart.
type rollLock struct {
	name    string
	workers int // goroutines per replica
	lock    func(c *dsync.Client, ctx context.Context, k int) (context.Context, error)
	unlock  func(c *dsync.Client, lctx context.Context, k int) error
	excl    func(k int) bool
}

func rollLocks() []rollLock {
	always := func(int) bool { return true }
	return []rollLock{
		{"Mutex", 3,
			func(c *dsync.Client, ctx context.Context, _ int) (context.Context, error) {
				return c.NewMutex("m").LockContext(ctx)
			},
			func(c *dsync.Client, l context.Context, _ int) error { return c.NewMutex("m").UnlockContext(l) }, always},
		{"FairMutex", 2,
			func(c *dsync.Client, ctx context.Context, _ int) (context.Context, error) {
				return c.NewFairMutex("m").LockContext(ctx)
			},
			func(c *dsync.Client, l context.Context, _ int) error { return c.NewFairMutex("m").UnlockContext(l) }, always},
		{"RWMutex", 2, // a writer and a reader per replica
			func(c *dsync.Client, ctx context.Context, k int) (context.Context, error) {
				if k == 0 {
					return c.NewRWMutex("m").LockContext(ctx)
				}
				return c.NewRWMutex("m").RLockContext(ctx)
			},
			func(c *dsync.Client, l context.Context, k int) error {
				if k == 0 {
					return c.NewRWMutex("m").UnlockContext(l)
				}
				return c.NewRWMutex("m").RUnlockContext(l)
			}, func(k int) bool { return k == 0 }},
		{"Semaphore", 2,
			func(c *dsync.Client, ctx context.Context, _ int) (context.Context, error) {
				return c.NewSemaphore("m", 1).Acquire(ctx, 1)
			},
			func(c *dsync.Client, l context.Context, _ int) error { return c.NewSemaphore("m", 1).Release(l, 1) }, always},
	}
}

func (r *rolling) lockWorkers(wg *sync.WaitGroup, l rollLock) {
	for _, rep := range r.reps {
		for k := range l.workers {
			r.loop(wg, rep, func(cl *rollClient) error {
				lctx, err := l.lock(cl.c, r.ctx, k)
				if err != nil {
					return err
				}
				h := r.acquired(l.name, l.excl(k), lctx)
				work(lctx)
				h.unlocking.Store(true)
				err = l.unlock(cl.c, lctx, k)
				r.released(h, cl, err)
				if errors.Is(err, dsync.ErrClosed) {
					return err
				}
				if err != nil && !errors.Is(err, dsync.ErrNotHeld) {
					return err
				}
				if errors.Is(err, dsync.ErrNotHeld) && !h.lockCancel {
					r.fail("%s: a hold recorded live was not held at its release: %v (cause %v)", cl.name, err, context.Cause(lctx))
				}
				return nil
			})
		}
	}
}

func TestRollingRestart(t *testing.T) {
	for _, l := range rollLocks() {
		t.Run(l.name, func(t *testing.T) {
			r := runRolling(t, func(r *rolling, wg *sync.WaitGroup) { r.lockWorkers(wg, l) })
			worst, after := r.maxFree(l.name, false)
			if after != nil {
				t.Logf("longest free: %v after the hold with token %d (ended by Close: %v)", worst, after.tok, after.closedBy != nil)
			}
			r.check()
			require.Less(t, worst, rollBound, "the %s sat free while other replicas waited", l.name)
		})
	}
	t.Run("Once", func(t *testing.T) { rollRuns(t, "Once") })
	t.Run("Group", func(t *testing.T) { rollRuns(t, "Group") })
	t.Run("Election", rollElection)
	t.Run("Cond", rollCond)
	t.Run("WaitGroup", rollWaitGroup)
}

// rollRuns: every replica calls Do for the names "0", "1", ... in order,
// f taking 1-3 ms (less if its lock context ends). A run that a Close cut
// is taken over by a caller of another replica within rollBound; runs of
// one name never overlap and their tokens grow.
func rollRuns(t *testing.T, kind string) {
	var next [rollReplicas]atomic.Int64
	r := runRolling(t, func(r *rolling, wg *sync.WaitGroup) {
		for _, rep := range r.reps {
			r.loop(wg, rep, func(cl *rollClient) error {
				n := strconvI(next[rep.i].Load())
				var h *rollHold
				f := func(lctx context.Context) error {
					h = r.acquired(n, true, lctx)
					work(lctx)
					h.unlocking.Store(true)
					r.released(h, cl, nil)
					return context.Cause(lctx)
				}
				var err error
				if kind == "Once" {
					err = cl.c.NewOnce("o"+n).Do(r.ctx, f)
				} else {
					g := dsync.NewGroup[int](cl.c, "g", dsync.WithResultTTL(time.Minute))
					_, _, err = g.Do(r.ctx, n, func(ctx context.Context) (int, error) { return 0, f(ctx) })
				}
				if h != nil && errors.Is(err, dsync.ErrClosed) {
					r.mu.Lock()
					h.closedBy = cl
					r.mu.Unlock()
				}
				if err == nil {
					next[rep.i].Add(1)
				}
				if errors.Is(err, dsync.ErrLockLost) {
					return nil // the run ended by a Close elsewhere: call again
				}
				return err
			})
		}
	})
	r.check()
	names := map[string]bool{}
	for _, h := range r.holds {
		names[h.what] = true
	}
	var worst time.Duration
	for n := range names {
		if d, _ := r.maxFree(n, true); d > worst {
			worst = d
		}
	}
	t.Logf("%d names run; longest a cut run's name sat free while others waited: %v", len(names), worst)
	require.Less(t, worst, rollBound, "a %s run cut by Close was taken over late", kind)
}

func strconvI(n int64) string { return fmt.Sprint(n) }

// A seen is a state an observer delivered, and when.
type seen struct {
	at time.Duration
	l  dsync.Leader
}

// rollElection: a candidate per replica campaigns, leads 20-60 ms and
// resigns, or is closed while leading; two observers on Clients that are
// not restarted see every term a Close ended end within rollBound of that
// Close's start.
func rollElection(t *testing.T) {
	var obsMu sync.Mutex
	var views [2][]seen
	var obsWG sync.WaitGroup
	var stop context.CancelFunc
	r := runRolling(t, func(r *rolling, wg *sync.WaitGroup) {
		for _, rep := range r.reps {
			r.loop(wg, rep, func(cl *rollClient) error {
				e := cl.c.NewElection("e")
				lctx, err := e.Campaign(r.ctx, cl.name)
				if err != nil {
					return err
				}
				h := r.acquired("election", true, lctx)
				tm := time.NewTimer(time.Duration(20+rand.IntN(40)) * time.Millisecond)
				select {
				case <-tm.C:
				case <-lctx.Done():
				}
				tm.Stop()
				h.unlocking.Store(true)
				err = e.Resign(lctx)
				r.released(h, cl, err)
				if errors.Is(err, dsync.ErrNotHeld) && h.lockCancel {
					return nil
				}
				return err
			})
		}
	}, func(r *rolling) {
		var ctx context.Context
		ctx, stop = context.WithCancel(context.Background())
		for i := range views {
			c := newClientOn(t, newRueidis(t), r.opts...)
			ch := c.NewElection("e").Observe(ctx)
			obsWG.Add(1)
			go func() {
				defer obsWG.Done()
				for l := range ch {
					at := time.Since(r.t0) // r.t0 is set before any term
					obsMu.Lock()
					views[i] = append(views[i], seen{at, l})
					obsMu.Unlock()
				}
			}()
		}
	})
	stop()
	obsWG.Wait()
	r.check()
	ended := 0
	var worst time.Duration
	runEnd := r.now()
	for _, h := range r.holds {
		cl := h.closedBy
		if cl == nil || h.lockCancel {
			continue
		}
		ended++
		for i, v := range views {
			from := slices.IndexFunc(v, func(s seen) bool { return s.l.Term == h.tok })
			if from < 0 || v[from].at > cl.closeStart {
				continue // this observer never saw the term before its Close
			}
			k := slices.IndexFunc(v[from:], func(s seen) bool { return s.l.Term != h.tok })
			if k < 0 {
				require.Less(t, runEnd, cl.closeStart+rollBound, "observer %d never saw term %d end (closed at %v)", i, h.tok, cl.closeStart)
				continue
			}
			d := v[from+k].at - cl.closeStart
			worst = max(worst, d)
			require.LessOrEqual(t, d, rollBound, "observer %d saw term %d end %v after its leader's Close began", i, h.tok, d)
		}
	}
	t.Logf("%d terms ended by Close; the latest an observer saw one end: %v after the Close began", ended, worst)
}

// rollCond: a waiter per replica waits on a Cond of a Mutex; a Client that
// is not restarted signals, 5 ms after the last signal's wake. Waits that
// a Close ended return ErrClosed, the waiters' places go with their Client
// (leftBy), and a Signal given while at least two waiters were registered
// (so that one Close cannot leave none) wakes a waiter within rollBound,
// even when it was given to the waiter of a Client that was closing: the
// signal passes on.
func rollCond(t *testing.T) {
	var wakes atomic.Int64
	var sig *dsync.Client
	var worst time.Duration
	var counted int
	r := runRolling(t, func(r *rolling, wg *sync.WaitGroup) {
		for _, rep := range r.reps {
			r.loop(wg, rep, func(cl *rollClient) error {
				m := cl.c.NewMutex("cm")
				lctx, err := m.LockContext(r.ctx)
				if err != nil {
					return err
				}
				nctx, err := cl.c.NewCond(m).Wait(lctx)
				if err != nil {
					if !errors.Is(err, dsync.ErrClosed) {
						_ = m.UnlockContext(lctx)
					}
					return err
				}
				wakes.Add(1)
				return m.UnlockContext(nctx)
			})
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			cd := sig.NewCond(sig.NewMutex("cm"))
			waiters := r.prefix + ":{cm}:cond" // the waiters in arrival order (cond_wait.lua)
			for r.ctx.Err() == nil {
				n, err := r.rc.Do(r.ctx, r.rc.B().Zcard().Key(waiters).Build()).AsInt64()
				if err != nil {
					if r.ctx.Err() == nil {
						r.fail("ZCARD: %v", err)
					}
					return
				}
				before := wakes.Load()
				at := time.Now()
				if err := cd.Signal(r.ctx); err != nil {
					if r.ctx.Err() == nil {
						r.fail("Signal: %v", err)
					}
					return
				}
				if n >= 2 {
					// Every Wait that returns nil was woken by a signal
					// (none of the waiters is frozen): the wake of this one,
					// or of the one it passed on to.
					woke := pollUntil(r.ctx, time.Second, func() bool { return wakes.Load() > before })
					if r.ctx.Err() != nil {
						return
					}
					d := time.Since(at)
					counted++
					worst = max(worst, d)
					if !woke || d >= rollBound {
						r.fail("a Signal given with %d waiters registered woke none within %v (%v)", n, rollBound, d.Round(time.Millisecond))
					}
				}
				select {
				case <-time.After(5 * time.Millisecond):
				case <-r.ctx.Done():
				}
			}
		}()
	}, func(r *rolling) { sig = newClientOn(t, newRueidis(t), r.opts...) })
	r.check()
	t.Logf("%d wakes; %d signals given with >= 2 waiters registered, the longest to its wake %v", wakes.Load(), counted, worst)
	require.Greater(t, wakes.Load(), int64(len(r.closed)), "the waiters were not woken")
	require.Greater(t, counted, len(r.closed), "too few signals given with waiters registered to show anything")
}

// pollUntil polls cond every 100 µs until it holds (true), d passes or ctx
// ends (false).
func pollUntil(ctx context.Context, d time.Duration, cond func() bool) bool {
	end := time.Now().Add(d)
	for !cond() {
		if time.Now().After(end) || ctx.Err() != nil {
			return false
		}
		time.Sleep(100 * time.Microsecond)
	}
	return true
}

// rollWaitGroup: a Client that is not restarted adds 1 and, 10-30 ms
// later, Done, round after round; a waiter per replica waits for each
// round. Every Wait on a Client that was not closed meanwhile returns
// within rollBound of the Done.
func rollWaitGroup(t *testing.T) {
	var ctl *dsync.Client
	type round struct {
		started chan struct{}
		doneAt  atomic.Int64 // ns since t0, 0 until Done returned
	}
	var mu sync.Mutex
	cur := &round{started: make(chan struct{})}
	var worst atomic.Int64
	r := runRolling(t, func(r *rolling, wg *sync.WaitGroup) {
		for _, rep := range r.reps {
			seen := (*round)(nil)
			r.loop(wg, rep, func(cl *rollClient) error {
				mu.Lock()
				rd := cur
				mu.Unlock()
				if rd == seen {
					select {
					case <-rd.started: // wait for the next round
					case <-r.ctx.Done():
						return nil
					}
					mu.Lock()
					rd = cur
					mu.Unlock()
				}
				seen = rd
				err := cl.c.NewWaitGroup("w").Wait(r.ctx)
				if err != nil {
					return err
				}
				if d := rd.doneAt.Load(); d != 0 {
					late := int64(r.now()) - d
					for {
						w := worst.Load()
						if late <= w || worst.CompareAndSwap(w, late) {
							break
						}
					}
				}
				return nil
			})
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			wgp := ctl.NewWaitGroup("w")
			for r.ctx.Err() == nil {
				if err := wgp.Add(r.ctx, 1); err != nil {
					if r.ctx.Err() == nil {
						r.fail("Add: %v", err)
					}
					return
				}
				mu.Lock()
				rd := cur
				cur = &round{started: make(chan struct{})}
				close(rd.started)
				mu.Unlock()
				time.Sleep(time.Duration(10+rand.IntN(20)) * time.Millisecond) // the work the group waits for
				if err := wgp.Done(context.Background()); err != nil {
					r.fail("Done: %v", err)
					return
				}
				rd.doneAt.Store(int64(r.now()))
			}
		}()
	}, func(r *rolling) { ctl = newClientOn(t, newRueidis(t), r.opts...) })
	r.check()
	t.Logf("longest a Wait returned after Done: %v", time.Duration(worst.Load()))
	require.Less(t, time.Duration(worst.Load()), rollBound, "a Wait returned late after the counter reached zero")
}
