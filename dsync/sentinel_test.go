package dsync_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/dsync/dsync/internal/redistest"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
)

// sentinelRueidis returns a rueidis client that finds the master through
// the package's sentinels, closed when t ends.
func sentinelRueidis(t testing.TB) rueidis.Client {
	t.Helper()
	rc, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress:  sentinel(t).Addrs(),
		Sentinel:     rueidis.SentinelOption{MasterSet: redistest.MasterSet},
		DisableCache: true,
	})
	require.NoError(t, err)
	t.Cleanup(rc.Close)
	return rc
}

// TestSentinelFailover: a SENTINEL FAILOVER with a holder and a waiter
// wedges neither. The holder keeps the lock or loses it with ErrLockLost,
// the waiter gets it, and new acquisitions work on the new master.
func TestSentinelFailover(t *testing.T) {
	st := sentinel(t)
	prefix := testPrefix(t)
	const lease = 1500 * time.Millisecond
	a := newClientOn(t, sentinelRueidis(t), dsync.WithKeyPrefix(prefix), dsync.WithLease(lease))
	b := newClientOn(t, sentinelRueidis(t), dsync.WithKeyPrefix(prefix), dsync.WithLease(lease))
	ctx := ctxT(t)

	held, err := a.NewMutex("s").LockContext(ctx)
	require.NoError(t, err)
	type result struct {
		ctx context.Context
		err error
	}
	waiter := make(chan result, 1)
	go func() {
		// Errors during the failover are retried, as a caller would.
		for {
			l, err := b.NewMutex("s").LockContext(ctx)
			if err == nil || ctx.Err() != nil {
				waiter <- result{l, err}
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	waitSubscribed(t, sentinelRueidis(t), prefix+":{s}:mutex:ch") // the waiter is waiting
	start := time.Now()
	next, err := st.Failover(20 * time.Second)
	require.NoError(t, err)
	t.Logf("failover to %s took %v", next.Addr, time.Since(start))

	// Give the holder two leases to show whether it survived.
	select {
	case <-held.Done():
		require.ErrorIs(t, context.Cause(held), dsync.ErrLockLost, "holder's context")
		t.Log("the holder lost the lock in the failover")
	case <-time.After(2 * lease):
		t.Log("the holder kept the lock through the failover")
	}
	if err := a.NewMutex("s").UnlockContext(held); !errors.Is(err, dsync.ErrNotHeld) {
		require.NoError(t, err, "holder's unlock")
	}
	var got result
	select {
	case got = <-waiter:
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter is wedged after the failover")
	}
	require.NoError(t, got.err)
	require.NoError(t, b.NewMutex("s").UnlockContext(got.ctx))
	// New acquisitions go to the new master.
	l, ok, err := a.NewMutex("after").TryLockContext(ctx)
	require.True(t, ok, "acquisition after the failover")
	require.NoError(t, err, "acquisition after the failover")
	v, err := next.Do(t, "EXISTS", prefix+":{after}:mutex").AsInt64()
	require.NoError(t, err, "the lock is not on the new master %s", next.Addr)
	require.Equal(t, int64(1), v, "the lock is not on the new master %s", next.Addr)
	a.NewMutex("after").UnlockContext(l)
}
