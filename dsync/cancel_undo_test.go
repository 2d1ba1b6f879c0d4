package dsync_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/stretchr/testify/require"
)

// A wait ended by its context leaves nothing behind, for an owner made for
// the call too: with deadlines from 10 µs to 5 ms on a free lock, another
// Client gets the lock within 500 ms of every cancelled call's return. The
// undo used to be a plain release, which could reach Redis before the
// abandoned acquire and release nothing, leaving the lock held for a
// lease; a Semaphore (size 1 here) had no undo at all.
func TestCancelledAcquireLeavesNothing(t *testing.T) {
	type locker interface {
		LockContext(context.Context) (context.Context, error)
		TryLockContext(context.Context) (context.Context, bool, error)
		UnlockContext(context.Context) error
	}
	c := newClient(t)
	other := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefixOf(t, c)))
	for _, tc := range []struct {
		name      string
		mine, his locker
	}{
		{"Mutex", c.NewMutex("undo"), other.NewMutex("undo")},
		{"FairMutex", c.NewFairMutex("undo"), other.NewFairMutex("undo")},
		{"RWMutex", c.NewRWMutex("undo"), other.NewRWMutex("undo")},
		{"Semaphore", semLocker{c.NewSemaphore("undo", 1)}, semLocker{other.NewSemaphore("undo", 1)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const tries = 3000
			cancelled := 0
			for i := 0; i < tries; i++ {
				d := time.Duration(10+(i%500)*10) * time.Microsecond
				ctx, cancel := context.WithTimeout(context.Background(), d)
				l, err := tc.mine.LockContext(ctx)
				cancel()
				if err == nil {
					require.NoError(t, tc.mine.UnlockContext(l))
					continue
				}
				require.ErrorIs(t, err, context.DeadlineExceeded, "try %d", i)
				cancelled++
				returned := time.Now()
				var got context.Context
				waitFor(t, 500*time.Millisecond, "the lock to be free again", func() bool {
					l, ok, err := tc.his.TryLockContext(context.Background())
					require.NoError(t, err)
					got = l
					return ok
				})
				require.LessOrEqual(t, time.Since(returned), 500*time.Millisecond, "try %d: the lock was free only after the cancelled call returned", i)
				require.NoError(t, tc.his.UnlockContext(got))
			}
			t.Logf("%d of %d calls ended by their deadline", cancelled, tries)
			require.NotEqual(t, 0, cancelled, "no call was cancelled: the test proves nothing")
		})
	}
}

// semLocker is a Semaphore taken one permit at a time, as a lock.
type semLocker struct{ s *dsync.Semaphore }

func (l semLocker) LockContext(ctx context.Context) (context.Context, error) {
	return l.s.Acquire(ctx, 1)
}

func (l semLocker) TryLockContext(ctx context.Context) (context.Context, bool, error) {
	return l.s.TryAcquire(ctx, 1)
}

func (l semLocker) UnlockContext(ctx context.Context) error { return l.s.Release(ctx, 1) }

// The same for Once: a Do whose begin reply was abandoned used to leave its
// running marker for a lease, so every other caller waited that long. Now
// another Client's Do runs f within 500 ms of every cancelled call.
func TestCancelledOnceLeavesNothing(t *testing.T) {
	c := newClient(t)
	other := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefixOf(t, c)))
	errF := errors.New("f fails, so the Once never completes")
	fail := func(context.Context) error { return errF }
	mine, his := c.NewOnce("undo"), other.NewOnce("undo")
	const tries = 2000
	cancelled := 0
	for i := 0; i < tries; i++ {
		d := time.Duration(10+(i%200)*10) * time.Microsecond
		ctx, cancel := context.WithTimeout(context.Background(), d)
		err := mine.Do(ctx, fail)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			continue // f ran (and failed), or the deadline hit inside it
		}
		cancelled++
		ctx, cancel = context.WithTimeout(context.Background(), 500*time.Millisecond)
		err = his.Do(ctx, fail)
		cancel()
		require.ErrorIs(t, err, errF, "try %d: another Client's Do after a cancelled one", i)
	}
	t.Logf("%d of %d calls ended by their deadline", cancelled, tries)
	require.NotEqual(t, 0, cancelled, "no call was cancelled: the test proves nothing")
}
