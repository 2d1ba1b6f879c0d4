package dsync

import (
	"context"
	"testing"

	"github.com/dsync/dsync/internal/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A check of the holds that reads Redis after a Semaphore's release ran
// there, and applies its reply before the release's own reply ends the
// hold here, finds the acquisition gone: it was released, not lost. The
// check runs from the hook between the two (made by the control
// subscription coming up, a notice, or a renewal round, all of which go
// through the same reply). Before the fix the hold ended as lost, its
// lock context's cause ErrLockLost: TestSemaphoreBasic failed so once in
// make test (2026-12-04, 78711a9), its Client's control subscription
// coming up as it released.
//
// A release that Redis refuses does not end the hold: one that the check
// found gone meanwhile is lost then (cancelRelease), not kept forever as
// being released.
func TestSemaphoreReleaseRacingCheckIsNoLoss(t *testing.T) {
	s := redistest.Start(t)
	ctl := s.Client(t)
	var lost []Lost
	c, err := NewClient(s.Client(t), WithKeyPrefix("semrace"), WithObserver(Observer{Lost: func(e Lost) { lost = append(lost, e) }}))
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	ctx := context.Background()
	checks := 0
	c.cfg.test.semReleaseReplied = func() {
		var holds []*hold
		c.clock.each(func(h *hold) { holds = append(holds, h) })
		require.True(t, c.checkHolds(ctx, holds, whyMissed))
		checks++
	}
	sem := c.NewSemaphore("race", 3)

	l1, err := sem.Acquire(ctx, 2)
	require.NoError(t, err)
	require.NoError(t, sem.Release(l1, 2))
	require.Equal(t, 1, checks, "the check ran between the release and its end here")
	require.Error(t, l1.Err())
	assert.NotErrorIs(t, context.Cause(l1), ErrLockLost, "a released acquisition")
	assert.Empty(t, lost, "Lost reported for a released acquisition")

	// Refused: the acquisition is gone from Redis (its keys deleted).
	l2, err := sem.Acquire(ctx, 1)
	require.NoError(t, err)
	require.NoError(t, ctl.Do(ctx, ctl.B().Del().Key(sem.keys...).Build()).Error())
	require.ErrorIs(t, sem.Release(l2, 1), ErrNotHeld)
	require.Equal(t, 2, checks)
	require.Error(t, l2.Err(), "an acquisition found gone is over")
	assert.ErrorIs(t, context.Cause(l2), ErrLockLost, "found gone, not released")
	assert.Len(t, lost, 1)
}
