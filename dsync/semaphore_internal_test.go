package dsync

import (
	"context"
	"testing"
	"time"

	"github.com/dsync/dsync/internal/redistest"
	"github.com/stretchr/testify/require"
)

func semHoldsLen(c *Client) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, byOwner := range c.semHolds {
		n += len(byOwner)
	}
	return n
}

// TestSemaphoreHoldsForgotten: the shared record of acquisitions lets one
// Semaphore value release another's, and keeps nothing once the holds end,
// by release, loss or Close.
func TestSemaphoreHoldsForgotten(t *testing.T) {
	rc := redistest.Start(t).Client(t)
	c, err := NewClient(rc, WithKeyPrefix("internal"))
	require.NoError(t, err)
	defer c.Close()
	ctx := context.Background()
	s1, s2 := c.NewSemaphore("h", 3), c.NewSemaphore("h", 3)
	l, err := s1.Acquire(ctx, 2)
	require.NoError(t, err)
	require.Equal(t, 1, semHoldsLen(c), "acquisition not recorded")
	require.NoError(t, s2.Release(l, 2))
	require.Error(t, l.Err(), "release through another value did not cancel the lock context")
	require.Eventually(t, func() bool { return semHoldsLen(c) == 0 }, 2*time.Second, time.Millisecond, "released acquisition still recorded")
	_, err = s1.Acquire(ctx, 1)
	require.NoError(t, err)
	_, err = s2.Acquire(WithOwner(ctx), 1)
	require.NoError(t, err)
	c.Close()
	require.Eventually(t, func() bool { return semHoldsLen(c) == 0 }, 2*time.Second, time.Millisecond, "holds ended by Close still recorded")
}
