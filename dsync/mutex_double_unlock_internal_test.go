package dsync

import (
	"context"
	"testing"
	"time"

	"github.com/dsync/dsync/internal/redistest"
	"github.com/stretchr/testify/require"
)

// A holder that releases a Mutex and then releases it again (a misuse:
// the second UnlockContext must return ErrNotHeld) must not free the lock
// under the goroutine of the same Client it was handed to. A local handoff
// keeps the hold as Redis names it (the first owner), so the second
// release, finding no hold of its owner here, asked Redis to release "any
// hold of owner", and Redis released the new holder's lock: another Client
// then took it while the goroutine here held it (found by the fault
// suite's Cond rows, where a waiter whose Wait failed unlocked its old lock
// context). Before the fix: round 0, step 1, the second release returned
// nil and another Client took the lock.
func TestMutexSecondUnlockAfterLocalHandoff(t *testing.T) {
	s := redistest.Start(t)
	newC := func(opts ...Option) *Client {
		c, err := NewClient(s.Client(t), opts...)
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		return c
	}
	c := newC(WithMaxLocalHandoffs(4))
	other := newC()
	ctx := context.Background()
	m := c.NewMutex("dbl")
	for round := 0; round < 50; round++ {
		first, err := m.LockContext(ctx)
		require.NoError(t, err)
		got := make(chan context.Context, 4)
		for range 4 {
			go func() {
				l, err := m.LockContext(ctx)
				if err != nil {
					panic(err)
				}
				got <- l
			}()
		}
		waitUntil(t, 10*time.Second, "4 goroutines queued here", func() bool { return queued(c, m.key) == 4 })
		prev := first
		for k := 0; k < 4; k++ {
			require.NoError(t, m.UnlockContext(prev))
			next := <-got
			err = m.UnlockContext(prev) // again: a misuse that must not release next's hold
			require.ErrorIs(t, err, ErrNotHeld, "round %d step %d: the second release", round, k)
			_, ok, err := other.NewMutex("dbl").TryLockContext(ctx)
			require.NoError(t, err)
			require.False(t, ok, "round %d step %d: another Client took the lock a goroutine here holds (its context err %v)", round, k, next.Err())
			prev = next
		}
		require.NoError(t, m.UnlockContext(prev))
	}
}
