package dsync

import (
	"context"
	"testing"
	"time"

	"github.com/dsync/dsync/internal/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A lock context whose hold's lease clock has run out reports it from Err
// at once, before the Client's clock gets to end the hold (as after a
// process is thawed from a SIGSTOP longer than the lease): Err returns
// Canceled with cause ErrLockLost and Done is closed.
func TestLockContextErrSeesLeaseRunOut(t *testing.T) {
	rc := redistest.Start(t).Client(t)
	c, err := NewClient(rc, WithKeyPrefix("lctx"))
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	m := c.NewMutex("m")
	lctx, err := m.LockContext(context.Background())
	require.NoError(t, err)
	require.NoError(t, lctx.Err(), "a fresh hold")
	h := lctx.(*lockCtx).h
	// The lease clock says the lease ran out a moment ago; the Client's
	// clock would end the hold only at its old deadline, 30 s from now.
	h.mu.Lock()
	h.deadline = time.Now().Add(-time.Millisecond)
	h.mu.Unlock()
	require.ErrorIs(t, lctx.Err(), context.Canceled, "Err after the lease clock ran out")
	assert.ErrorIs(t, context.Cause(lctx), ErrLockLost)
	select {
	case <-lctx.Done():
	default:
		t.Fatal("Done is not closed once Err reported the loss")
	}
	// The hold is gone here; Redis still has the key (only the clock was
	// moved), which the release through Redis takes back.
	tracked := false
	c.clock.each(func(x *hold) { tracked = tracked || x == h })
	assert.False(t, tracked, "the lost hold is still tracked")
	require.NoError(t, m.UnlockContext(lctx))
}
