package dsync_test

import (
	"context"
	"strings"
	"testing"

	"github.com/dsync/dsync/dsync"
	"github.com/stretchr/testify/require"
)

// TestCondBadInput: a context that does not hold the lock, a re-entered
// lock, nil and invalid arguments, a closed Client.
func TestCondBadInput(t *testing.T) {
	c := newClient(t)
	ctx := ctxT(t)
	m := c.NewMutex("bad")
	cd := c.NewCond(m)
	_, err := cd.Wait(ctx)
	require.ErrorIs(t, err, dsync.ErrNotHeld, "a context without a lock")
	other, err := c.NewMutex("other").LockContext(ctx)
	require.NoError(t, err)
	_, err = cd.Wait(other)
	require.ErrorIs(t, err, dsync.ErrNotHeld, "the lock context of another Mutex")
	lctx, err := m.LockContext(ctx)
	require.NoError(t, err)
	again, err := m.LockContext(lctx)
	require.NoError(t, err)
	_, err = cd.Wait(again)
	require.ErrorIs(t, err, dsync.ErrInvalidArgument, "a re-entered lock")
	require.NoError(t, m.UnlockContext(again))
	require.NoError(t, lctx.Err(), "the failed Wait left the lock held")
	require.NoError(t, m.UnlockContext(lctx))
	_, err = cd.Wait(lctx)
	require.ErrorIs(t, err, dsync.ErrNotHeld, "a released lock context")
	//lint:ignore SA1012 a nil context is the misuse under test
	_, err = cd.Wait(nil)
	require.ErrorIs(t, err, dsync.ErrInvalidArgument)
	require.ErrorIs(t, c.NewCond(nil).Signal(ctx), dsync.ErrInvalidArgument)
	for _, name := range []string{"", strings.Repeat("n", dsync.MaxNameLen+1)} {
		bad := c.NewCond(c.NewMutex(name))
		require.ErrorIs(t, bad.Signal(ctx), dsync.ErrInvalidArgument)
		require.ErrorIs(t, bad.Broadcast(ctx), dsync.ErrInvalidArgument)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	require.ErrorIs(t, cd.Signal(cctx), context.Canceled)
	require.Empty(t, condWaiters(t, c, "bad"))
	lctx, err = m.LockContext(ctx)
	require.NoError(t, err)
	require.NoError(t, c.Close())
	_, err = cd.Wait(lctx)
	require.ErrorIs(t, err, dsync.ErrClosed)
	require.ErrorIs(t, cd.Signal(ctx), dsync.ErrClosed)
	requireNoCondKeys(t, newRueidis(t), prefixOf(t, c))
}
