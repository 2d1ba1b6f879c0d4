package dsync_test

import (
	"context"
	"fmt"
	"os"
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
	childRoles["rwreader"] = childRWReader
}

// rwKeys returns the hash, readers, queue and places keys of rw mutex name.
func rwKeys(prefix, name string) []string {
	k := prefix + ":{" + name + "}:rw"
	return []string{k, k + ":readers", k + ":queue", k + ":places", k + ":rwait", k + ":radmit"}
}

func hgetall(t testing.TB, rc rueidis.Client, key string) map[string]string {
	t.Helper()
	m, err := rc.Do(context.Background(), rc.B().Hgetall().Key(key).Build()).AsStrMap()
	require.NoError(t, err)
	return m
}

func TestRWMutexBasic(t *testing.T) {
	c := newClient(t)
	c2 := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefixOf(t, c)))
	rw, rw2 := c.NewRWMutex("basic"), c2.NewRWMutex("basic")
	ctx := ctxT(t)
	r1 := dsync.WithOwner(ctx)
	// Readers share, across Clients, and re-enter.
	l1, err := rw.RLockContext(r1)
	require.NoError(t, err)
	l1b, err := rw2.RLockContext(r1)
	require.NoError(t, err)
	a, b := tokenOf(t, l1), tokenOf(t, l1b)
	require.Equal(t, b, a, "read re-entry changed the token")
	l2, ok, err := rw2.TryRLockContext(ctx)
	require.NoError(t, err, "second reader")
	require.True(t, ok, "second reader")
	_, ok, err = rw.TryLockContext(ctx)
	require.False(t, ok, "writer got in among readers")
	require.NoError(t, err, "writer got in among readers")
	require.ErrorIs(t, rw.RUnlockContext(dsync.WithOwner(ctx)), dsync.ErrNotHeld, "foreign RUnlock")
	require.ErrorIs(t, rw.UnlockContext(r1), dsync.ErrNotHeld, "Unlock by a reader")
	for _, u := range []struct {
		m *dsync.RWMutex
		l context.Context
	}{{rw2, l1b}, {rw, l1}, {rw2, l2}} {
		require.NoError(t, u.m.RUnlockContext(u.l))
	}
	require.ErrorIs(t, rw.RUnlockContext(l1), dsync.ErrNotHeld, "extra RUnlock")
	// A writer excludes all, and re-enters.
	w := dsync.WithOwner(ctx)
	lw, err := rw.LockContext(w)
	require.NoError(t, err)
	lw2, err := rw2.LockContext(w)
	require.NoError(t, err)
	require.Greater(t, tokenOf(t, lw), tokenOf(t, l2), "write token not above the read tokens")
	_, ok, _ = rw2.TryRLockContext(ctx)
	require.False(t, ok, "reader got in with a writer")
	_, ok, _ = rw2.TryLockContext(ctx)
	require.False(t, ok, "second writer got in")
	require.ErrorIs(t, rw.UnlockContext(dsync.WithOwner(ctx)), dsync.ErrNotHeld, "foreign Unlock")
	require.NoError(t, rw2.UnlockContext(lw2))
	_, ok, _ = rw2.TryRLockContext(ctx)
	require.False(t, ok, "reader got in after 1 of 2 write releases")
	require.NoError(t, rw.UnlockContext(lw))
	require.Error(t, lw.Err(), "write lock context not cancelled by release")
	// sync.Locker forms.
	rw.Lock()
	require.False(t, rw.TryRLock(), "Try succeeded against Lock")
	require.False(t, rw.TryLock(), "Try succeeded against Lock")
	rw.Unlock()
	var rl sync.Locker = rw.RLocker()
	rl.Lock()
	rw.RLock()
	require.False(t, rw.TryLock(), "TryLock succeeded against RLock")
	rl.Unlock()
	rw.RUnlock()
	require.True(t, rw.TryLock(), "TryLock failed on a free RWMutex")
	rw.Unlock()
	for _, f := range []func(){rw.Unlock, rw.RUnlock} {
		require.Panics(t, f, "unlock of an unlocked RWMutex did not panic")
	}
}

func tokenOf(t testing.TB, ctx context.Context) uint64 {
	t.Helper()
	tok, ok := dsync.FencingToken(ctx)
	require.True(t, ok, "no fencing token")
	return tok
}

func TestRWMutexDowngrade(t *testing.T) {
	c := newClient(t)
	rw := c.NewRWMutex("down")
	ctx := dsync.WithOwner(ctxT(t))
	lw, err := rw.LockContext(ctx)
	require.NoError(t, err)
	lr, err := rw.RLockContext(ctx) // the writer takes the read lock
	require.NoError(t, err)
	_, ok, _ := rw.TryRLockContext(ctxT(t))
	require.False(t, ok, "another reader got in while write-locked")
	require.NoError(t, rw.UnlockContext(lw))
	require.NoError(t, lr.Err(), "read hold ended with the write hold")
	// Now only reading: other readers share, writers wait.
	l2, ok, err := rw.TryRLockContext(ctxT(t))
	require.NoError(t, err, "reader after downgrade")
	require.True(t, ok, "reader after downgrade")
	_, ok, _ = rw.TryLockContext(ctxT(t))
	require.False(t, ok, "writer got in while downgraded owner reads")
	rw.RUnlockContext(l2)
	require.NoError(t, rw.RUnlockContext(lr))
	require.True(t, rw.TryLock(), "not free after the downgraded read ended")
	rw.Unlock()
}

// Writers exclude everyone and readers share, across two Clients.
func TestRWMutexHammerClients(t *testing.T) {
	prefix := testPrefix(t)
	rcv := newRueidis(t)
	const writers, readers, iters = 3, 4, 25
	var writing, reading, maxReading atomic.Int32
	var writes atomic.Int64
	var wg sync.WaitGroup
	for ci := 0; ci < 2; ci++ {
		c := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefix))
		rw := c.NewRWMutex("hammer")
		for g := 0; g < writers; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < iters; i++ {
					l, err := rw.LockContext(context.Background())
					if !assert.NoError(t, err) {
						return
					}
					assert.Equal(t, int32(1), writing.Add(1), "writers inside at once")
					assert.Equal(t, int32(0), reading.Load(), "readers inside with a writer")
					unguardedIncr(t, rcv, prefix+":counter")
					writes.Add(1)
					writing.Add(-1)
					if !assert.NoError(t, rw.UnlockContext(l)) {
						return
					}
				}
			}()
		}
		for g := 0; g < readers; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < iters; i++ {
					l, err := rw.RLockContext(context.Background())
					if !assert.NoError(t, err) {
						return
					}
					n := reading.Add(1)
					for m := maxReading.Load(); n > m && !maxReading.CompareAndSwap(m, n); m = maxReading.Load() {
					}
					assert.Equal(t, int32(0), writing.Load(), "reader inside with a writer")
					time.Sleep(2 * time.Millisecond) // overlap with other readers
					reading.Add(-1)
					if !assert.NoError(t, rw.RUnlockContext(l)) {
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	got, err := rcv.Do(context.Background(), rcv.B().Get().Key(prefix+":counter").Build()).AsInt64()
	require.NoError(t, err)
	want := writes.Load()
	require.Equal(t, want, got, "counter writes: updates lost")
	require.Equal(t, int64(2*writers*iters), want, "counter writes: updates lost")
	t.Logf("max concurrent readers: %d", maxReading.Load())
	require.GreaterOrEqual(t, maxReading.Load(), int32(2), "readers never shared the lock")
}

// A writer is not starved by readers that keep the lock read-held at every
// moment: once it waits, new readers wait behind it.
func TestRWMutexWriterNotStarved(t *testing.T) {
	prefix := testPrefix(t)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var reads atomic.Int64
	var rws []*dsync.RWMutex
	for ci := 0; ci < 2; ci++ {
		c := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefix))
		rw := c.NewRWMutex("stream")
		rws = append(rws, rw)
		for g := 0; g < 3; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					l, err := rw.RLockContext(context.Background())
					if !assert.NoError(t, err) {
						return
					}
					reads.Add(1)
					time.Sleep(20 * time.Millisecond)
					rw.RUnlockContext(l)
				}
			}()
		}
	}
	defer func() { close(stop); wg.Wait() }()
	waitFor(t, 5*time.Second, "the reader stream", func() bool { return reads.Load() > 20 })
	ctx, cancel := context.WithTimeout(ctxT(t), 3*time.Second)
	defer cancel()
	start := time.Now()
	l, err := rws[0].LockContext(ctx)
	wait := time.Since(start)
	require.NoError(t, err, "writer starved by readers: %v after %v", err, wait)
	t.Logf("writer waited %v under a stream of 6 readers (20ms each)", wait)
	rws[0].UnlockContext(l)
	require.LessOrEqual(t, wait, time.Second, "writer waited")
}

// childRWReader: take a read lock on rw mutex DSYNC_TEST_NAME, print
// "held", and hold it until killed.
func childRWReader(c *dsync.Client, rc rueidis.Client, prefix string) int {
	rw := c.NewRWMutex(os.Getenv("DSYNC_TEST_NAME"))
	if _, err := rw.RLockContext(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("held")
	select {}
}

// A crashed reader's hold lapses within one lease while a live reader keeps
// renewing its own (no zombie renewal), and a writer then gets in.
func TestRWMutexReaderCrash(t *testing.T) {
	const name, lease = "crash", time.Second
	prefix := testPrefix(t)
	rc := newRueidis(t)
	keys := rwKeys(prefix, name)
	c := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefix), dsync.WithLease(lease))
	rw := c.NewRWMutex(name)
	live, err := rw.RLockContext(ctxT(t))
	require.NoError(t, err)
	cmd := childSaying(t, "held", "rwreader", prefix, "DSYNC_TEST_NAME="+name, "DSYNC_TEST_LEASE="+lease.String())
	require.Equal(t, int64(2), zcard(t, rc, keys[1]), "readers")
	// Sleep is the point: both readers' holds outlive their first lease.
	time.Sleep(lease + lease/2)
	require.Equal(t, int64(2), zcard(t, rc, keys[1]), "a live reader's hold lapsed: readers")
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	killed := time.Now()
	// A writer queues; the live reader releases after the crash; the writer
	// gets in once the dead reader's lease lapses.
	got := make(chan time.Duration, 1)
	go func() {
		l, err := rw.LockContext(ctxT(t))
		if !assert.NoError(t, err) {
			got <- -1
			return
		}
		got <- time.Since(killed)
		rw.UnlockContext(l)
	}()
	waitFor(t, 2*time.Second, "the writer to queue", func() bool { return len(lrange(t, rc, keys[2])) == 1 })
	require.NoError(t, rw.RUnlockContext(live))
	var wait time.Duration
	select {
	case wait = <-got:
	case <-time.After(5 * lease):
		t.Fatal("a dead reader kept the lock")
	}
	t.Logf("writer got the lock %v after the reader was killed (lease %v)", wait, lease)
	require.GreaterOrEqual(t, wait, time.Duration(0), "dead reader held the lock for %v, over one lease (%v) plus slack", wait, lease)
	require.LessOrEqual(t, wait, lease+lease/2, "dead reader held the lock for %v, over one lease (%v) plus slack", wait, lease)
}

// A writer whose wait ends leaves the queue at once, so readers are no
// longer held back by it, and nothing is left behind.
func TestRWMutexCancelledWriterLeaves(t *testing.T) {
	c := newClient(t)
	rc := newRueidis(t)
	keys := rwKeys(prefixOf(t, c), "cancel")
	rw := c.NewRWMutex("cancel")
	l, err := rw.RLockContext(ctxT(t))
	require.NoError(t, err)
	before := hgetall(t, rc, keys[0])
	short, cancel := context.WithTimeout(ctxT(t), 150*time.Millisecond)
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		_, err := rw.LockContext(short)
		errc <- err
	}()
	waitFor(t, 2*time.Second, "the writer to queue", func() bool { return len(lrange(t, rc, keys[2])) == 1 })
	_, ok, _ := rw.TryRLockContext(ctxT(t))
	require.False(t, ok, "a new reader overtook a waiting writer")
	require.ErrorIs(t, <-errc, context.DeadlineExceeded, "wait ended by its deadline")
	q := lrange(t, rc, keys[2])
	require.Empty(t, q, "queue after a cancelled writer: %q", q)
	require.Equal(t, int64(0), zcard(t, rc, keys[3]), "queue after a cancelled writer: %q", q)
	after := hgetall(t, rc, keys[0])
	require.Equal(t, fmt.Sprint(before), fmt.Sprint(after), "hash changed by a cancelled writer: %v -> %v", before, after)
	l2, ok, err := rw.TryRLockContext(ctxT(t))
	require.NoError(t, err, "reader still held back after the writer left")
	require.True(t, ok, "reader still held back after the writer left")
	rw.RUnlockContext(l2)
	rw.RUnlockContext(l)
}

// Events carry the kind and mode; a fixed lease (WithLeaseTime) expires the
// hold and cancels its lock context with ErrLockLost.
func TestRWMutexEventsAndLeaseTime(t *testing.T) {
	var mu sync.Mutex
	var got []string
	rec := func(s string) {
		mu.Lock()
		got = append(got, s)
		mu.Unlock()
	}
	c := newClient(t, dsync.WithObserver(dsync.Observer{
		AcquireDone: func(_ context.Context, e dsync.AcquireDone) {
			rec(fmt.Sprintf("acquired %s %s %v", e.Kind, e.Mode, e.Acquired))
		},
		Released: func(_ context.Context, e dsync.Released) { rec(fmt.Sprintf("released %s %s", e.Kind, e.Mode)) },
		Lost:     func(e dsync.Lost) { rec(fmt.Sprintf("lost %s %s", e.Kind, e.Mode)) },
	}))
	rw := c.NewRWMutex("ev")
	l, err := rw.RLockContext(ctxT(t))
	require.NoError(t, err)
	rw.RUnlockContext(l)
	f := c.NewFairMutex("ev", dsync.WithLeaseTime(100*time.Millisecond))
	lf, err := f.LockContext(ctxT(t))
	require.NoError(t, err)
	short := c.NewRWMutex("ev2", dsync.WithLeaseTime(100*time.Millisecond))
	lw, err := short.LockContext(ctxT(t))
	require.NoError(t, err)
	for _, l := range []context.Context{lf, lw} {
		select {
		case <-l.Done():
		case <-time.After(2 * time.Second):
			t.Fatal("fixed lease did not expire")
		}
		require.ErrorIs(t, context.Cause(l), dsync.ErrLockLost, "cause")
	}
	// Expired in Redis too (the local clock ends a hold a little early, by
	// the drift allowance): others get in.
	waitFor(t, time.Second, "the fair mutex to expire", func() bool {
		_, ok, err := c.NewFairMutex("ev").TryLockContext(ctxT(t))
		return ok && err == nil
	})
	waitFor(t, time.Second, "the rw mutex to expire", func() bool {
		_, ok, err := c.NewRWMutex("ev2").TryRLockContext(ctxT(t))
		return ok && err == nil
	})
	mu.Lock()
	defer mu.Unlock()
	want := []string{
		"acquired rw_mutex read true", "released rw_mutex read",
		"acquired fair_mutex  true", "acquired rw_mutex write true",
	}
	require.GreaterOrEqual(t, len(got), 6, "events %q, want %q then two losses", got, want)
	require.Equal(t, fmt.Sprint(want), fmt.Sprint(got[:4]), "events %q, want %q then two losses", got, want)
	require.Contains(t, []string{"[lost fair_mutex  lost rw_mutex write]", "[lost rw_mutex write lost fair_mutex ]"}, fmt.Sprint(got[4:6]), "loss events %q", got[4:])
}
