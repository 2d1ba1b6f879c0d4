package dsync_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func init() {
	childRoles["semhold"] = childSemHold
	childRoles["semhammer"] = childSemHammer
}

func semKey(prefix, name, part string) string {
	return prefix + ":{" + name + "}:sem" + part
}

// semQueued is the length of a semaphore's queue (key: its ":waiters").
func semQueued(t testing.TB, rc rueidis.Client, key string) int64 {
	t.Helper()
	n, err := rc.Do(context.Background(), rc.B().Llen().Key(key).Build()).AsInt64()
	require.NoError(t, err)
	return n
}

func TestSemaphoreBasic(t *testing.T) {
	c := newClient(t)
	s := c.NewSemaphore("basic", 3)
	ctx := ctxT(t)
	l1, err := s.Acquire(ctx, 2)
	require.NoError(t, err)
	tok1, ok := dsync.FencingToken(l1)
	_, hasOwner := dsync.OwnerOf(l1)
	require.True(t, ok, "lock context carries no owner or token")
	require.True(t, hasOwner, "lock context carries no owner or token")
	_, ok, err = s.TryAcquire(ctx, 2)
	require.False(t, ok, "TryAcquire(2) with 1 free")
	require.NoError(t, err, "TryAcquire(2) with 1 free")
	l2, ok, err := s.TryAcquire(ctx, 1)
	require.True(t, ok, "TryAcquire(1) with 1 free")
	require.NoError(t, err, "TryAcquire(1) with 1 free")
	tok2, _ := dsync.FencingToken(l2)
	require.Greater(t, tok2, tok1, "token not above the previous one")
	// Over-release: ErrNotHeld, and nothing changes.
	require.ErrorIs(t, s.Release(l1, 3), dsync.ErrNotHeld, "over-release")
	require.NoError(t, l1.Err(), "a refused release cancelled the lock context")
	require.ErrorIs(t, s.Release(dsync.WithOwner(ctx), 1), dsync.ErrNotHeld, "release by a stranger")
	require.ErrorIs(t, s.Release(context.Background(), 1), dsync.ErrNotHeld, "release without owner")
	_, ok, _ = s.TryAcquire(ctx, 1)
	require.False(t, ok, "a refused release freed permits")
	require.NoError(t, s.Release(l1, 2))
	require.Error(t, l1.Err(), "released lock context")
	require.NotErrorIs(t, context.Cause(l1), dsync.ErrLockLost, "released lock context")
	require.NoError(t, l2.Err(), "releasing one acquisition cancelled another")
	require.NoError(t, s.Release(l2, 1))
	// Reentrant by owner: permits add up, each Acquire needs its Release.
	own := dsync.WithOwner(ctx)
	a, err := s.Acquire(own, 1)
	require.NoError(t, err)
	b, err := s.Acquire(own, 2)
	require.NoError(t, err)
	_, ok, _ = s.TryAcquire(ctx, 1)
	require.False(t, ok, "3 permits held, yet one more was granted")
	require.NoError(t, s.Release(b, 2), "release of the second acquisition")
	require.NoError(t, a.Err(), "release of the second acquisition")
	require.Error(t, b.Err(), "release of the second acquisition")
	require.NoError(t, s.Release(own, 1), "release of the first")
	require.Error(t, a.Err(), "release of the first")
	require.ErrorIs(t, s.Release(own, 1), dsync.ErrNotHeld, "third release")
}

func TestSemaphoreInvalid(t *testing.T) {
	c := newClient(t)
	c2 := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefixOf(t, c)))
	ctx := ctxT(t)
	s := c.NewSemaphore("inv", 3)
	for _, n := range []int64{0, -1, 4} {
		_, err := s.Acquire(ctx, n)
		assert.ErrorIs(t, err, dsync.ErrInvalidArgument, "Acquire(%d)", n)
		_, _, err = s.TryAcquire(ctx, n)
		assert.ErrorIs(t, err, dsync.ErrInvalidArgument, "TryAcquire(%d)", n)
		assert.ErrorIs(t, s.Release(ctx, n), dsync.ErrInvalidArgument, "Release(%d)", n)
	}
	for _, bad := range []*dsync.Semaphore{c.NewSemaphore("inv", 0), c.NewSemaphore("", 1)} {
		_, err := bad.Acquire(ctx, 1)
		assert.ErrorIs(t, err, dsync.ErrInvalidArgument, "bad semaphore Acquire")
	}
	l, err := s.Acquire(ctx, 1)
	require.NoError(t, err)
	// Another size for the same name: a clear error naming both sizes, and
	// the semaphore in Redis is untouched.
	_, err = c2.NewSemaphore("inv", 5).Acquire(ctx, 1)
	require.ErrorIs(t, err, dsync.ErrInvalidArgument, "other size")
	t.Log(err)
	_, ok, _ := c2.NewSemaphore("inv", 3).TryAcquire(ctx, 3)
	require.False(t, ok, "size mismatch changed the semaphore")
	// A release through another size is refused too, and releases nothing:
	// the permit is still l's below. (Through l's own Client: through
	// c2, l is refused as another Client's lock context before Redis is
	// asked, TestReleaseThroughAnotherClientRefused.)
	require.ErrorIs(t, c.NewSemaphore("inv", 5).Release(l, 1), dsync.ErrInvalidArgument, "Release through another size")
	require.ErrorIs(t, c2.NewSemaphore("inv", 5).Release(l, 1), dsync.ErrWrongContext, "Release through another Client")
	require.NoError(t, s.Release(l, 1))
	c.Close()
	_, err = s.Acquire(ctx, 1)
	require.ErrorIs(t, err, dsync.ErrClosed, "after Close")
}

// TestSemaphoreFIFO: a large request at the head is not overtaken by a
// later small one, and grants follow arrival order across Clients.
func TestSemaphoreFIFO(t *testing.T) {
	c := newClient(t)
	prefix := prefixOf(t, c)
	c2 := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefix))
	rc := newRueidis(t)
	ctx := ctxT(t)
	s := c.NewSemaphore("fifo", 3)
	first, err := s.Acquire(ctx, 3)
	require.NoError(t, err)
	type grant struct {
		name string
		lctx context.Context
	}
	grants := make(chan grant, 3)
	queue := semKey(prefix, "fifo", ":waiters")
	for i, w := range []struct {
		name string
		n    int64
		c    *dsync.Client
	}{{"w1", 2, c2}, {"w2", 3, c}, {"w3", 1, c2}} {
		go func() {
			l, err := w.c.NewSemaphore("fifo", 3).Acquire(ctx, w.n)
			assert.NoError(t, err)
			grants <- grant{w.name, l}
		}()
		waitFor(t, 5*time.Second, w.name+" queued", func() bool { return semQueued(t, rc, queue) == int64(i+1) })
	}
	next := func(want string) grant {
		t.Helper()
		select {
		case g := <-grants:
			require.Equal(t, want, g.name, "granted")
			return g
		case <-time.After(5 * time.Second):
			t.Fatalf("%s not granted", want)
		}
		return grant{}
	}
	require.NoError(t, s.Release(first, 3))
	g1 := next("w1")
	// 1 permit is free and w3 wants 1, but w2 (3) is ahead of it.
	select {
	case g := <-grants:
		t.Fatalf("%s overtook w2", g.name)
	case <-time.After(150 * time.Millisecond):
	}
	require.NoError(t, c2.NewSemaphore("fifo", 3).Release(g1.lctx, 2))
	g2 := next("w2")
	require.NoError(t, s.Release(g2.lctx, 3))
	g3 := next("w3")
	require.NoError(t, c2.NewSemaphore("fifo", 3).Release(g3.lctx, 1))
}

// TestSemaphoreCancelledWaiter: a waiter whose context ends leaves no queue
// entry, and if it was the large request at the head, the smaller ones
// behind it are woken at once (not after a fallback timer).
func TestSemaphoreCancelledWaiter(t *testing.T) {
	c := newClient(t)
	prefix := prefixOf(t, c)
	rc := newRueidis(t)
	ctx := ctxT(t)
	s := c.NewSemaphore("cancel", 2)
	held, err := s.Acquire(ctx, 1)
	require.NoError(t, err)
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_, err = s.Acquire(short, 2)
	require.ErrorIs(t, err, context.DeadlineExceeded, "timed-out Acquire")
	queue := semKey(prefix, "cancel", ":waiters")
	require.Equal(t, int64(0), semQueued(t, rc, queue), "timed-out waiter left queue entries")

	bigCtx, cancelBig := context.WithCancel(ctx)
	bigErr := make(chan error, 1)
	go func() { _, err := s.Acquire(bigCtx, 2); bigErr <- err }()
	waitFor(t, 5*time.Second, "big queued", func() bool { return semQueued(t, rc, queue) == 1 })
	small := make(chan context.Context, 1)
	go func() {
		l, err := s.Acquire(ctx, 1)
		assert.NoError(t, err)
		small <- l
	}()
	waitFor(t, 5*time.Second, "small queued", func() bool { return semQueued(t, rc, queue) == 2 })
	select {
	case <-small:
		t.Fatal("small overtook big")
	case <-time.After(100 * time.Millisecond):
	}
	start := time.Now()
	cancelBig()
	require.ErrorIs(t, <-bigErr, context.Canceled, "cancelled Acquire")
	var l context.Context
	select {
	case l = <-small:
	case <-time.After(2 * time.Second): // the fallback timer is lease/3 = 10s
		t.Fatal("small not woken when big left the head")
	}
	t.Logf("small granted %v after big cancelled", time.Since(start))
	require.Equal(t, int64(0), semQueued(t, rc, queue), "queue entries left")
	s.Release(l, 1)
	s.Release(held, 1)
}

// TestSemaphoreLost: permits removed from Redis cancel the lock context
// with ErrLockLost; Close returns the permits of live holds.
func TestSemaphoreLost(t *testing.T) {
	c := newClient(t, dsync.WithLease(600*time.Millisecond))
	prefix := prefixOf(t, c)
	rc := newRueidis(t)
	ctx := ctxT(t)
	s := c.NewSemaphore("lost", 2)
	l, err := s.Acquire(ctx, 1)
	require.NoError(t, err)
	require.NoError(t, rc.Do(ctx, rc.B().Del().Key(semKey(prefix, "lost", ":holders")).Build()).Error())
	waitFor(t, 2*time.Second, "lock context cancelled", func() bool { return l.Err() != nil })
	require.ErrorIs(t, context.Cause(l), dsync.ErrLockLost, "cause")
	// The watchdog keeps a live hold past many leases.
	l2, err := s.Acquire(ctx, 2)
	require.NoError(t, err)
	time.Sleep(1200 * time.Millisecond) // must NOT lose it: 2 leases pass
	require.NoError(t, l2.Err(), "held lock lost: %v", context.Cause(l2))
	c2 := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefix))
	_, ok, _ := c2.NewSemaphore("lost", 2).TryAcquire(ctx, 1)
	require.False(t, ok, "renewed permits were granted to another owner")
	c.Close()
	require.ErrorIs(t, context.Cause(l2), dsync.ErrClosed, "cause after Close")
	_, ok, err = c2.NewSemaphore("lost", 2).TryAcquire(ctx, 2)
	require.True(t, ok, "permits not returned by Close")
	require.NoError(t, err, "permits not returned by Close")
}

// childSemHold: acquire DSYNC_TEST_N permits of "crash" (size
// DSYNC_TEST_SIZE), print "held", and hold them until killed.
func childSemHold(c *dsync.Client, rc rueidis.Client, prefix string) int {
	n, _ := strconv.ParseInt(os.Getenv("DSYNC_TEST_N"), 10, 64)
	size, _ := strconv.ParseInt(os.Getenv("DSYNC_TEST_SIZE"), 10, 64)
	if _, err := c.NewSemaphore("crash", size).Acquire(context.Background(), n); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("held")
	select {}
}

// TestSemaphoreCrash: the permits of a SIGKILLed holder come back within
// one lease (1s), to a waiter that was already queued.
func TestSemaphoreCrash(t *testing.T) {
	prefix := testPrefix(t)
	const lease = time.Second
	cmd := childSaying(t, "held", "semhold", prefix, "DSYNC_TEST_LEASE="+lease.String(), "DSYNC_TEST_N=3", "DSYNC_TEST_SIZE=3")
	c := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefix))
	s := c.NewSemaphore("crash", 3)
	ctx := ctxT(t)
	// Alive and renewing: not free after more than one lease.
	short, cancel := context.WithTimeout(ctx, lease+lease/2)
	defer cancel()
	_, err := s.Acquire(short, 1)
	require.ErrorIs(t, err, context.DeadlineExceeded, "Acquire while the child holds all permits")
	got := make(chan time.Time, 1)
	go func() {
		l, err := s.Acquire(ctx, 3)
		got <- time.Now()
		if !assert.NoError(t, err) {
			return
		}
		s.Release(l, 3)
	}()
	waitFor(t, 5*time.Second, "waiter queued", func() bool { return semQueued(t, newRueidis(t), semKey(prefix, "crash", ":waiters")) == 1 })
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	killed := time.Now()
	select {
	case at := <-got:
		rec := at.Sub(killed)
		t.Logf("permits recovered %v after SIGKILL (lease %v)", rec, lease)
		require.LessOrEqual(t, rec, lease+500*time.Millisecond, "recovery took more than one lease (%v)", lease) // slack for a loaded CI machine
	case <-time.After(5 * time.Second):
		t.Fatal("permits of the killed holder never came back")
	}
}

// semPeak counts permits in use independently of the semaphore: INCRBY,
// track the peak, count any excess over the size.
var semPeak = rueidis.NewLuaScript(`
local v = redis.call('incrby', KEYS[1], ARGV[1])
if v > tonumber(redis.call('get', KEYS[2]) or '0') then redis.call('set', KEYS[2], v) end
if v > tonumber(ARGV[2]) then redis.call('incr', KEYS[3]) end
return v`)

const hammerSize = 3

// childSemHammer: 4 goroutines x DSYNC_TEST_ITERS acquisitions of 1 or 2
// permits of "hammer", each counted in and out by semPeak.
func childSemHammer(c *dsync.Client, rc rueidis.Client, prefix string) int {
	iters, _ := strconv.Atoi(os.Getenv("DSYNC_TEST_ITERS"))
	keys := []string{prefix + ":inuse", prefix + ":peak", prefix + ":violations"}
	var failed atomic.Bool
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := c.NewSemaphore("hammer", hammerSize)
			ctx := context.Background()
			for i := 0; i < iters; i++ {
				n := int64(1 + rand.IntN(2))
				l, err := s.Acquire(ctx, n)
				if err != nil {
					fmt.Fprintln(os.Stderr, err)
					failed.Store(true)
					return
				}
				ns := strconv.FormatInt(n, 10)
				if err := semPeak.Exec(ctx, rc, keys, []string{ns, strconv.Itoa(hammerSize)}).Error(); err != nil {
					failed.Store(true)
				}
				time.Sleep(time.Duration(rand.IntN(500)) * time.Microsecond)
				if err := rc.Do(ctx, rc.B().Decrby().Key(keys[0]).Decrement(n).Build()).Error(); err != nil {
					failed.Store(true)
				}
				if err := s.Release(l, n); err != nil {
					fmt.Fprintln(os.Stderr, err)
					failed.Store(true)
				}
			}
		}()
	}
	wg.Wait()
	if failed.Load() {
		return 1
	}
	return 0
}

// TestSemaphoreHammerProcesses: 2 processes x 4 goroutines never hold more
// than the size, by an independent counter, and do share the permits.
func TestSemaphoreHammerProcesses(t *testing.T) {
	prefix := testPrefix(t)
	rc := newRueidis(t)
	const iters = 60
	start := time.Now()
	var cmds []*exec.Cmd
	for i := 0; i < 2; i++ {
		cmd := startChild(t, "semhammer", prefix, "DSYNC_TEST_ITERS="+strconv.Itoa(iters))
		require.NoError(t, cmd.Start())
		cmds = append(cmds, cmd)
	}
	for _, cmd := range cmds {
		require.NoError(t, cmd.Wait(), "child")
	}
	get := func(k string) int64 {
		v, err := rc.Do(context.Background(), rc.B().Get().Key(prefix+k).Build()).AsInt64()
		if !rueidis.IsRedisNil(err) {
			require.NoError(t, err)
		}
		return v
	}
	viol, peak := get(":violations"), get(":peak")
	t.Logf("%d acquisitions in %v: peak %d permits in use of %d, %d violations",
		2*4*iters, time.Since(start), peak, hammerSize, viol)
	assert.Equal(t, int64(0), viol, "%d times more than %d permits were in use", viol, hammerSize)
	assert.GreaterOrEqual(t, peak, int64(2), "peak: permits were never shared, the test proves nothing")
	assert.Equal(t, int64(0), get(":inuse"), "in use at the end")
}
