package dsync_test

import (
	"context"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/stretchr/testify/require"
)

// A wait ended by its context leaves nothing behind, for an owner made for
// the call too: with deadlines (and, every other try, cancellations) spread
// from 10 µs to 5 ms over a free lock, another Client acquires within 500 ms
// of every cancelled call's return, whatever state the abandoned acquire
// reached. (The undo used to be a plain release, which could reach Redis
// before the abandoned acquire and release nothing, leaving the lock held
// for a lease; a Semaphore had no undo at all.)
func contractCancelledWait(t *testing.T, row contractRow, a, b *dsync.Client) {
	const bound = 500 * time.Millisecond
	mine, probe := row.open(a, "undo"), row.probe(b, "undo")
	tries := *contractTries
	cancelled, byCancel, heldAtReturn := 0, 0, 0
	var worst time.Duration
	worstAt := ""
	for i := range tries {
		d := spreadDelay(i)
		var ctx context.Context
		var cancel context.CancelFunc
		var timer *time.Timer
		if i%2 == 0 {
			ctx, cancel = context.WithTimeout(context.Background(), d)
		} else {
			ctx, cancel = context.WithCancel(context.Background())
			timer = time.AfterFunc(d, cancel)
		}
		lctx, err := mine.lock(ctx)
		ctxErr := ctx.Err()
		if timer != nil {
			timer.Stop()
		}
		if err == nil {
			// Released without the try's deadline, which may pass during
			// the release and cut its reply off (an error, though the
			// release completes in the background).
			require.NoError(t, mine.unlock(context.WithoutCancel(lctx)), "try %d", i)
			cancel()
			continue
		}
		if dl, ok := ctx.Deadline(); ok && ctxErr == nil && !time.Now().Before(dl) {
			// The call saw the deadline pass on the clock before the
			// context's own timer fired: it does, at once.
			<-ctx.Done()
			ctxErr = ctx.Err()
		}
		cancel()
		require.Error(t, ctxErr, "try %d: failed with its context live: %v", i, err)
		require.ErrorIs(t, err, ctxErr, "try %d (%v)", i, d)
		cancelled++
		if i%2 == 1 {
			byCancel++
		}
		// First a try: is the lock free at once, or does the undo finish
		// after the call returned?
		returned := time.Now()
		l, ok, err := probe.try(dsync.WithOwner(context.Background()))
		require.NoError(t, err, "try %d: another Client's try after the cancelled call", i)
		if !ok {
			heldAtReturn++
			l, _ = acquireWithin(t, probe, bound-time.Since(returned), "try "+strconv.Itoa(i)+" ("+d.String()+"): another Client after the cancelled call")
		}
		took := time.Since(returned)
		if took > worst {
			worst, worstAt = took, "try "+strconv.Itoa(i)+" ("+d.String()+")"
		}
		require.NoError(t, probe.unlock(l), "try %d", i)
	}
	t.Logf("%d of %d calls ended by their context (%d by a cancel, %d by a deadline); another Client acquired within %v of each (bound %v; the slowest after %s); the lock was still held when %d of them returned",
		cancelled, tries, byCancel, cancelled-byCancel, worst, bound, worstAt, heldAtReturn)
	require.NotZero(t, cancelled, "no call was cancelled: the test proves nothing")
}

// spreadDelay spreads try i's deadline log-uniformly over 10 µs .. 5 ms
// (a free lock is acquired in well under a millisecond, so the short end,
// where the wait ends at each step of the acquire, gets most tries).
func spreadDelay(i int) time.Duration {
	f := math.Mod(float64(i)*0.6180339887498949, 1) // golden ratio: an even spread in any prefix
	return time.Duration(float64(10*time.Microsecond) * math.Pow(500, f))
}
