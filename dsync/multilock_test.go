package dsync_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMultiLockClusterAllOrNone: members on three different masters are
// held together, and a wait ended by ctx leaves every member free.
func TestMultiLockClusterAllOrNone(t *testing.T) {
	prefix := testPrefix(t)
	c := newClientOn(t, clusterRueidis(t), dsync.WithKeyPrefix(prefix))
	names := namesOnMasters(t, prefix)
	ml := c.NewMultiLock(names)
	ctx := ctxT(t)
	lctx, err := ml.LockContext(ctx)
	require.NoError(t, err)
	_, ok := dsync.OwnerOf(lctx)
	require.True(t, ok, "no owner in the lock context")
	for _, n := range names {
		_, ok, err := c.NewMutex(n).TryLockContext(ctx)
		require.False(t, ok, "member %q free while the MultiLock holds it", n)
		require.NoError(t, err, "member %q free while the MultiLock holds it", n)
	}
	require.NoError(t, ml.UnlockContext(lctx))
	require.Error(t, lctx.Err(), "lock context after release")
	require.NotErrorIs(t, context.Cause(lctx), dsync.ErrLockLost, "lock context after release")
	require.ErrorIs(t, ml.UnlockContext(lctx), dsync.ErrNotHeld, "second unlock")

	// Another owner holds the member taken last: the wait ends with ctx,
	// and the members taken before it are released again.
	ordered := append([]string(nil), names...)
	last := ordered[0]
	for _, n := range ordered {
		if prefix+":{"+n+"}:mutex" > prefix+":{"+last+"}:mutex" {
			last = n
		}
	}
	block, err := c.NewMutex(last).LockContext(dsync.WithOwner(ctx))
	require.NoError(t, err)
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_, err = ml.LockContext(short)
	require.ErrorIs(t, err, context.DeadlineExceeded, "blocked MultiLock")
	for _, n := range names {
		if n == last {
			continue
		}
		l, ok, err := c.NewMutex(n).TryLockContext(ctx)
		require.True(t, ok, "member %q left held after a failed MultiLock", n)
		require.NoError(t, err, "member %q left held after a failed MultiLock", n)
		c.NewMutex(n).UnlockContext(l)
	}
	c.NewMutex(last).UnlockContext(block)

	_, err = dsync.NewMultiLock().LockContext(ctx)
	require.ErrorIs(t, err, dsync.ErrInvalidArgument, "empty MultiLock")
}

// TestMultiLockOppositeOrder: two Clients lock overlapping sets given in
// opposite orders; with a global order nobody deadlocks and nobody shares.
func TestMultiLockOppositeOrder(t *testing.T) {
	prefix := testPrefix(t)
	sets := [][]string{{"a", "b", "c"}, {"c", "b", "a"}, {"b", "c"}}
	var inside [3]atomic.Int32 // holders of a, b, c
	idx := map[string]int{"a": 0, "b": 1, "c": 2}
	ctx, cancel := context.WithTimeout(ctxT(t), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for i, set := range sets {
		c := newClientOn(t, clusterRueidis(t), dsync.WithKeyPrefix(prefix))
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ml := c.NewMultiLock(set)
				for it := 0; it < 15; it++ {
					lctx, err := ml.LockContext(ctx)
					if !assert.NoError(t, err, "set %d (deadlock?)", i) {
						return
					}
					for _, n := range set {
						v := inside[idx[n]].Add(1)
						assert.Equal(t, int32(1), v, "%d holders of %q", v, n)
					}
					time.Sleep(100 * time.Microsecond)
					for _, n := range set {
						inside[idx[n]].Add(-1)
					}
					assert.NoError(t, ml.UnlockContext(lctx))
				}
			}()
		}
	}
	wg.Wait()
}

// TestMultiLockMemberLost: a member whose fixed lease runs out cancels the
// MultiLock's context with ErrLockLost.
func TestMultiLockMemberLost(t *testing.T) {
	c := newClient(t)
	ml := dsync.NewMultiLock(c.NewMutex("long"), c.NewMutex("short", dsync.WithLeaseTime(150*time.Millisecond)))
	lctx, err := ml.LockContext(ctxT(t))
	require.NoError(t, err)
	waitFor(t, 3*time.Second, "the lost member to cancel the MultiLock", func() bool { return lctx.Err() != nil })
	require.ErrorIs(t, context.Cause(lctx), dsync.ErrLockLost, "cause")
	// Releasing still releases the member that is held. The lost one
	// reports ErrNotHeld, or nil if its key had not quite expired in Redis
	// yet (the local lease clock runs out first, by design).
	if err := ml.UnlockContext(lctx); !errors.Is(err, dsync.ErrNotHeld) {
		require.NoError(t, err, "unlock after a loss")
	}
	l, ok, err := c.NewMutex("long").TryLockContext(ctxT(t))
	require.True(t, ok, "the held member was not released")
	require.NoError(t, err, "the held member was not released")
	c.NewMutex("long").UnlockContext(l)
}

func TestMultiLockLocker(t *testing.T) {
	c := newClient(t)
	var l sync.Locker = c.NewMultiLock([]string{"x", "y"})
	l.Lock()
	got := make(chan struct{})
	go func() {
		l.Lock()
		close(got)
	}()
	select {
	case <-got:
		t.Fatal("second Lock did not block")
	case <-time.After(50 * time.Millisecond):
	}
	l.Unlock()
	<-got
	l.Unlock()
	require.Panics(t, l.Unlock, "Unlock of an unlocked MultiLock did not panic")
}
