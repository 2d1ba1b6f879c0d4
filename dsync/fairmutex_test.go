package dsync_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
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

func init() {
	childRoles["fairwaiter"] = childFairWaiter
}

// fairKeys returns the lock, queue and places keys of fair mutex name.
func fairKeys(prefix, name string) []string {
	k := prefix + ":{" + name + "}:fair"
	return []string{k, k + ":queue", k + ":places"}
}

func lrange(t testing.TB, rc rueidis.Client, key string) []string {
	t.Helper()
	v, err := rc.Do(context.Background(), rc.B().Lrange().Key(key).Start(0).Stop(-1).Build()).AsStrSlice()
	require.NoError(t, err)
	return v
}

func zcard(t testing.TB, rc rueidis.Client, key string) int64 {
	t.Helper()
	n, err := rc.Do(context.Background(), rc.B().Zcard().Key(key).Build()).AsInt64()
	require.NoError(t, err)
	return n
}

func getStr(t testing.TB, rc rueidis.Client, key string) string {
	t.Helper()
	v, err := rc.Do(context.Background(), rc.B().Get().Key(key).Build()).ToString()
	if !rueidis.IsRedisNil(err) {
		require.NoError(t, err)
	}
	return v
}

// TestFairMutexBasic: what TestLockContract does not cover (its sync.Locker
// side through one value, and a bad name).
func TestFairMutexBasic(t *testing.T) {
	c := newClient(t)
	f := c.NewFairMutex("basic")
	var l sync.Locker = f
	l.Lock()
	require.False(t, f.TryLock(), "TryLock on a held FairMutex succeeded")
	l.Unlock()
	require.Panics(t, l.Unlock, "Unlock of an unlocked FairMutex did not panic")
	_, err := c.NewFairMutex("").LockContext(ctxT(t))
	require.ErrorIs(t, err, dsync.ErrInvalidArgument, "empty name")
}

// A waiter whose context ends leaves the queue at once and leaves nothing
// behind; TryLock does not jump the queue.
func TestFairMutexCancelledWaiterLeaves(t *testing.T) {
	c := newClient(t)
	rc := newRueidis(t)
	keys := fairKeys(prefixOf(t, c), "cancel")
	f := c.NewFairMutex("cancel")
	hctx, err := f.LockContext(ctxT(t))
	require.NoError(t, err)
	before := getStr(t, rc, keys[0])
	short, cancel := context.WithTimeout(ctxT(t), 150*time.Millisecond)
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		_, err := f.LockContext(short)
		errc <- err
	}()
	waitFor(t, 2*time.Second, "the waiter to queue", func() bool { return len(lrange(t, rc, keys[1])) == 1 })
	require.ErrorIs(t, <-errc, context.DeadlineExceeded, "wait ended by its deadline")
	// The wait leaves the queue (at once, or, when Redis does not answer
	// within its budget, cleanupGrace, in the background: on a busy
	// machine the call returned first), not by its place's lapse: the
	// place lasts a lease (30 s), the check 10 s.
	waitFor(t, 10*time.Second, "the cancelled waiter's place to leave the queue", func() bool {
		return len(lrange(t, rc, keys[1])) == 0 && zcard(t, rc, keys[2]) == 0
	})
	require.Equal(t, before, getStr(t, rc, keys[0]), "lock value changed by a cancelled wait")
	// A queued waiter makes TryLock fail even on a free lock.
	queued := make(chan error, 1)
	go func() {
		l, err := f.LockContext(ctxT(t))
		if err == nil {
			err = f.UnlockContext(l)
		}
		queued <- err
	}()
	waitFor(t, 2*time.Second, "the second waiter to queue", func() bool { return len(lrange(t, rc, keys[1])) == 1 })
	require.NoError(t, f.UnlockContext(hctx))
	require.NoError(t, <-queued)
	q := lrange(t, rc, keys[1])
	require.Empty(t, q, "queue not empty at the end: %q", q)
}

// childFairWaiter: for each line "<id>" on stdin, start a goroutine that
// locks the fair mutex DSYNC_TEST_NAME, appends id to the list
// <prefix>:order, and unlocks. Exits when stdin closes and all are done.
func childFairWaiter(c *dsync.Client, rc rueidis.Client, prefix string) int {
	f := c.NewFairMutex(os.Getenv("DSYNC_TEST_NAME"))
	var wg sync.WaitGroup
	failed := make(chan struct{}, 1)
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		id := strings.TrimSpace(sc.Text())
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := fairTurn(f, rc, prefix+":order", id); err != nil {
				fmt.Fprintln(os.Stderr, err)
				select {
				case failed <- struct{}{}:
				default:
				}
			}
		}()
	}
	wg.Wait()
	if len(failed) > 0 {
		return 1
	}
	return 0
}

func fairTurn(f *dsync.FairMutex, rc rueidis.Client, list, id string) error {
	ctx := context.Background()
	l, err := f.LockContext(ctx)
	if err != nil {
		return err
	}
	if err := rc.Do(ctx, rc.B().Rpush().Key(list).Element(id).Build()).Error(); err != nil {
		return err
	}
	return f.UnlockContext(l)
}

// Waiters arrive in a known order from two child processes and this one;
// they must be served in exactly that order.
func TestFairMutexFIFOAcrossProcesses(t *testing.T) {
	const name, waiters = "fifo", 18
	prefix := testPrefix(t)
	rc := newRueidis(t)
	c := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefix))
	keys := fairKeys(prefix, name)
	f := c.NewFairMutex(name)
	hold, err := f.LockContext(ctxT(t))
	require.NoError(t, err)
	var stdins []*os.File
	var cmds []interface{ Wait() error }
	for i := 0; i < 2; i++ {
		cmd := startChild(t, "fairwaiter", prefix, "DSYNC_TEST_NAME="+name)
		r, w, err := os.Pipe()
		require.NoError(t, err)
		cmd.Stdin = r
		require.NoError(t, cmd.Start())
		r.Close()
		stdins = append(stdins, w)
		cmds = append(cmds, cmd)
	}
	var local sync.WaitGroup
	localErr := make(chan error, waiters)
	for i := 0; i < waiters; i++ {
		id := strconv.Itoa(i)
		if src := i % 3; src < 2 {
			_, err := fmt.Fprintln(stdins[src], id)
			require.NoError(t, err)
		} else {
			local.Add(1)
			go func() {
				defer local.Done()
				if err := fairTurn(f, rc, prefix+":order", id); err != nil {
					localErr <- err
				}
			}()
		}
		// The next arrives only once this one is queued: a known order.
		waitFor(t, 5*time.Second, "waiter "+id+" to queue", func() bool { return len(lrange(t, rc, keys[1])) == i+1 })
	}
	for _, w := range stdins {
		w.Close()
	}
	require.NoError(t, f.UnlockContext(hold))
	for _, cmd := range cmds {
		require.NoError(t, cmd.Wait(), "child")
	}
	local.Wait()
	close(localErr)
	for err := range localErr {
		require.NoError(t, err)
	}
	order := lrange(t, rc, prefix+":order")
	violations := 0
	for i, id := range order {
		if id != strconv.Itoa(i) {
			violations++
		}
	}
	t.Logf("FIFO: %d waiters from 3 processes, %d violations, order %v", len(order), violations, order)
	require.Equal(t, waiters, len(order), "served %d of %d waiters with %d FIFO violations: %v", len(order), waiters, violations, order)
	require.Equal(t, 0, violations, "served %d of %d waiters with %d FIFO violations: %v", len(order), waiters, violations, order)
}

// A waiter that is SIGKILLed while queued blocks the queue for at most one
// lease; while it lived, it kept its place past one lease.
func TestFairMutexKilledWaiterDropsOut(t *testing.T) {
	const name, lease = "killed", time.Second
	prefix := testPrefix(t)
	rc := newRueidis(t)
	c := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefix), dsync.WithLease(lease))
	keys := fairKeys(prefix, name)
	f := c.NewFairMutex(name)
	hold, err := f.LockContext(ctxT(t))
	require.NoError(t, err)
	cmd := startChild(t, "fairwaiter", prefix, "DSYNC_TEST_NAME="+name, "DSYNC_TEST_LEASE="+lease.String())
	cmd.Stdin = strings.NewReader("child\n")
	require.NoError(t, cmd.Start())
	defer cmd.Wait()
	defer cmd.Process.Kill()
	waitFor(t, 5*time.Second, "the child to queue", func() bool { return len(lrange(t, rc, keys[1])) == 1 })
	got := make(chan time.Time, 1)
	go func() {
		l, err := f.LockContext(ctxT(t))
		if !assert.NoError(t, err) {
			got <- time.Time{}
			return
		}
		got <- time.Now()
		f.UnlockContext(l)
	}()
	waitFor(t, 2*time.Second, "the local waiter to queue", func() bool { return len(lrange(t, rc, keys[1])) == 2 })
	// Sleep is the point here: a live waiter keeps its place past a lease.
	time.Sleep(lease + lease/2)
	q := lrange(t, rc, keys[1])
	require.Len(t, q, 2, "a live waiter lost its place: queue %q", q)
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	killed := time.Now()
	require.NoError(t, f.UnlockContext(hold))
	var at time.Time
	select {
	case at = <-got:
	case <-time.After(5 * lease):
		t.Fatal("the queue stayed blocked by a dead waiter")
	}
	wait := at.Sub(killed)
	t.Logf("next waiter served %v after the head was killed (lease %v)", wait, lease)
	require.LessOrEqual(t, wait, lease+lease/2, "dead waiter blocked the queue for %v, more than one lease (%v) plus slack", wait, lease)
}

// Mutual exclusion across two Clients, every goroutine queueing in Redis.
func TestFairMutexHammerClients(t *testing.T) {
	prefix := hammerClients(t, 4, 25, func(c *dsync.Client) dsync.ContextLocker { return c.NewFairMutex("hammer") })
	rcv := newRueidis(t)
	keys := fairKeys(prefix, "hammer")
	require.Empty(t, lrange(t, rcv, keys[1]), "queue not empty after every waiter was served")
	require.Equal(t, int64(0), zcard(t, rcv, keys[2]), "queue not empty after every waiter was served")
}
