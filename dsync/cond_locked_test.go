package dsync_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
)

func init() {
	childRoles["condlockconsumer"] = childCondLockConsumer
}

// lockConsume is condConsume as code written for sync.Cond has it: Lock,
// WaitLocked while the list <prefix>:q is empty, pop one item, Unlock;
// until it pops "stop". It returns the items it popped.
func lockConsume(c *dsync.Client, rc rueidis.Client, prefix string) (n int, err error) {
	m := c.NewMutex("lockpc")
	cd := c.NewCond(m)
	ctx := context.Background()
	for {
		m.Lock()
		var item string
		for {
			item, err = rc.Do(ctx, rc.B().Lpop().Key(prefix+":q").Build()).ToString()
			if !rueidis.IsRedisNil(err) {
				break
			}
			if err = cd.WaitLocked(ctx); err != nil {
				break
			}
		}
		m.Unlock()
		if err != nil || item == "stop" {
			return n, err
		}
		n++
	}
}

// childCondLockConsumer: lockConsume, adding what it popped to
// <prefix>:consumed.
func childCondLockConsumer(c *dsync.Client, rc rueidis.Client, prefix string) int {
	n, err := lockConsume(c, rc, prefix)
	rc.Do(context.Background(), rc.B().Incrby().Key(prefix+":consumed").Increment(int64(n)).Build())
	if err != nil {
		fmt.Fprintln(os.Stderr, "consumer:", err)
		return 1
	}
	return 0
}

// TestCondWaitLockedProcesses: m.Lock(); for !ready() { cd.WaitLocked(ctx) };
// m.Unlock() works across processes: a producer pushes 300 items one by
// one (Lock, push, Unlock, Signal) to a consumer in another process and
// one in its own, both written as sync.Cond code is; every item is
// consumed and both consumers stop (a lost signal leaves one asleep, and
// the test's deadline fails it).
func TestCondWaitLockedProcesses(t *testing.T) {
	c := newClient(t)
	prefix := prefixOf(t, c)
	rc := newRueidis(t)
	cmd := startChild(t, "condlockconsumer", prefix)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	local := make(chan error, 1)
	var localN int
	go func() {
		n, err := lockConsume(c, rc, prefix)
		localN = n
		local <- err
	}()
	m := c.NewMutex("lockpc")
	cd := c.NewCond(m)
	ctx := ctxT(t)
	push := func(item string) {
		m.Lock()
		err := rc.Do(ctx, rc.B().Rpush().Key(prefix+":q").Element(item).Build()).Error()
		m.Unlock()
		require.NoError(t, err)
		require.NoError(t, cd.Signal(ctx))
	}
	const items = 300
	for i := 0; i < items; i++ {
		push(fmt.Sprint(i))
	}
	push("stop")
	push("stop")
	require.NoError(t, <-local)
	require.NoError(t, cmd.Wait(), "consumer process")
	remote, err := rc.Do(ctx, rc.B().Get().Key(prefix+":consumed").Build()).AsInt64()
	require.NoError(t, err)
	require.Equal(t, int64(items), remote+int64(localN), "items consumed")
	t.Logf("%d items: %d consumed in the other process, %d here", items, remote, localN)
}

// TestCondWaitLocked: WaitLocked releases the Lock hold while it waits (a
// Client of another process takes the lock, makes the condition true and
// signals), and returns with the lock held again, which Unlock releases.
// Before WaitLocked, the same code could only call Wait, which refuses a
// context that carries no lock context: ErrWrongContext.
func TestCondWaitLocked(t *testing.T) {
	c := newClient(t)
	c2 := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefixOf(t, c)))
	ctx := ctxT(t)
	m, m2 := c.NewMutex("ready"), c2.NewMutex("ready")
	cd, cd2 := c.NewCond(m), c2.NewCond(m2)

	m.Lock()
	_, err := cd.Wait(ctx)
	require.ErrorIs(t, err, dsync.ErrWrongContext, "Wait with a Lock hold")
	require.ErrorContains(t, err, "WaitLocked", "the error does not point to WaitLocked")
	m.Unlock()

	var ready atomic.Bool
	waits := 0
	done := make(chan error, 1)
	go func() {
		m.Lock()
		for !ready.Load() {
			waits++
			if err := cd.WaitLocked(ctx); err != nil {
				m.Unlock()
				done <- err
				return
			}
		}
		_, ok, err := m2.TryLockContext(ctx) // held again by this process
		if err == nil && ok {
			err = errors.New("the lock was free after WaitLocked returned")
		}
		m.Unlock()
		done <- err
	}()
	waitFor(t, 5*time.Second, "the waiter to register", func() bool { return len(condWaiters(t, c2, "ready")) == 1 })
	m2.Lock() // free: WaitLocked released it
	ready.Store(true)
	require.NoError(t, cd2.Signal(ctx))
	m2.Unlock()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter did not return")
	}
	require.Equal(t, 1, waits)
	require.True(t, m2.TryLock(), "Unlock after WaitLocked left the lock held")
	m2.Unlock()
	requireNoCondKeysOf(t, prefixOf(t, c), "ready")
}

// TestCondWaitLockedEnds: a WaitLocked whose ctx ends returns its error
// with the lock held again (another Client cannot take it; Unlock frees
// it) and leaves no waiter behind.
func TestCondWaitLockedEnds(t *testing.T) {
	c := newClient(t)
	c2 := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefixOf(t, c)))
	m := c.NewMutex("ends")
	cd := c.NewCond(m)
	m.Lock()
	short, cancel := context.WithTimeout(ctxT(t), 100*time.Millisecond)
	defer cancel()
	err := cd.WaitLocked(short)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorContains(t, err, `cond "ends"`)
	require.False(t, c2.NewMutex("ends").TryLock(), "the lock is not held after WaitLocked returned")
	m.Unlock()
	other := c2.NewMutex("ends")
	require.True(t, other.TryLock(), "Unlock did not free the lock")
	other.Unlock()
	require.Empty(t, condWaiters(t, c2, "ends"))
}

// TestCondWaitLockedMisuse: without a Lock hold WaitLocked returns
// ErrNotHeld naming the Cond and saying what to do, and changes nothing; a
// hold taken by LockContext is pointed to Wait, and stays held.
func TestCondWaitLockedMisuse(t *testing.T) {
	c := newClient(t)
	ctx := ctxT(t)
	m := c.NewMutex("misuse")
	cd := c.NewCond(m)
	err := cd.WaitLocked(ctx)
	require.ErrorIs(t, err, dsync.ErrNotHeld)
	require.ErrorContains(t, err, `cond "misuse"`)
	require.ErrorContains(t, err, "take it with Lock first")

	lctx, err := m.LockContext(ctx)
	require.NoError(t, err)
	err = cd.WaitLocked(ctx)
	require.ErrorIs(t, err, dsync.ErrNotHeld)
	require.ErrorContains(t, err, "pass its lock context to Wait")
	require.NoError(t, lctx.Err(), "the LockContext hold was released")
	require.NoError(t, m.UnlockContext(lctx))

	done, cancel := context.WithCancel(ctx)
	cancel()
	m.Lock()
	require.ErrorIs(t, cd.WaitLocked(done), context.Canceled)
	m.Unlock() // still held through Lock: no panic
	//lint:ignore SA1012 a nil context is the misuse under test
	require.ErrorIs(t, cd.WaitLocked(nil), dsync.ErrInvalidArgument)
	require.Empty(t, condWaiters(t, c, "misuse"))
}

// requireNoCondKeysOf fails if a key of the Cond of the Mutex name is left.
func requireNoCondKeysOf(t *testing.T, prefix, name string) {
	t.Helper()
	rc := newRueidis(t)
	waitFor(t, 5*time.Second, "the Cond's keys to go", func() bool {
		left, err := rc.Do(context.Background(), rc.B().Keys().Pattern(prefix+":{"+name+"}:cond*").Build()).AsStrSlice()
		require.NoError(t, err)
		return len(left) == 0
	})
}
