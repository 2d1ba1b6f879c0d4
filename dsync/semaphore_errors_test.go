package dsync_test

import (
	"testing"

	"github.com/dsync/dsync/dsync"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSemaphoreErrorsSayWhatToDo (issue 38, item 6): a size of 0, a
// release of more permits than the owner holds, and a size other than the
// one stored in Redis each fail with the sentinel that fits, naming the
// semaphore and saying what to do; the release changes nothing.
func TestSemaphoreErrorsSayWhatToDo(t *testing.T) {
	c := newClient(t)
	ctx := ctxT(t)

	_, err := c.NewSemaphore("sem-zero", 0).Acquire(ctx, 1)
	require.ErrorIs(t, err, dsync.ErrInvalidArgument)
	assert.Contains(t, err.Error(), `"sem-zero"`, "names the semaphore")
	assert.Contains(t, err.Error(), "at least 1", "says what size to give")

	s := c.NewSemaphore("sem-over", 3)
	lctx, err := s.Acquire(ctx, 1)
	require.NoError(t, err)
	err = s.Release(lctx, 2)
	require.ErrorIs(t, err, dsync.ErrNotHeld)
	assert.NotErrorIs(t, err, dsync.ErrWrongContext)
	assert.Contains(t, err.Error(), `"sem-over"`)
	assert.Contains(t, err.Error(), "holds 1 permits, fewer than the 2", "says how many the owner holds")
	require.NoError(t, lctx.Err(), "nothing was released")
	require.NoError(t, s.Release(lctx, 1))

	big := c.NewSemaphore("sem-size", 3)
	l2, err := big.Acquire(ctx, 1)
	require.NoError(t, err)
	_, err = c.NewSemaphore("sem-size", 5).Acquire(ctx, 1)
	require.ErrorIs(t, err, dsync.ErrInvalidArgument)
	assert.Contains(t, err.Error(), `"sem-size"`)
	assert.Contains(t, err.Error(), "open it with size 3", "says which size to use")
	require.NoError(t, big.Release(l2, 1))
}
