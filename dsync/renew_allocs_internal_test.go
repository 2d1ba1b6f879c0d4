package dsync

import (
	"context"
	"strconv"
	"testing"

	"github.com/dsync/dsync/internal/redistest"
	"github.com/stretchr/testify/require"
)

// A renewal round's allocations grow with its script calls, a few each
// (the call's holds, keys and arguments, made with room for a whole batch;
// the command; the reply), not with its holds: measured between 10 and 40
// batches of held Mutexes, at most 8 more per batch (5.2 without the race
// detector, 6.5 with it; 29 when the batches' slices grew from one element
// and each hold looked its batch up in a map).
func TestRenewalRoundAllocs(t *testing.T) {
	s := redistest.Start(t)
	perRound := func(batches int) float64 {
		n := batches * defaultRenewBatch
		c, err := NewClient(s.Client(t), WithLogger(quiet), WithKeyPrefix("ra"+strconv.Itoa(n)))
		require.NoError(t, err)
		defer c.Close()
		for i := range n {
			_, err := c.NewMutex(strconv.Itoa(i)).LockContext(context.Background())
			require.NoError(t, err)
		}
		// AllocsPerRun counts the whole process's allocations: the least
		// of 5 measurements is the round's.
		least := testing.AllocsPerRun(5, func() { require.True(t, c.renew.round()) })
		for range 4 {
			least = min(least, testing.AllocsPerRun(5, func() { require.True(t, c.renew.round()) }))
		}
		return least
	}
	few, many := perRound(10), perRound(40)
	t.Logf("allocations per renewal round: %.0f with 10 batches of %d held Mutexes, %.0f with 40", few, defaultRenewBatch, many)
	require.LessOrEqual(t, (many-few)/30, 8.0, "allocations per added batch of a renewal round")
}
