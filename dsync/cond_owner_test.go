package dsync_test

import (
	"context"
	"testing"

	"github.com/dsync/dsync/dsync"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCondWaitKeepsTheOwner (issue 38, item 5): Wait re-acquires the Mutex
// for the owner of the lock context it was given, also when the context
// LockContext was called with carried no owner (LockContext made one).
func TestCondWaitKeepsTheOwner(t *testing.T) {
	c := newClient(t)
	ctx := ctxT(t)
	for _, tc := range []struct {
		what string
		ctx  context.Context
	}{
		{"no owner in the context", ctx},
		{"WithOwner", dsync.WithOwner(ctx)},
	} {
		t.Run(tc.what, func(t *testing.T) {
			m := c.NewMutex("cond-owner")
			cd := c.NewCond(m)
			lctx, err := m.LockContext(tc.ctx)
			require.NoError(t, err)
			before, ok := dsync.OwnerOf(lctx)
			require.True(t, ok)
			done := make(chan error, 1)
			go func() {
				// The lock is free only once Wait has registered and
				// released it, so this Signal reaches it.
				l2, err := m.LockContext(ctx)
				if err == nil {
					err = cd.Signal(ctx)
					if uerr := m.UnlockContext(l2); err == nil {
						err = uerr
					}
				}
				done <- err
			}()
			nctx, err := cd.Wait(lctx)
			require.NoError(t, err)
			require.NoError(t, <-done)
			after, ok := dsync.OwnerOf(nctx)
			require.True(t, ok)
			assert.Equal(t, before, after, "Wait re-acquires for the same owner")
			require.NoError(t, m.UnlockContext(nctx))
		})
	}
}
