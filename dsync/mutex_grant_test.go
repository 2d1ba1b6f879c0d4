package dsync_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/dsync/dsync/dsync"
	"github.com/dsync/dsync/internal/scripts"
	"github.com/stretchr/testify/require"
)

// A Mutex released while another Client's goroutine waits for it is
// granted to that wait in the release, in one hop: the waiter holds it as
// the release's message comes, with a token above the holder's, and sends
// no acquire of its own after it (it used to be woken to try again: a
// second round trip), and its observer sees AcquireDone.Granted. The lock
// is then the waiter's in Redis: the old holder cannot take it until the
// waiter releases it.
func TestMutexGrantOneHop(t *testing.T) {
	prefix := testPrefix(t)
	ctx := ctxT(t)
	a := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefix))
	ma := a.NewMutex("grant")
	held, err := ma.LockContext(ctx)
	require.NoError(t, err)
	tokA, _ := dsync.FencingToken(held)

	rec := &scriptCalls{Client: newRueidis(t)}
	parked := make(chan struct{}, 1)
	var waits atomic.Int32
	done := make(chan dsync.AcquireDone, 1)
	b := newClientOn(t, rec, dsync.WithKeyPrefix(prefix),
		dsync.WithObserver(dsync.Observer{AcquireDone: func(_ context.Context, e dsync.AcquireDone) { done <- e }}),
		dsync.WithWaitParked(func(_ string, p bool) {
			if p {
				waits.Add(1)
				select {
				case parked <- struct{}{}:
				default:
				}
			}
		}))
	mb := b.NewMutex("grant")
	got := make(chan context.Context, 1)
	go func() {
		l, err := mb.LockContext(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	select {
	case <-parked: // subscribed, registered and blocked
	case <-ctx.Done():
		t.Fatal("the waiter never blocked")
	}
	rec.reset()
	require.NoError(t, ma.UnlockContext(held))
	var lb context.Context
	select {
	case lb = <-got:
	case <-ctx.Done():
		t.Fatal("the waiter never got the lock")
	}
	require.NotNil(t, lb)
	for _, id := range scriptIDs(scripts.MutexAcquire) {
		require.NotContains(t, rec.names(), id, "the waiter sent an acquire after the release: not granted in one hop")
	}
	require.EqualValues(t, 1, waits.Load(), "the waiter blocked once: the release's message ended its wait")
	// The observer is told it waited: granted.
	e := <-done
	require.True(t, e.Acquired && e.Granted && !e.Queued, "AcquireDone %+v", e)
	tokB, ok := dsync.FencingToken(lb)
	require.True(t, ok)
	require.Greater(t, tokB, tokA)
	_, ok, err = ma.TryLockContext(ctx)
	require.NoError(t, err)
	require.False(t, ok, "the granted lock is the waiter's in Redis")
	require.NoError(t, mb.UnlockContext(lb))
	again, ok, err := ma.TryLockContext(ctx)
	require.NoError(t, err)
	require.True(t, ok, "free after the grantee's release")
	require.NoError(t, ma.UnlockContext(again))
}
