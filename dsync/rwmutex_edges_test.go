package dsync_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func init() {
	childRoles["rwreaders"] = childRWReaders
}

// waitQueued waits until the rw mutex's writer queue holds n writers.
func waitQueued(t *testing.T, rc rueidis.Client, keys []string, n int) {
	t.Helper()
	waitFor(t, 5*time.Second, fmt.Sprintf("%d queued writer(s)", n), func() bool {
		return len(lrange(t, rc, keys[2])) == n
	})
}

// The only reader takes the write lock ahead of a queued writer: that
// writer cannot get in before the reader leaves, so queueing the upgrade
// behind it deadlocked both until a context ended.
func TestRWMutexUpgradeAheadOfQueuedWriter(t *testing.T) {
	c := newClient(t)
	c2 := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefixOf(t, c)))
	rc := newRueidis(t)
	ctx := ctxT(t)
	keys := rwKeys(prefixOf(t, c), "up")
	rw := c.NewRWMutex("up")
	rctx, err := rw.RLockContext(dsync.WithOwner(ctx))
	require.NoError(t, err)
	wdone := make(chan error, 1)
	go func() {
		wctx, err := c2.NewRWMutex("up").LockContext(ctx)
		if err == nil {
			err = c2.NewRWMutex("up").UnlockContext(wctx)
		}
		wdone <- err
	}()
	waitQueued(t, rc, keys, 1)
	start := time.Now()
	uctx, cancel := context.WithTimeout(rctx, 2*time.Second)
	defer cancel()
	wctx, err := rw.LockContext(uctx)
	require.NoError(t, err, "upgrade with a queued writer = %v after %v, want the write lock", err, time.Since(start))
	t.Logf("upgrade granted in %v ahead of the queued writer", time.Since(start))
	require.NoError(t, rw.UnlockContext(wctx))
	require.NoError(t, rw.RUnlockContext(rctx))
	require.NoError(t, <-wdone, "queued writer after the upgrader left")
}

// With another reader, the upgrade queues; when that reader leaves, the
// upgrader is woken and granted ahead of the writer queued before it.
func TestRWMutexUpgradeAfterOtherReaderLeaves(t *testing.T) {
	c := newClient(t)
	c2 := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefixOf(t, c)))
	rc := newRueidis(t)
	ctx := ctxT(t)
	keys := rwKeys(prefixOf(t, c), "up2")
	rw := c.NewRWMutex("up2")
	uctx, err := rw.RLockContext(dsync.WithOwner(ctx))
	require.NoError(t, err)
	other, err := rw.RLockContext(dsync.WithOwner(ctx))
	require.NoError(t, err)
	wdone := make(chan error, 1)
	go func() {
		wctx, err := c2.NewRWMutex("up2").LockContext(ctx)
		if err == nil {
			err = c2.NewRWMutex("up2").UnlockContext(wctx)
		}
		wdone <- err
	}()
	waitQueued(t, rc, keys, 1)
	type res struct {
		ctx context.Context
		err error
	}
	up := make(chan res, 1)
	go func() {
		l, err := rw.LockContext(uctx)
		up <- res{l, err}
	}()
	waitQueued(t, rc, keys, 2)
	left := time.Now()
	require.NoError(t, rw.RUnlockContext(other))
	select {
	case r := <-up:
		require.NoError(t, r.err, "upgrade")
		t.Logf("upgrade granted %v after the other reader left", time.Since(left))
		require.NoError(t, rw.UnlockContext(r.ctx))
	case <-time.After(2 * time.Second): // the fallback look is lease/3 = 10 s
		t.Fatal("the upgrader was not woken when it became the only reader")
	}
	require.NoError(t, rw.RUnlockContext(uctx))
	require.NoError(t, <-wdone)
}

// Two writers on two Clients take turns without pause; a reader on a third
// gets in at the next write release (phase-fair), instead of waiting out
// its whole deadline through hundreds of writer turns.
func TestRWMutexReaderNotStarvedByWriters(t *testing.T) {
	c := newClient(t)
	prefix := prefixOf(t, c)
	ctx := ctxT(t)
	stop := make(chan struct{})
	var turns atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < 2; i++ {
		wc := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefix))
		wg.Add(1)
		go func() {
			defer wg.Done()
			rw := wc.NewRWMutex("starve")
			for {
				select {
				case <-stop:
					return
				default:
				}
				l, err := rw.LockContext(ctx)
				if !assert.NoError(t, err) {
					return
				}
				turns.Add(1)
				time.Sleep(10 * time.Millisecond) // the writer's work
				if !assert.NoError(t, rw.UnlockContext(l)) {
					return
				}
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()
	waitFor(t, 5*time.Second, "the writers to take turns", func() bool { return turns.Load() > 10 })
	rc := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefix))
	for i := 0; i < 5; i++ {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		start, before := time.Now(), turns.Load()
		l, err := rc.NewRWMutex("starve").RLockContext(rctx)
		waited, during := time.Since(start), turns.Load()-before
		cancel()
		require.NoError(t, err, "reader %d: %v after %v and %d writer turns", i, err, waited, during)
		t.Logf("reader %d got in after %v, %d writer turns", i, waited, during)
		// Phase-fair: at most the turn under way and the one queued before
		// the reader arrived go first.
		assert.LessOrEqual(t, during, int64(3), "reader %d waited through writer turns", i)
		require.NoError(t, rc.NewRWMutex("starve").RUnlockContext(l))
	}
}

// A read lock taken with the write lock's context (a downgrade) survives the
// write lock's release: its lock context stays live, the hold stays in
// Redis, and RUnlockContext releases it.
func TestRWMutexDowngradeThroughLockContext(t *testing.T) {
	c := newClient(t)
	c2 := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefixOf(t, c)))
	ctx := ctxT(t)
	rw := c.NewRWMutex("down")
	wctx, err := rw.LockContext(ctx)
	require.NoError(t, err)
	rctx, err := rw.RLockContext(wctx)
	require.NoError(t, err)
	require.NoError(t, rw.UnlockContext(wctx))
	require.Error(t, wctx.Err(), "the write lock context is live after its release")
	require.NoError(t, rctx.Err(), "read lock context ended with the write lock (cause %v)", context.Cause(rctx))
	other := c2.NewRWMutex("down")
	_, ok, err := other.TryLockContext(ctx)
	require.NoError(t, err, "another writer got in past the downgraded reader")
	require.False(t, ok, "another writer got in past the downgraded reader")
	_, ok, err = other.TryRLockContext(ctx)
	require.NoError(t, err, "another reader kept out after the downgrade")
	require.True(t, ok, "another reader kept out after the downgrade")
	require.NoError(t, rw.RUnlockContext(rctx), "RUnlockContext of the downgraded hold")
	require.Error(t, rctx.Err(), "read lock context live after its release")
}

// A reader whose wait ends leaves nothing behind: no registered or admitted
// reader is left to hold the next writer back.
func TestRWMutexCancelledReaderLeavesNothing(t *testing.T) {
	c := newClient(t)
	c2 := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefixOf(t, c)))
	rc := newRueidis(t)
	ctx := ctxT(t)
	keys := rwKeys(prefixOf(t, c), "rc")
	rw := c.NewRWMutex("rc")
	w1, err := rw.LockContext(ctx)
	require.NoError(t, err)
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_, err = c2.NewRWMutex("rc").RLockContext(short)
	require.ErrorIs(t, err, context.DeadlineExceeded, "reader's wait")
	require.Equal(t, int64(0), zcard(t, rc, keys[4])+zcard(t, rc, keys[5]), "reader places left after a cancelled wait")
	// A later writer is not held back by the reader that left.
	require.NoError(t, rw.UnlockContext(w1))
	_, ok, err := c2.NewRWMutex("rc").TryLockContext(ctx)
	require.NoError(t, err, "writer after the cancelled reader")
	require.True(t, ok, "writer after the cancelled reader")
}

// childRWReaders: DSYNC_TEST_N goroutines take and release read locks of
// "many" until the key <prefix>:stop exists; each hold checks that no
// writer is inside (<prefix>:writing) and that its lock context stays
// live. It prints "reading" once every goroutine held once, and reports
// failures on stderr with exit 1.
func childRWReaders(c *dsync.Client, rc rueidis.Client, prefix string) int {
	n, _ := strconv.Atoi(os.Getenv("DSYNC_TEST_N"))
	return rwReaders(c, rc, prefix, n, func() { fmt.Println("reading") })
}

func rwReaders(c *dsync.Client, rc rueidis.Client, prefix string, n int, ready func()) int {
	ctx := context.Background()
	var wg sync.WaitGroup
	var failed atomic.Bool
	var first sync.WaitGroup
	first.Add(n)
	fail := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, format+"\n", args...)
		failed.Store(true)
	}
	for g := 0; g < n; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rw := c.NewRWMutex("many")
			once := false
			for !failed.Load() {
				if x, _ := rc.Do(ctx, rc.B().Exists().Key(prefix+":stop").Build()).AsInt64(); x == 1 {
					break
				}
				l, err := rw.RLockContext(ctx)
				if err != nil {
					fail("RLockContext: %v", err)
					break
				}
				if w, _ := rc.Do(ctx, rc.B().Get().Key(prefix+":writing").Build()).ToString(); w == "1" {
					fail("a reader held the lock while a writer was inside")
				}
				time.Sleep(time.Millisecond) // the reader's work
				if l.Err() != nil {
					fail("read lock context ended while held: %v", context.Cause(l))
				}
				if err := rw.RUnlockContext(l); err != nil {
					fail("RUnlockContext: %v", err)
				}
				if !once {
					once = true
					first.Done()
				}
			}
			if !once {
				first.Done()
			}
		}()
	}
	first.Wait()
	ready()
	wg.Wait()
	if failed.Load() {
		return 1
	}
	return 0
}

// 1,000 readers in 4 processes (250 each) hammer one RWMutex while a writer
// takes it 5 times: every writer wait is bounded (it waits for the readers
// inside and those admitted before it, not for the stream), no reader is
// inside with the writer, and no reader loses its hold.
func TestRWMutexThousandReadersAndAWriter(t *testing.T) {
	prefix := testPrefix(t)
	c := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefix))
	rc := newRueidis(t)
	ctx := ctxT(t)
	const perProc = 250
	var cmds []*exec.Cmd
	for i := 0; i < 3; i++ {
		cmds = append(cmds, childSaying(t, "reading", "rwreaders", prefix, "DSYNC_TEST_N="+strconv.Itoa(perProc)))
	}
	local := make(chan int, 1)
	ready := make(chan struct{})
	go func() { local <- rwReaders(c, rc, prefix, perProc, func() { close(ready) }) }()
	<-ready
	rw := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefix)).NewRWMutex("many")
	var worst time.Duration
	for i := 0; i < 5; i++ {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		start := time.Now()
		l, err := rw.LockContext(wctx)
		waited := time.Since(start)
		cancel()
		require.NoError(t, err, "writer %d: %v after %v", i, err, waited)
		worst = max(worst, waited)
		require.NoError(t, rc.Do(ctx, rc.B().Set().Key(prefix+":writing").Value("1").Build()).Error())
		time.Sleep(5 * time.Millisecond) // the writer's work, with readers knocking
		require.NoError(t, rc.Do(ctx, rc.B().Del().Key(prefix+":writing").Build()).Error())
		require.NoError(t, rw.UnlockContext(l))
	}
	t.Logf("worst writer wait among 1,000 readers in 4 processes: %v", worst)
	assert.LessOrEqual(t, worst, 3*time.Second, "worst writer wait")
	require.NoError(t, rc.Do(ctx, rc.B().Set().Key(prefix+":stop").Value("1").Build()).Error())
	require.Equal(t, 0, <-local, "a reader in this process failed")
	for _, cmd := range cmds {
		require.NoError(t, cmd.Wait(), "reader process")
	}
}
