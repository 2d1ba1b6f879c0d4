package faults

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var prefixSeq struct {
	sync.Mutex
	n int
}

func testPrefix() string {
	prefixSeq.Lock()
	defer prefixSeq.Unlock()
	prefixSeq.n++
	return "dsync" + strconv.Itoa(prefixSeq.n)
}

// newDsync returns a Client on addr, closed when t ends.
func newDsync(t testing.TB, addr, prefix string, lease time.Duration, opts ...func(*rueidis.ClientOption)) *dsync.Client {
	t.Helper()
	c, err := dsync.NewClient(client(t, addr, opts...), dsync.WithKeyPrefix(prefix), dsync.WithLease(lease))
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// collect feeds a worker child's events into h until it says done.
func collect(t testing.TB, c *child, h *history) (holds, timeouts, errs, lost int) {
	for l := range c.lines {
		w, rest, _ := strings.Cut(l, " ")
		switch w {
		case "ev":
			var e event
			if err := json.Unmarshal([]byte(rest), &e); !assert.NoError(t, err, "bad event %q", rest) {
				continue
			}
			h.add(e)
		case "done":
			fmt.Sscan(rest, &holds, &timeouts, &errs, &lost)
			return
		}
	}
	t.Errorf("worker child exited without done")
	return
}

// Scenario (a): processes and goroutines contend on one Mutex. Every hold
// is checked: porcupine finds the history linearizable (no overlap), no
// register update is lost, and tokens strictly increase.
func TestFaultMutexContention(t *testing.T) {
	srv := startRedis(t)
	prefix := testPrefix()
	const lease = 2 * time.Second
	dur := 8 * time.Second
	st := &store{}
	url := st.serve(t)
	var h history
	const procs, perProc, local = 3, 3, 4
	var wg sync.WaitGroup
	var mu sync.Mutex
	var holds, timeouts, errs, lost int
	for p := range procs {
		c := startChild(t, "worker", srv.Addr, prefix, lease, "FAULTS_STORE="+url, "FAULTS_NAME=contended",
			"FAULTS_G="+strconv.Itoa(perProc), "FAULTS_ID="+strconv.Itoa(p+1), "FAULTS_DUR="+dur.String())
		wg.Add(1)
		go func() {
			defer wg.Done()
			a, b, e, l := collect(t, c, &h)
			mu.Lock()
			holds, timeouts, errs, lost = holds+a, timeouts+b, errs+e, lost+l
			mu.Unlock()
		}()
	}
	var tl tally
	until := time.Now().Add(dur)
	for i := range local {
		dc := newDsync(t, srv.Addr, prefix, lease)
		wg.Add(1)
		go func() {
			defer wg.Done()
			work(context.Background(), dc.NewMutex("contended"), i, st, h.add, until, 5*time.Second, &tl)
		}()
	}
	wg.Wait()
	holds += int(tl.holds.Load())
	timeouts += int(tl.timeouts.Load())
	errs += int(tl.errs.Load())
	lost += int(tl.lost.Load())
	checked := h.check(t)
	acc, rej := st.counts()
	t.Logf("(a) %d procs x %d + %d goroutines, %v: %d holds (%d in history), %d acquire timeouts, %d errors, %d lost holds, lost updates %d, fenced writes %d accepted / %d rejected",
		procs, perProc, local, dur, holds, checked, timeouts, errs, lost, st.lostUpdates(), acc, rej)
	assert.GreaterOrEqual(t, checked, 50, "only %d holds in %v: the contention did not happen", checked, dur)
	assert.Equal(t, int64(0), st.lostUpdates(), "register updates lost: two holders overlapped")
	assert.Equal(t, 0, rej, "without faults: stale writes rejected")
	assert.Equal(t, 0, lost, "without faults: holds lost")
}

// holderChild starts a holder child on name and waits until it holds.
func holderChild(t testing.TB, addr, prefix, name, url string, lease, hold time.Duration) (*child, uint64) {
	t.Helper()
	c := startChild(t, "holder", addr, prefix, lease, "FAULTS_STORE="+url, "FAULTS_NAME="+name, "FAULTS_HOLD="+hold.String())
	var tok uint64
	var at int64
	fmt.Sscan(c.expect(t, "held", 15*time.Second), &tok, &at)
	return c, tok
}

// Scenario (b): a holder process is SIGKILLed; the next owner acquires
// within lease + 250 ms of the kill.
func TestFaultHolderKill(t *testing.T) {
	srv := startRedis(t)
	prefix := testPrefix()
	const lease = time.Second
	st := &store{}
	hc, tok := holderChild(t, srv.Addr, prefix, "k", st.serve(t), lease, time.Minute)
	c := newDsync(t, srv.Addr, prefix, lease)
	m := c.NewMutex("k")
	got := make(chan time.Time, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var lctx context.Context
	var lerr error
	go func() {
		lctx, lerr = m.LockContext(ctx)
		got <- time.Now()
	}()
	waitSubscribed(t, srv, prefix+":{k}:mutex:ch") // the waiter waits
	killed := time.Now()
	hc.signal(t, syscall.SIGKILL)
	at := <-got
	require.NoError(t, lerr)
	rec := at.Sub(killed)
	t2, _ := dsync.FencingToken(lctx)
	t.Logf("(b) SIGKILL of holder, lease %v: next owner acquired %v after the kill (bound %v); token %d -> %d", lease, rec.Round(time.Millisecond), lease+250*time.Millisecond, tok, t2)
	assert.LessOrEqual(t, rec, lease+250*time.Millisecond, "next owner acquired after the kill")
	assert.Greater(t, t2, tok, "token not above the previous one")
	require.NoError(t, m.UnlockContext(lctx))
}

// Scenario (c): the holder process is frozen (SIGSTOP) for 2x lease. Its
// lease runs out and the parent takes the lock. When it thaws, its lock
// context is cancelled before it can do anything through dsync, its fenced
// writes are rejected, and its Unlock returns ErrNotHeld without touching
// the parent's hold.
func TestFaultHolderStopLong(t *testing.T) {
	srv := startRedis(t)
	prefix := testPrefix()
	const lease = time.Second
	st := &store{}
	hc, tok := holderChild(t, srv.Addr, prefix, "s", st.serve(t), lease, time.Minute)
	hc.expect(t, "write", 5*time.Second) // it is writing
	c := newDsync(t, srv.Addr, prefix, lease)
	m := c.NewMutex("s")
	hc.signal(t, syscall.SIGSTOP)
	stopped := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lctx, err := m.LockContext(ctx)
	require.NoError(t, err)
	acquired := time.Now()
	mytok, _ := dsync.FencingToken(lctx)
	require.True(t, st.fence(mytok), "the new holder's first fenced write was rejected")
	accBefore, rejBefore := st.counts()
	time.Sleep(time.Until(stopped.Add(2 * lease))) // the fault: frozen 2x lease
	hc.signal(t, syscall.SIGCONT)
	thawed := time.Now()
	var cancelAt int64
	cline := hc.expect(t, "cancel", 5*time.Second)
	fmt.Sscan(cline, &cancelAt)
	_, cause, _ := strings.Cut(cline, " ")
	unlock := hc.expect(t, "unlock", 5*time.Second)
	hc.wait(t, 5*time.Second)
	// The parent does not write again, so every write counted since its
	// first one is the child's: all must have been rejected.
	accAfter, rejAfter := st.counts()
	staleOK := accAfter - accBefore
	cancelLag := time.Duration(cancelAt - thawed.UnixNano())
	t.Logf("(c) holder SIGSTOPped %v (lease %v): parent acquired %v after the stop; child cancelled %v after SIGCONT (%v after the parent's acquire; cause %s); child's writes after thaw: %d accepted, %d rejected; child Unlock: %s",
		2*lease, lease, acquired.Sub(stopped).Round(time.Millisecond), cancelLag.Round(time.Millisecond),
		time.Duration(cancelAt-acquired.UnixNano()).Round(time.Millisecond), cause, staleOK, rejAfter-rejBefore, unlock)
	assert.LessOrEqual(t, acquired.Sub(stopped), lease+250*time.Millisecond, "parent acquired after the stop")
	assert.LessOrEqual(t, cancelLag, 100*time.Millisecond, "the thawed child's lock context was cancelled after SIGCONT")
	assert.Equal(t, 0, staleOK, "writes of the frozen holder were accepted after the parent took over")
	assert.Contains(t, cause, "lock lost", "the thawed child's lock context cause")
	assert.Equal(t, "ErrNotHeld", unlock, "the thawed child's Unlock")
	require.NoError(t, lctx.Err(), "the parent's hold was disturbed: %v", context.Cause(lctx))
	// Ask Redis through another Client: the parent's hold must be intact.
	_, v, err := newDsync(t, srv.Addr, prefix, lease).NewMutex("s").TryLockContext(ctx)
	require.NoError(t, err, "after the child's Unlock the lock is free (TryLock: the child released the parent's hold")
	require.False(t, v, "after the child's Unlock the lock is free (TryLock: the child released the parent's hold")
	require.NoError(t, m.UnlockContext(lctx), "parent Unlock")
	_ = tok
	assert.NotEqual(t, 0, rejAfter-rejBefore, "the thawed child made no write: the scenario did not test the fence")
}

// Scenario (d): the holder is frozen for lease/2: it keeps the lock, and
// nobody else gets it meanwhile.
func TestFaultHolderStopShort(t *testing.T) {
	srv := startRedis(t)
	prefix := testPrefix()
	const lease = 2 * time.Second
	st := &store{}
	hc, _ := holderChild(t, srv.Addr, prefix, "d", st.serve(t), lease, 2*lease)
	hc.expect(t, "write", 5*time.Second)
	c := newDsync(t, srv.Addr, prefix, lease)
	m := c.NewMutex("d")
	hc.signal(t, syscall.SIGSTOP)
	stopped := time.Now()
	tries, got := 0, 0
	for time.Since(stopped) < lease/2 { // the fault: frozen lease/2, probing
		tries++
		lctx, ok, err := m.TryLockContext(context.Background())
		require.NoError(t, err)
		if ok {
			got++
			_ = m.UnlockContext(lctx)
		}
		time.Sleep(20 * time.Millisecond)
	}
	hc.signal(t, syscall.SIGCONT)
	unlock := hc.expect(t, "unlock", 3*lease)
	lostLine := ""
	for l := range hc.lines {
		if strings.HasPrefix(l, "cancel ") {
			lostLine = l
		}
	}
	_, rej := st.counts()
	t.Logf("(d) holder SIGSTOPped %v (lease %v): %d TryLocks meanwhile, %d succeeded; child lost its hold: %v; rejected writes %d; child Unlock: %s",
		lease/2, lease, tries, got, lostLine != "" && strings.Contains(lostLine, "lost"), rej, unlock)
	assert.Equal(t, 0, got, "a second holder got the lock times while the first was frozen lease/2")
	assert.Equal(t, "nil", unlock, "the holder lost the lock over a lease/2 freeze: Unlock")
	assert.Equal(t, 0, rej, "the holder lost the lock over a lease/2 freeze: rejected writes")
	assert.NotContains(t, lostLine, "lost", "holder")
	_ = errors.Is
}
