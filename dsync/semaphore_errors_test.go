package dsync_test

import (
	"context"
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

// TestNilContextErrorsNameTheLock (issue 38, sweep: errors without the
// lock's name): a nil context, to an acquisition or a release, and a bad
// name fail with ErrInvalidArgument naming the primitive and the lock and
// saying what to pass.
func TestNilContextErrorsNameTheLock(t *testing.T) {
	c := newClient(t)
	var nilCtx context.Context
	m, f, s := c.NewMutex("nil-m"), c.NewFairMutex("nil-f"), c.NewSemaphore("nil-s", 2)
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"nil-m", func() error { _, err := m.LockContext(nilCtx); return err }()},
		{"nil-m", m.UnlockContext(nilCtx)},
		{"nil-f", func() error { _, err := f.LockContext(nilCtx); return err }()},
		{"nil-f", f.UnlockContext(nilCtx)},
		{"nil-s", func() error { _, err := s.Acquire(nilCtx, 1); return err }()},
		{"nil-s", s.Release(nilCtx, 1)},
	} {
		require.ErrorIs(t, tc.err, dsync.ErrInvalidArgument, tc.name)
		assert.Contains(t, tc.err.Error(), `"`+tc.name+`"`, "names the lock")
		assert.Contains(t, tc.err.Error(), "pass ", "says what to pass")
	}
	_, err := c.NewMutex("").LockContext(context.Background())
	require.ErrorIs(t, err, dsync.ErrInvalidArgument)
	assert.Contains(t, err.Error(), "mutex", "names the primitive")
	assert.Contains(t, err.Error(), "give it a name")
}
