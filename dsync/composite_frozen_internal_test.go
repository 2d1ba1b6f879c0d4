package dsync

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/dsync/dsync/internal/redistest"
	"github.com/stretchr/testify/require"
)

// leaseRanOut sets a hold's lease clock in the past without its timer
// firing: what a process frozen (SIGSTOP) past its lease finds when it is
// thawed, before the runtime has run the timers.
func leaseRanOut(t *testing.T, lctx context.Context) {
	t.Helper()
	lc, ok := lctx.(*lockCtx)
	require.True(t, ok, "a member's lock context is a dsync lock context")
	lc.h.mu.Lock()
	lc.h.deadline = time.Now().Add(-time.Second)
	lc.h.mu.Unlock()
}

// onlyHeld is the one hold of a MultiLock or a RedLock (held, under mu).
func onlyHeld[H any](t *testing.T, mu *sync.Mutex, held heldBy[H]) H {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, held, 1, "owners holding it")
	for _, hs := range held {
		require.Len(t, hs, 1, "its holds")
		return hs[0]
	}
	panic("unreachable")
}

// A MultiLock's and a RedLock's lock context report a loss on the first
// look after a member's lease ran out (the member's own Err knows at
// once), as a Mutex's does, not a goroutine later when the member's
// cancellation reaches them: TestFaultChaos/multi saw a MultiLock thawed
// after 2.5 s report itself valid 1.5 s after another process took a
// member. Fails on 3aa5018 (Err nil).
func TestCompositeLockContextSeesLeaseRunOut(t *testing.T) {
	t.Run("MultiLock", func(t *testing.T) {
		s := redistest.Start(t)
		c, err := NewClient(s.Client(t), WithLogger(quiet))
		require.NoError(t, err)
		defer c.Close()
		ml := c.NewMultiLock([]string{"fa", "fb"})
		lctx, err := ml.LockContext(context.Background())
		require.NoError(t, err)
		require.NoError(t, lctx.Err())
		mh := onlyHeld(t, &ml.mu, ml.held)
		leaseRanOut(t, mh.ctxs[1])
		require.Error(t, lctx.Err(), "the MultiLock's lock context on the first look after a member's lease ran out")
		require.ErrorIs(t, context.Cause(lctx), ErrLockLost)
		_ = ml.UnlockContext(lctx)
	})
	t.Run("RedLock", func(t *testing.T) {
		var clients []*Client
		for range 3 {
			s := redistest.Start(t)
			c, err := NewClient(s.Client(t), WithLogger(quiet))
			require.NoError(t, err)
			defer c.Close()
			clients = append(clients, c)
		}
		rl := NewRedLock("fr", clients)
		lctx, err := rl.LockContext(context.Background())
		require.NoError(t, err)
		rh := onlyHeld(t, &rl.mu, rl.held)
		leaseRanOut(t, rh.ctxs[0])
		require.NoError(t, lctx.Err(), "one node of 3 lost: a majority still holds it")
		leaseRanOut(t, rh.ctxs[2])
		require.Error(t, lctx.Err(), "the RedLock's lock context on the first look after a majority's leases ran out")
		require.ErrorIs(t, context.Cause(lctx), ErrLockLost)
		_ = rl.UnlockContext(lctx)
	})
}
