package dsync_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/dsync/dsync/internal/redistest"
	"github.com/stretchr/testify/require"
)

// A release that Redis does not answer within its own budget (2 s: the
// process paused or starved that long, or Redis slow) while the caller's
// context is live says so: its error names the lock and the budget, and does
// not match context.DeadlineExceeded, which a caller reads as "my context
// ended". Once Redis takes writes again, the permits, the lock are free
// within the lease: the release sent ran, or the lease ended the hold, as
// the error says. (make test with both CPUs busy: a Semaphore release
// starved 2.3 s returned a bare "context deadline exceeded" with its
// caller's context live.)
func TestReleaseBudgetErrorSaysSo(t *testing.T) {
	s := redistest.Start(t) // private: CLIENT PAUSE stalls every client of it
	// A lease longer than the releases' 4 s in the pause (a Semaphore's two
	// tries), so the holds are not lost meanwhile.
	const lease = 9 * time.Second
	c := newClientOn(t, s.Client(t), dsync.WithLease(lease))
	ctx := ctxT(t)
	check := func(t *testing.T, err error, name string) {
		t.Helper()
		require.Error(t, err, "a release Redis did not answer")
		require.NotErrorIs(t, err, context.DeadlineExceeded, "the caller's context is live: %v", err)
		require.Contains(t, err.Error(), `"`+name+`"`, "names the lock")
		require.Contains(t, err.Error(), "within its 2s budget", "names the budget")
		require.True(t, strings.Contains(err.Error(), "lease"), "says what becomes of the hold: %v", err)
	}
	// pause holds Redis' writes until the returned func is called.
	pause := func(t *testing.T) func() {
		require.NoError(t, s.Do(t, "CLIENT", "PAUSE", "20000", "WRITE").Error())
		return func() { require.NoError(t, s.Do(t, "CLIENT", "UNPAUSE").Error()) }
	}

	t.Run("semaphore", func(t *testing.T) {
		sem := c.NewSemaphore("budget-sem", 2)
		lctx, err := sem.Acquire(ctx, 2)
		require.NoError(t, err)
		unpause := pause(t)
		err = sem.Release(lctx, 2)
		unpause()
		check(t, err, "budget-sem")
		var got bool
		waitFor(t, lease+5*time.Second, "the permits back within the lease once Redis takes writes", func() bool {
			l2, ok, err := sem.TryAcquire(ctx, 2)
			require.NoError(t, err)
			if ok {
				require.NoError(t, sem.Release(l2, 2))
				got = true
			}
			return ok
		})
		require.True(t, got)
	})

	t.Run("fair", func(t *testing.T) {
		f := c.NewFairMutex("budget-fair")
		lctx, err := f.LockContext(ctx)
		require.NoError(t, err)
		unpause := pause(t)
		err = f.UnlockContext(lctx)
		unpause()
		check(t, err, "budget-fair")
		waitFor(t, lease+5*time.Second, "the lock free within the lease once Redis takes writes", func() bool {
			l2, ok, err := f.TryLockContext(ctx)
			require.NoError(t, err)
			if ok {
				require.NoError(t, f.UnlockContext(l2))
			}
			return ok
		})
	})
}
