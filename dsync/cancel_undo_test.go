package dsync_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/stretchr/testify/require"
)

// A wait ended by its context leaves nothing behind (for the locks, see
// TestLockContract's CancelledWait). For Once: a Do whose begin reply was
// abandoned used to leave its running marker for a lease, so every other
// caller waited that long. Now another Client's Do runs f within 500 ms of
// every cancelled call.
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
