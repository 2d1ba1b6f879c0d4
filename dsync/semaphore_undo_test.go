package dsync_test

import (
	"context"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/stretchr/testify/require"
)

// An owner holds 1 of 2 permits under the watchdog, takes 1 more through a
// Semaphore of the same name with a fixed 500 ms lease, and releases that
// one. The first acquisition keeps its own lease: after 500 ms another
// owner still gets only 1 permit. (The second acquisition used to overwrite
// the owner's expiry, so both permits lapsed after 500 ms while the first
// acquisition's lock context was live: a double grant.)
func TestSemaphoreLaterAcquisitionKeepsEarlierLease(t *testing.T) {
	c := newClient(t)
	other := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefixOf(t, c)))
	ctx := dsync.WithOwner(ctxT(t))
	first, err := c.NewSemaphore("lease", 2).Acquire(ctx, 1)
	require.NoError(t, err)
	short := c.NewSemaphore("lease", 2, dsync.WithLeaseTime(500*time.Millisecond))
	second, err := short.Acquire(ctx, 1)
	require.NoError(t, err)
	require.NoError(t, short.Release(second, 1))
	time.Sleep(700 * time.Millisecond) // past the fixed lease: the fault under test
	require.NoError(t, first.Err(), "first acquisition lost: %v", context.Cause(first))
	_, ok, err := other.NewSemaphore("lease", 2).TryAcquire(ctxT(t), 2)
	require.NoError(t, err, "another owner got both permits while the first acquisition lives")
	require.False(t, ok, "another owner got both permits while the first acquisition lives")
	l, ok, err := other.NewSemaphore("lease", 2).TryAcquire(ctxT(t), 1)
	require.NoError(t, err, "the free permit")
	require.True(t, ok, "the free permit")
	require.NoError(t, other.NewSemaphore("lease", 2).Release(l, 1))
	require.NoError(t, c.NewSemaphore("lease", 2).Release(first, 1))
}
