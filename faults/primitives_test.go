package faults

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/dsync/dsync/dsync"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// childRoles are the child roles defined outside main_test.go, by name.
var childRoles = map[string]func(c *dsync.Client, res remote) int{}

func init() {
	childRoles["pworker"] = childPWorker
}

// A pevent is one operation on an RWMutex, a Semaphore or a FairMutex:
// an acquisition (call to return of the acquire) or the end of a hold, as
// event is for a Mutex, with the mode, the permits and the owner.
type pevent struct {
	Rel   bool   `json:"rel"`
	Read  bool   `json:"read,omitempty"`
	N     int64  `json:"n,omitempty"`
	Who   int    `json:"who"`
	Owner string `json:"owner,omitempty"`
	Call  int64  `json:"call"`
	Ret   int64  `json:"ret"`
	Tok   uint64 `json:"tok"`
	Lost  bool   `json:"lost,omitempty"`
}

type phistory struct {
	mu sync.Mutex
	ev []pevent
}

func (h *phistory) add(e pevent) {
	h.mu.Lock()
	h.ev = append(h.ev, e)
	h.mu.Unlock()
}

func (h *phistory) events() []pevent {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]pevent(nil), h.ev...)
}

// maxWho bounds the worker ids of one scenario, so that model states are
// small comparable values.
const maxWho = 48

type rwIn struct {
	rel, read bool
	who       int
}

type rwState struct {
	w int // writer, -1 if none
	r int // readers
}

// rwModel is a reader/writer lock: a write acquire is legal only when
// nobody holds it, a read acquire only when no writer holds it, a write
// release only by the writer, a read release only while readers hold it.
// Readers are counted, not named: a worker's read release follows its own
// read acquire in real time, so the count is enough to check exclusion,
// and it keeps the search small when many readers overlap.
var rwModel = porcupine.Model{
	Init: func() interface{} { return rwState{w: -1} },
	Step: func(state, input, _ interface{}) (bool, interface{}) {
		s, in := state.(rwState), input.(rwIn)
		switch {
		case !in.rel && !in.read:
			return s.w == -1 && s.r == 0, rwState{w: in.who, r: s.r}
		case !in.rel && in.read:
			return s.w == -1, rwState{w: s.w, r: s.r + 1}
		case in.rel && !in.read:
			return s.w == in.who, rwState{w: -1, r: s.r}
		default:
			return s.r > 0, rwState{w: s.w, r: s.r - 1}
		}
	},
	Hash: func(state interface{}) uint64 {
		s := state.(rwState)
		return uint64(s.w+1)<<32 | uint64(s.r)
	},
	DescribeOperation: func(input, _ interface{}) string {
		in := input.(rwIn)
		m := "W"
		if in.read {
			m = "R"
		}
		if in.rel {
			return fmt.Sprintf("unlock%s(%d)", m, in.who)
		}
		return fmt.Sprintf("lock%s(%d)", m, in.who)
	},
}

type semIn struct {
	rel bool
	who int
	n   int64
}

type semState struct {
	held [maxWho]int8 // permits held by each worker
	size int64
}

func (s semState) total() (t int64) {
	for _, n := range s.held {
		t += int64(n)
	}
	return t
}

// semModel is a semaphore of size permits: an acquire of n is legal only
// when at most size-n permits are held, a release of n only by a worker
// holding at least n.
func semModel(size int64) porcupine.Model {
	return porcupine.Model{
		Init: func() interface{} { return semState{size: size} },
		Step: func(state, input, _ interface{}) (bool, interface{}) {
			s, in := state.(semState), input.(semIn)
			if !in.rel {
				if s.total()+in.n > s.size {
					return false, s
				}
				s.held[in.who] += int8(in.n)
				return true, s
			}
			if int64(s.held[in.who]) < in.n {
				return false, s
			}
			s.held[in.who] -= int8(in.n)
			return true, s
		},
		DescribeOperation: func(input, _ interface{}) string {
			in := input.(semIn)
			if in.rel {
				return fmt.Sprintf("release(%d, %d)", in.who, in.n)
			}
			return fmt.Sprintf("acquire(%d, %d)", in.who, in.n)
		},
	}
}

// checkLinear runs porcupine on ops against model.
func checkLinear(t testing.TB, model porcupine.Model, ops []porcupine.Operation, what string) {
	t.Helper()
	switch res := porcupine.CheckOperationsTimeout(model, ops, 60*time.Second); res {
	case porcupine.Ok:
	case porcupine.Unknown:
		t.Errorf("porcupine: check of %d %s operations timed out", len(ops), what)
	default:
		t.Errorf("porcupine: history of %d %s operations is not linearizable", len(ops), what)
	}
}

// checkTokens verifies that tokens follow real time: an acquisition that
// returned before another was called has the smaller token. It returns the
// number of acquisitions.
func checkTokens(t testing.TB, ev []pevent) int {
	t.Helper()
	var acq []pevent
	for _, e := range ev {
		if !e.Rel {
			acq = append(acq, e)
		}
	}
	sortBy(acq, func(a, b pevent) bool { return a.Call < b.Call })
	bad := 0
	// For each b, every a that returned before b's call: scan a prefix.
	for j, b := range acq {
		for _, a := range acq[:j] {
			if a.Ret < b.Call && a.Tok >= b.Tok {
				if bad < 5 {
					t.Errorf("token %d of an acquisition that returned before one with token %d was called", a.Tok, b.Tok)
				}
				bad++
			}
		}
	}
	assert.LessOrEqual(t, bad, 0, "token pairs out of real-time order")
	return len(acq)
}

// gauge is the shared state critical sections touch: how many writers,
// readers and permits are inside, the most seen, the violations, and an
// unguarded register that writers increment and readers read twice.
type gauge struct {
	mu                  sync.Mutex
	size                int64 // semaphore size, 0 for locks
	w, r, s             int64
	maxR, maxS          int64
	violations          int
	reg, puts, tornRead int64
}

// enter reports a worker entering its critical section in mode k ("w"
// exclusive, "r" shared with readers, "s" n permits).
func (g *gauge) enter(k string, n int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch k {
	case "w":
		if g.w > 0 || g.r > 0 {
			g.violations++
		}
		g.w++
	case "r":
		if g.w > 0 {
			g.violations++
		}
		g.r++
		g.maxR = max(g.maxR, g.r)
	case "s":
		g.s += n
		if g.s > g.size {
			g.violations++
		}
		g.maxS = max(g.maxS, g.s)
	}
}

func (g *gauge) leave(k string, n int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch k {
	case "w":
		g.w--
	case "r":
		g.r--
	case "s":
		g.s -= n
	}
}

func (g *gauge) get() int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.reg
}

func (g *gauge) put(v int64) {
	g.mu.Lock()
	g.reg = v
	g.puts++
	g.mu.Unlock()
}

func (g *gauge) torn() {
	g.mu.Lock()
	g.tornRead++
	g.mu.Unlock()
}

func (g *gauge) serve(t testing.TB) string {
	mux := http.NewServeMux()
	mux.HandleFunc("/g", func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.ParseInt(r.FormValue("n"), 10, 64)
		switch r.FormValue("op") {
		case "enter":
			g.enter(r.FormValue("k"), n)
		case "leave":
			g.leave(r.FormValue("k"), n)
		case "put":
			g.put(n)
		case "torn":
			g.torn()
		}
		fmt.Fprint(w, g.get())
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

// gaugeAPI is a gauge, in the test process or reached over HTTP.
type gaugeAPI interface {
	enter(k string, n int64)
	leave(k string, n int64)
	get() int64
	put(v int64)
	torn()
}

type remoteGauge struct{ r remote }

func (g remoteGauge) q(op, k string, n int64) string {
	return g.r.call("/g?op=" + op + "&k=" + k + "&n=" + strconv.FormatInt(n, 10))
}
func (g remoteGauge) enter(k string, n int64) { g.q("enter", k, n) }
func (g remoteGauge) leave(k string, n int64) { g.q("leave", k, n) }
func (g remoteGauge) put(v int64)             { g.q("put", "", v) }
func (g remoteGauge) torn()                   { g.q("torn", "", 0) }
func (g remoteGauge) get() int64 {
	n, _ := strconv.ParseInt(g.q("get", "", 0), 10, 64)
	return n
}

// prim is the primitive a worker contends on: kind "rw", "sem" or "fair".
type prim struct {
	kind string
	rw   *dsync.RWMutex
	sem  *dsync.Semaphore
	fair *dsync.FairMutex
	size int64
}

func newPrim(c *dsync.Client, kind, name string, size int64) prim {
	p := prim{kind: kind, size: size}
	switch kind {
	case "rw":
		p.rw = c.NewRWMutex(name)
	case "sem":
		p.sem = c.NewSemaphore(name, size)
	case "fair":
		p.fair = c.NewFairMutex(name)
	}
	return p
}

// pick chooses the next operation: readers three times in four on an
// RWMutex, 1 to size-1 permits (sometimes all) on a Semaphore.
func (p prim) pick() (read bool, n int64) {
	switch p.kind {
	case "rw":
		return rand.IntN(4) != 0, 1
	case "sem":
		if rand.IntN(8) == 0 {
			return false, p.size
		}
		return false, 1 + rand.Int64N(max(p.size-1, 1))
	}
	return false, 1
}

func (p prim) acquire(ctx context.Context, read bool, n int64) (context.Context, error) {
	switch p.kind {
	case "rw":
		if read {
			return p.rw.RLockContext(ctx)
		}
		return p.rw.LockContext(ctx)
	case "sem":
		return p.sem.Acquire(ctx, n)
	}
	return p.fair.LockContext(ctx)
}

func (p prim) release(lctx context.Context, read bool, n int64) error {
	switch p.kind {
	case "rw":
		if read {
			return p.rw.RUnlockContext(lctx)
		}
		return p.rw.UnlockContext(lctx)
	case "sem":
		return p.sem.Release(lctx, n)
	}
	return p.fair.UnlockContext(lctx)
}

// pwork is work for prim p: acquire (bounded by acquireWait), enter the
// gauge, writers increment the register with a 0-5 ms pause between read
// and write, readers read it twice 0-3 ms apart (a change is a writer
// inside), semaphore holders pause 0-3 ms; leave the gauge and release.
func pwork(ctx context.Context, p prim, who int, g gaugeAPI, rec func(pevent), until time.Time, acquireWait time.Duration, tl *tally) {
	for time.Now().Before(until) && ctx.Err() == nil {
		read, n := p.pick()
		actx, cancel := context.WithTimeout(dsync.WithOwner(ctx), acquireWait)
		owner, _ := dsync.OwnerOf(actx)
		call := now()
		lctx, err := p.acquire(actx, read, n)
		ret := now()
		if err != nil {
			cancel()
			if errors.Is(err, context.DeadlineExceeded) {
				tl.timeouts.Add(1)
			} else {
				tl.errs.Add(1)
				fmt.Fprintln(os.Stderr, "pwork:", err)
				time.Sleep(10 * time.Millisecond) // back off a Redis error
			}
			continue
		}
		tl.holds.Add(1)
		tok, _ := dsync.FencingToken(lctx)
		var cancelledAt atomic.Int64
		stop := context.AfterFunc(lctx, func() { cancelledAt.Store(now()) })
		rec(pevent{Read: read, N: n, Who: who, Owner: owner, Call: call, Ret: ret, Tok: tok})
		k := "w"
		switch {
		case p.kind == "sem":
			k = "s"
		case read:
			k = "r"
		}
		if lctx.Err() == nil {
			g.enter(k, n)
			switch k {
			case "w":
				v := g.get()
				time.Sleep(time.Duration(rand.IntN(5001)) * time.Microsecond)
				g.put(v + 1)
			case "r":
				v := g.get()
				time.Sleep(time.Duration(rand.IntN(3001)) * time.Microsecond)
				if g.get() != v {
					g.torn()
				}
			default:
				time.Sleep(time.Duration(rand.IntN(3001)) * time.Microsecond)
			}
			g.leave(k, n)
		}
		rcall := now()
		_ = p.release(lctx, read, n)
		rret := now()
		stop()
		lost := errors.Is(context.Cause(lctx), dsync.ErrLockLost)
		if at := cancelledAt.Load(); lost && at != 0 && at < rcall {
			rcall, rret = at, at
			tl.lost.Add(1)
		}
		rec(pevent{Rel: true, Read: read, N: n, Who: who, Owner: owner, Call: rcall, Ret: rret, Tok: tok, Lost: lost})
		cancel()
	}
}

// childPWorker runs FAULTS_G goroutines of pwork on the FAULTS_KIND
// primitive FAULTS_NAME (size FAULTS_SIZE) for FAULTS_DUR, printing every
// event, then "done". Worker ids are FAULTS_ID*FAULTS_G + i.
func childPWorker(c *dsync.Client, res remote) int {
	g, _ := strconv.Atoi(os.Getenv("FAULTS_G"))
	id, _ := strconv.Atoi(os.Getenv("FAULTS_ID"))
	size, _ := strconv.ParseInt(os.Getenv("FAULTS_SIZE"), 10, 64)
	dur, _ := time.ParseDuration(os.Getenv("FAULTS_DUR"))
	p := newPrim(c, os.Getenv("FAULTS_KIND"), os.Getenv("FAULTS_NAME"), size)
	until := time.Now().Add(dur)
	var wg sync.WaitGroup
	var tl tally
	for i := range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pwork(context.Background(), p, id*g+i, remoteGauge{res}, func(e pevent) { say("ev", e) }, until, 5*time.Second, &tl)
		}()
	}
	wg.Wait()
	say("done", fmt.Sprintf("%d %d %d %d", tl.holds.Load(), tl.timeouts.Load(), tl.errs.Load(), tl.lost.Load()))
	return 0
}

// pcollect feeds a pworker child's events into h until it says done.
func pcollect(t testing.TB, c *child, h *phistory, tl *tally) {
	for l := range c.lines {
		w, rest, _ := strings.Cut(l, " ")
		switch w {
		case "ev":
			var e pevent
			if err := json.Unmarshal([]byte(rest), &e); !assert.NoError(t, err, "bad event %q", rest) {
				continue
			}
			h.add(e)
		case "done":
			var a, b, e, l int64
			fmt.Sscan(rest, &a, &b, &e, &l)
			tl.holds.Add(a)
			tl.timeouts.Add(b)
			tl.errs.Add(e)
			tl.lost.Add(l)
			return
		}
	}
	t.Errorf("worker child exited without done")
}

// contention runs procs child processes of perProc goroutines and local
// goroutines (each with its own Client) of pwork on one primitive for dur,
// while sample (if not nil) runs in the test process; it returns the
// history and the tally.
func contention(t *testing.T, kind string, size int64, procs, perProc, local int, dur time.Duration, g *gauge,
	sample func(c *dsync.Client, until time.Time)) (*phistory, *tally) {
	srv := startRedis(t)
	prefix := testPrefix()
	const lease = 2 * time.Second
	url := g.serve(t)
	h := &phistory{}
	tl := &tally{}
	var wg sync.WaitGroup
	for p := range procs {
		c := startChild(t, "pworker", srv.Addr, prefix, lease, "FAULTS_STORE="+url, "FAULTS_NAME=contended",
			"FAULTS_KIND="+kind, "FAULTS_SIZE="+strconv.FormatInt(size, 10),
			"FAULTS_G="+strconv.Itoa(perProc), "FAULTS_ID="+strconv.Itoa(p+1), "FAULTS_DUR="+dur.String())
		wg.Add(1)
		go func() {
			defer wg.Done()
			pcollect(t, c, h, tl)
		}()
	}
	until := time.Now().Add(dur)
	for i := range local {
		dc := newDsync(t, srv.Addr, prefix, lease)
		wg.Add(1)
		go func() {
			defer wg.Done()
			pwork(context.Background(), newPrim(dc, kind, "contended", size), i, g, h.add, until, 5*time.Second, tl)
		}()
	}
	if sample != nil {
		dc := newDsync(t, srv.Addr, prefix, lease)
		wg.Add(1)
		go func() {
			defer wg.Done()
			sample(dc, until)
		}()
	}
	wg.Wait()
	require.LessOrEqual(t, (procs+1)*perProc, maxWho, "worker ids exceed")
	require.LessOrEqual(t, local, perProc, "worker ids exceed")
	return h, tl
}

// commonChecks asserts what every contention scenario must show.
func commonChecks(t *testing.T, tl *tally, g *gauge, acquisitions int, dur time.Duration) {
	t.Helper()
	assert.GreaterOrEqual(t, acquisitions, 50, "only %d acquisitions in %v: the contention did not happen", acquisitions, dur)
	assert.Equal(t, 0, g.violations, "critical-section entries overlapped a holder they exclude")
	assert.Equal(t, int64(0), g.puts-g.reg, "register updates lost: two writers overlapped")
	assert.Equal(t, int64(0), g.tornRead, "reads saw the register change under them: a writer overlapped a reader")
	assert.Equal(t, int64(0), tl.lost.Load(), "without faults: holds lost")
	assert.Equal(t, int64(0), tl.errs.Load(), "without faults: errors")
}

// TestFaultRWMutexContention: processes and goroutines contend on one
// RWMutex, three in four acquisitions reads. The history is linearizable
// against the read-write model (writers exclusive, readers shared), tokens
// follow real time, no writer update is lost, no reader sees a write, and
// readers did share the lock.
func TestFaultRWMutexContention(t *testing.T) {
	const procs, perProc, local = 2, 3, 3
	dur := 6 * time.Second
	g := &gauge{}
	h, tl := contention(t, "rw", 0, procs, perProc, local, dur, g, nil)
	ev := h.events()
	ops := make([]porcupine.Operation, 0, len(ev))
	writes := 0
	for _, e := range ev {
		ops = append(ops, porcupine.Operation{ClientId: e.Who, Input: rwIn{rel: e.Rel, read: e.Read, who: e.Who}, Call: e.Call, Return: e.Ret})
		if !e.Rel && !e.Read {
			writes++
		}
	}
	t0 := time.Now()
	checkLinear(t, rwModel, ops, "rw")
	t.Logf("rw: porcupine took %v", time.Since(t0).Round(time.Millisecond))
	acq := checkTokens(t, ev)
	t.Logf("rw: %d procs x %d + %d goroutines, %v: %d acquisitions (%d writes, %d reads), %d acquire timeouts, %d errors, %d lost; at most %d readers at once; lost updates %d, torn reads %d, overlaps %d",
		procs, perProc, local, dur, acq, writes, acq-writes, tl.timeouts.Load(), tl.errs.Load(), tl.lost.Load(), g.maxR, g.puts-g.reg, g.tornRead, g.violations)
	commonChecks(t, tl, g, acq, dur)
	assert.GreaterOrEqual(t, g.maxR, int64(2), "at most reader at once: readers never shared the lock")
	assert.GreaterOrEqual(t, writes, 10, "only writes")
}

// TestFaultSemaphoreContention: processes and goroutines contend on one
// Semaphore of 4 permits, acquiring 1-3 permits (sometimes all 4). The
// history is linearizable against the semaphore model (never more than 4
// held, release only your own), tokens follow real time, the gauge never
// saw more than 4 permits inside, and permits were shared.
func TestFaultSemaphoreContention(t *testing.T) {
	const procs, perProc, local, size = 3, 4, 4, 4
	dur := 6 * time.Second
	g := &gauge{size: size}
	var free struct {
		sync.Mutex
		n, bad int
		min    int64
	}
	free.min = size
	h, tl := contention(t, "sem", size, procs, perProc, local, dur, g, func(c *dsync.Client, until time.Time) {
		// Sample Redis' view: free permits within 0..size.
		for time.Now().Before(until) {
			sts, err := c.Inspect(context.Background(), "contended")
			if !assert.NoError(t, err, "Inspect") {
				return
			}
			for _, st := range sts {
				if st.Kind != dsync.KindSemaphore {
					continue
				}
				var held int64
				for _, hd := range st.Holders {
					held += hd.Permits
				}
				free.Lock()
				free.n++
				free.min = min(free.min, st.Free)
				if st.Free < 0 || st.Free > size || held > size || st.Size != size {
					free.bad++
				}
				free.Unlock()
			}
			time.Sleep(5 * time.Millisecond) // sampling period
		}
	})
	ev := h.events()
	ops := make([]porcupine.Operation, 0, len(ev))
	var permits int64
	for _, e := range ev {
		ops = append(ops, porcupine.Operation{ClientId: e.Who, Input: semIn{rel: e.Rel, who: e.Who, n: e.N}, Call: e.Call, Return: e.Ret})
		if !e.Rel {
			permits += e.N
		}
	}
	checkLinear(t, semModel(size), ops, "semaphore")
	acq := checkTokens(t, ev)
	t.Logf("semaphore(%d): %d procs x %d + %d goroutines, %v: %d acquisitions of %d permits, %d acquire timeouts, %d errors, %d lost; at most %d permits inside at once (overlaps %d); %d Inspect samples, fewest free %d, out of range %d",
		size, procs, perProc, local, dur, acq, permits, tl.timeouts.Load(), tl.errs.Load(), tl.lost.Load(), g.maxS, g.violations, free.n, free.min, free.bad)
	commonChecks(t, tl, g, acq, dur)
	assert.GreaterOrEqual(t, g.maxS, int64(2), "at most permits held at once: permits were never shared")
	assert.Equal(t, 0, free.bad, "%d Inspect samples outside 0..%d free permits", free.bad, size)
}

// TestFaultFairMutexContention: processes and goroutines contend on one
// FairMutex. The history is linearizable against the mutex model, tokens
// follow real time, no update is lost, and grants follow queue arrival as
// far as the test can know it: a sampler reads the queue in Redis
// (Inspect) over and over; the waiters of each sample must be granted in
// that order (their tokens increase along the queue), and every
// acquisition called after a sample was read must be granted after each
// waiter of that sample.
func TestFaultFairMutexContention(t *testing.T) {
	const procs, perProc, local = 3, 4, 4
	dur := 6 * time.Second
	g := &gauge{}
	type snap struct {
		at     int64 // when Inspect returned
		owners []string
	}
	var snaps []snap
	h, tl := contention(t, "fair", 0, procs, perProc, local, dur, g, func(c *dsync.Client, until time.Time) {
		for time.Now().Before(until) {
			sts, err := c.Inspect(context.Background(), "contended")
			at := now()
			if !assert.NoError(t, err, "Inspect") {
				return
			}
			for _, st := range sts {
				if st.Kind == dsync.KindFairMutex && len(st.Waiters) > 0 {
					s := snap{at: at}
					for _, w := range st.Waiters {
						s.owners = append(s.owners, w.Owner)
					}
					snaps = append(snaps, s)
				}
			}
			time.Sleep(3 * time.Millisecond) // sampling period
		}
	})
	ev := h.events()
	var mh history
	grant := map[string]pevent{}
	for _, e := range ev {
		mh.add(event{Rel: e.Rel, Who: e.Who, Call: e.Call, Ret: e.Ret, Tok: e.Tok, Lost: e.Lost})
		if !e.Rel {
			grant[e.Owner] = e
		}
	}
	holds := mh.check(t)
	checkTokens(t, ev)
	pairs, later, bad, longest := 0, 0, 0, 0
	for _, s := range snaps {
		longest = max(longest, len(s.owners))
		var prev *pevent
		for _, o := range s.owners {
			a, ok := grant[o]
			if !ok {
				continue // it timed out waiting, or its grant was not recorded
			}
			if prev != nil {
				pairs++
				if a.Tok <= prev.Tok {
					bad++
					if bad <= 5 {
						t.Errorf("queue order: a waiter behind another in the queue was granted first (token %d before %d)", a.Tok, prev.Tok)
					}
				}
			}
			prev = &a
			for _, b := range grant {
				if b.Call > s.at {
					later++
					if b.Tok <= a.Tok {
						bad++
						if bad <= 5 {
							t.Errorf("queue order: an acquisition called after a waiter was seen queued was granted before it (token %d before %d)", b.Tok, a.Tok)
						}
					}
				}
			}
		}
	}
	t.Logf("fair: %d procs x %d + %d goroutines, %v: %d holds, %d acquire timeouts, %d errors, %d lost; lost updates %d, overlaps %d; %d queue samples (longest %d waiters): %d in-queue pairs and %d later arrivals checked, %d out of order",
		procs, perProc, local, dur, holds, tl.timeouts.Load(), tl.errs.Load(), tl.lost.Load(), g.puts-g.reg, g.violations, len(snaps), longest, pairs, later, bad)
	commonChecks(t, tl, g, holds, dur)
	assert.GreaterOrEqual(t, pairs, 20, "only queued pairs seen: the queue order was hardly tested")
	assert.Equal(t, 0, bad, "grants out of queue order")
}

// TestFaultModelsCatchViolations feeds the read-write and semaphore models
// hand-made histories, so that a model that accepts everything cannot pass
// the contention scenarios unnoticed.
func TestFaultModelsCatchViolations(t *testing.T) {
	op := func(who int, in interface{}, call, ret int64) porcupine.Operation {
		return porcupine.Operation{ClientId: who, Input: in, Call: call, Return: ret}
	}
	hold := func(who int, read bool, from, to int64) []porcupine.Operation {
		return []porcupine.Operation{op(who, rwIn{read: read, who: who}, from, from+1), op(who, rwIn{rel: true, read: read, who: who}, to, to+1)}
	}
	rw := []struct {
		name string
		ops  []porcupine.Operation
		ok   bool
	}{
		{"two readers overlap", append(hold(0, true, 0, 10), hold(1, true, 2, 12)...), true},
		{"writer after reader", append(hold(0, true, 0, 10), hold(1, false, 12, 20)...), true},
		{"two writers overlap", append(hold(0, false, 0, 10), hold(1, false, 2, 12)...), false},
		{"writer overlaps reader", append(hold(0, true, 0, 10), hold(1, false, 2, 12)...), false},
		{"reader inside writer", append(hold(0, false, 0, 10), hold(1, true, 2, 5)...), false},
	}
	for _, c := range rw {
		assert.Equal(t, c.ok, porcupine.CheckOperations(rwModel, c.ops), "rw model, %s: linearizable", c.name)
	}
	sh := func(who int, n, from, to int64) []porcupine.Operation {
		return []porcupine.Operation{op(who, semIn{who: who, n: n}, from, from+1), op(who, semIn{rel: true, who: who, n: n}, to, to+1)}
	}
	sem := []struct {
		name string
		ops  []porcupine.Operation
		ok   bool
	}{
		{"2 + 1 of 3", append(sh(0, 2, 0, 10), sh(1, 1, 2, 12)...), true},
		{"2 + 2 of 3", append(sh(0, 2, 0, 10), sh(1, 2, 2, 12)...), false},
		{"release of another's permits", []porcupine.Operation{op(0, semIn{who: 0, n: 1}, 0, 1), op(1, semIn{rel: true, who: 1, n: 1}, 2, 3)}, false},
		{"release of more than held", []porcupine.Operation{op(0, semIn{who: 0, n: 1}, 0, 1), op(0, semIn{rel: true, who: 0, n: 2}, 2, 3)}, false},
	}
	for _, c := range sem {
		assert.Equal(t, c.ok, porcupine.CheckOperations(semModel(3), c.ops), "semaphore model, %s: linearizable", c.name)
	}
}
