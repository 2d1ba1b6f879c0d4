package dsync_test

import (
	"context"
	"fmt"
	"os"
	"sort"
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
	childRoles["condconsumer"] = childCondConsumer
	childRoles["condwaiter"] = childCondWaiter
}

// condConsume pops items (up to 16 at a time) from the list <prefix>:q
// under the Mutex "pc", waiting on its Cond while the list is empty, until
// it pops "stop". It returns the items it popped and the Waits it made.
func condConsume(c *dsync.Client, rc rueidis.Client, prefix string) (n, waits int, err error) {
	m := c.NewMutex("pc")
	cd := c.NewCond(m)
	ctx := context.Background()
	for {
		lctx, err := m.LockContext(ctx)
		if err != nil {
			return n, waits, err
		}
		var items []string
		for {
			items, err = rc.Do(ctx, rc.B().Lpop().Key(prefix+":q").Count(16).Build()).AsStrSlice()
			if !rueidis.IsRedisNil(err) && (err != nil || len(items) > 0) {
				break
			}
			waits++
			if lctx, err = cd.Wait(lctx); err != nil {
				return n, waits, fmt.Errorf("wait: %w", err)
			}
		}
		stop := len(items) > 0 && items[len(items)-1] == "stop"
		if stop {
			// One stop each: the others' go back.
			items = items[:len(items)-1]
			for len(items) > 0 && items[len(items)-1] == "stop" {
				rc.Do(ctx, rc.B().Rpush().Key(prefix+":q").Element("stop").Build())
				items = items[:len(items)-1]
			}
		}
		if uerr := m.UnlockContext(lctx); uerr != nil {
			return n, waits, uerr
		}
		if err != nil {
			return n, waits, err
		}
		n += len(items)
		if stop {
			// A stop put back was signalled to this consumer: pass it on.
			return n, waits, cd.Signal(ctx)
		}
	}
}

// childCondConsumer: DSYNC_TEST_CONSUMERS goroutines run condConsume and
// add what they popped to <prefix>:consumed.
func childCondConsumer(c *dsync.Client, rc rueidis.Client, prefix string) int {
	k, _ := strconv.Atoi(os.Getenv("DSYNC_TEST_CONSUMERS"))
	var wg sync.WaitGroup
	var failed atomic.Bool
	for i := 0; i < k; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, waits, err := condConsume(c, rc, prefix)
			rc.Do(context.Background(), rc.B().Incrby().Key(prefix+":waits").Increment(int64(waits)).Build())
			if err != nil {
				fmt.Fprintln(os.Stderr, "consumer:", err)
				failed.Store(true)
			}
			rc.Do(context.Background(), rc.B().Incrby().Key(prefix+":consumed").Increment(int64(n)).Build())
		}()
	}
	wg.Wait()
	if failed.Load() {
		return 1
	}
	return 0
}

// TestCondProducerConsumer: a producer pushes 10,000 items one by one
// (lock, push, unlock, Signal) to 2 consumers in another process and 1 in
// its own; every item is consumed and every consumer stops: a lost signal
// would leave a consumer asleep with its stop item queued (the test's
// deadline fails it). Every 500 items the producer lets the consumers
// drain the list, so that they wait again.
func TestCondProducerConsumer(t *testing.T) {
	c := newClient(t)
	prefix := prefixOf(t, c)
	rc := newRueidis(t)
	cmd := startChild(t, "condconsumer", prefix, "DSYNC_TEST_CONSUMERS=2")
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	local := make(chan error, 1)
	var localN, localWaits int
	go func() {
		n, waits, err := condConsume(c, rc, prefix)
		localN, localWaits = n, waits
		local <- err
	}()
	m := c.NewMutex("pc")
	cd := c.NewCond(m)
	ctx := ctxT(t)
	const items = 10000
	start := time.Now()
	signals := 0
	push := func(items ...string) {
		lctx, err := m.LockContext(ctx)
		require.NoError(t, err)
		require.NoError(t, rc.Do(ctx, rc.B().Rpush().Key(prefix+":q").Element(items...).Build()).Error())
		require.NoError(t, m.UnlockContext(lctx))
		require.NoError(t, cd.Signal(ctx))
		signals++
	}
	for i := 0; i < items; {
		// Batches of 1 to 8 items, one Signal each.
		var batch []string
		for k := 0; k <= i%8 && i < items; k++ {
			batch = append(batch, strconv.Itoa(i))
			i++
			if i%500 == 0 {
				break
			}
		}
		push(batch...)
		if i%500 == 0 {
			waitFor(t, 10*time.Second, "the consumers to drain the list", func() bool {
				n, err := rc.Do(ctx, rc.B().Llen().Key(prefix+":q").Build()).AsInt64()
				return err == nil && n == 0
			})
		}
	}
	for i := 0; i < 3; i++ {
		push("stop")
	}
	require.NoError(t, <-local)
	require.NoError(t, cmd.Wait(), "consumer process")
	took := time.Since(start)
	rwaits, _ := rc.Do(ctx, rc.B().Get().Key(prefix+":waits").Build()).AsInt64()
	remote, err := rc.Do(ctx, rc.B().Get().Key(prefix+":consumed").Build()).AsInt64()
	require.NoError(t, err)
	require.Equal(t, int64(items), remote+int64(localN), "items consumed")
	t.Logf("%d items through 3 consumers in 2 processes in %v (%v per item): %d consumed remotely, %d Signals, %d Waits",
		items, took, took/items, remote, signals, rwaits+int64(localWaits))
	requireNoCondKeys(t, rc, prefix)
}

// requireNoCondKeys fails if a key of the Cond of "pc" is left.
func requireNoCondKeys(t *testing.T, rc rueidis.Client, prefix string) {
	t.Helper()
	waitFor(t, 5*time.Second, "the Cond's keys to go", func() bool {
		left, err := rc.Do(context.Background(), rc.B().Keys().Pattern(prefix+":{*}:cond*").Build()).AsStrSlice()
		require.NoError(t, err)
		return len(left) == 0
	})
}

// condWaiters returns the waiters of the Cond of the Mutex name.
func condWaiters(t testing.TB, c *dsync.Client, name string) []dsync.Waiter {
	sts, err := c.Inspect(context.Background(), name)
	require.NoError(t, err)
	for _, st := range sts {
		if st.Kind == dsync.KindCond {
			return st.Waiters
		}
	}
	return nil
}

// TestCondSignalOrder: Signal wakes the longest-waiting waiter, each woken
// waiter returns with the lock held, and Broadcast wakes all the others.
func TestCondSignalOrder(t *testing.T) {
	c := newClient(t)
	m := c.NewMutex("order")
	cd := c.NewCond(m)
	ctx := ctxT(t)
	woke := make(chan int, 4)
	for i := 0; i < 4; i++ {
		lctx, err := m.LockContext(ctx)
		require.NoError(t, err)
		go func() {
			nctx, err := cd.Wait(lctx)
			if !assert.NoError(t, err) {
				return
			}
			tok, ok := dsync.FencingToken(nctx)
			assert.True(t, ok && tok > 0, "the new lock context has a token")
			woke <- i
			assert.NoError(t, m.UnlockContext(nctx))
		}()
		// One at a time, so the arrival order is known.
		waitFor(t, 5*time.Second, "the waiter to register", func() bool { return len(condWaiters(t, c, "order")) == i+1 })
	}
	for want := 0; want < 2; want++ {
		require.NoError(t, cd.Signal(ctx))
		select {
		case got := <-woke:
			require.Equal(t, want, got, "Signal woke a waiter out of order")
		case <-time.After(5 * time.Second):
			t.Fatal("Signal woke nobody")
		}
	}
	require.NoError(t, cd.Broadcast(ctx))
	got := []int{<-woke, <-woke}
	sort.Ints(got)
	require.Equal(t, []int{2, 3}, got, "Broadcast")
	require.NoError(t, cd.Signal(ctx), "a Signal with nobody waiting")
	select {
	case i := <-woke:
		t.Fatalf("waiter %d woke twice", i)
	default:
	}
	requireNoCondKeys(t, newRueidis(t), prefixOf(t, c))
}

// childCondWaiter: lock the Mutex "dead", Wait on its Cond, print
// "waiting" once registered, and wait until killed.
func childCondWaiter(c *dsync.Client, rc rueidis.Client, prefix string) int {
	m := c.NewMutex("dead")
	lctx, err := m.LockContext(context.Background())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	go func() {
		waitUntil(func() bool {
			sts, _ := c.Inspect(context.Background(), "dead")
			for _, st := range sts {
				if st.Kind == dsync.KindCond && len(st.Waiters) == 1 {
					return true
				}
			}
			return false
		})
		fmt.Println("waiting")
	}()
	_, err = c.NewCond(m).Wait(lctx)
	fmt.Fprintln(os.Stderr, "woke:", err)
	return 1
}

// TestCondDeadWaiterAtHead: the longest waiter's process was SIGKILLed;
// a Signal reaches the live waiter behind it: at once when the dead
// waiter's place has lapsed, and within a lease (and a look) when it had
// not, since the signal passes on from the dead waiter.
func TestCondDeadWaiterAtHead(t *testing.T) {
	for _, lapsed := range []bool{true, false} {
		t.Run(fmt.Sprintf("lapsed=%v", lapsed), func(t *testing.T) {
			prefix := testPrefix(t)
			const lease = time.Second
			cmd := childSaying(t, "waiting", "condwaiter", prefix, "DSYNC_TEST_LEASE="+lease.String())
			c := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefix), dsync.WithLease(lease))
			m := c.NewMutex("dead")
			cd := c.NewCond(m)
			ctx := ctxT(t)
			lctx, err := m.LockContext(ctx)
			require.NoError(t, err)
			woke := make(chan error, 1)
			go func() {
				nctx, err := cd.Wait(lctx)
				if err == nil {
					err = m.UnlockContext(nctx)
				}
				woke <- err
			}()
			waitFor(t, 5*time.Second, "two waiters", func() bool { return len(condWaiters(t, c, "dead")) == 2 })
			require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
			if lapsed {
				waitFor(t, 3*lease, "the dead waiter's place to lapse", func() bool { return len(condWaiters(t, c, "dead")) == 1 })
			}
			signalled := time.Now()
			require.NoError(t, cd.Signal(ctx))
			bound := 500 * time.Millisecond
			if !lapsed {
				bound = lease + lease/3 + 500*time.Millisecond
			}
			select {
			case err := <-woke:
				require.NoError(t, err)
				t.Logf("the live waiter woke %v after the Signal", time.Since(signalled))
			case <-time.After(bound):
				t.Fatalf("the live waiter did not wake within %v of the Signal", bound)
			}
			requireNoCondKeys(t, newRueidis(t), prefix)
		})
	}
}

// TestCondWaitCancelled: a Wait cancelled while waiting returns its
// context's error without the lock and leaves the queue; one cancelled
// while re-acquiring (the lock is held elsewhere) too; a signal that
// reached a waiter as it gave up passes on.
func TestCondWaitCancelled(t *testing.T) {
	c := newClient(t)
	m := c.NewMutex("cancel")
	cd := c.NewCond(m)
	ctx := ctxT(t)

	// While waiting.
	wctx, cancel := context.WithCancel(ctx)
	lctx, err := m.LockContext(wctx)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { _, err := cd.Wait(lctx); done <- err }()
	waitFor(t, 5*time.Second, "the waiter", func() bool { return len(condWaiters(t, c, "cancel")) == 1 })
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	require.Empty(t, condWaiters(t, c, "cancel"), "the cancelled waiter left the queue")
	free, ok, err := m.TryLockContext(ctx)
	require.NoError(t, err)
	require.True(t, ok, "the lock is free after a cancelled Wait")
	require.NoError(t, m.UnlockContext(free))

	// While re-acquiring: the waiter (another Client, so its wait for the
	// lock shows in Inspect) is signalled while the test holds the lock.
	c2 := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefixOf(t, c)))
	m2 := c2.NewMutex("cancel")
	wctx, cancel = context.WithCancel(ctx)
	defer cancel()
	lctx, err = m2.LockContext(wctx)
	require.NoError(t, err)
	go func() { _, err := c2.NewCond(m2).Wait(lctx); done <- err }()
	waitFor(t, 5*time.Second, "the waiter", func() bool { return len(condWaiters(t, c, "cancel")) == 1 })
	held, err := m.LockContext(ctx)
	require.NoError(t, err)
	require.NoError(t, cd.Signal(ctx))
	waitFor(t, 5*time.Second, "the woken waiter to wait for the lock", func() bool {
		sts, err := c.Inspect(ctx, "cancel")
		require.NoError(t, err)
		for _, st := range sts {
			if st.Kind == dsync.KindMutex && len(st.Waiters) == 1 {
				return true
			}
		}
		return false
	})
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	require.NoError(t, held.Err(), "the holder keeps the lock")
	require.NoError(t, m.UnlockContext(held))
	free, ok, err = m2.TryLockContext(ctx)
	require.NoError(t, err)
	require.True(t, ok, "the lock is free: the cancelled Wait holds nothing")
	require.NoError(t, m2.UnlockContext(free))
	requireNoCondKeys(t, newRueidis(t), prefixOf(t, c))
}
