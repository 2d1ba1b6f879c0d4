package dsync_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Waiters queued inside the holder's Client, handed the lock one after
// the other by the handoff script (WithMaxLocalHandoffs(1): every handoff
// is a round trip), find every hold they waited behind in their Client's
// own records: the lock never left the Client, so no hold of another
// Client can have held it, and their waits read nothing from Redis (no
// LRANGE of the lock's history). Each links to the first holder and to
// the waiters served before it. Before (a handoff script's end of a hold
// counted as the lock leaving the Client): the waiter after each handoff
// read the history, 3 LRANGE calls.
func TestBlockersHandoffScriptStaysLocal(t *testing.T) {
	const waiters = 3
	ctx := ctxT(t)
	rc := newRueidis(t)
	var seq atomic.Int64
	var mu sync.Mutex
	var got [][]string
	var queued []bool // AcquireDone.Queued, in the order of the acquisitions
	obs := dsync.Observer{
		HoldTag: func(context.Context, dsync.AcquireDone) string { return "h" + strconv.FormatInt(seq.Add(1), 10) },
		AcquireDone: func(_ context.Context, e dsync.AcquireDone) {
			mu.Lock()
			defer mu.Unlock()
			queued = append(queued, e.Queued)
			if e.Acquired && len(e.Blockers) > 0 {
				got = append(got, e.BlockedBy)
			}
		},
	}
	c := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(testPrefix(t)), dsync.WithObserver(obs), dsync.WithMaxLocalHandoffs(1))
	m := c.NewMutex("local")
	lctx, err := m.LockContext(ctx)
	require.NoError(t, err)
	var wg sync.WaitGroup
	for range waiters {
		wg.Go(func() {
			l, err := m.LockContext(ctx)
			if assert.NoError(t, err) {
				assert.NoError(t, m.UnlockContext(l))
			}
		})
	}
	waitFor(t, 10*time.Second, "the waiters queued", func() bool {
		return waitingCount(t, c, "local", dsync.KindMutex) == waiters
	})
	resetStats(t, ctx, rc, c)
	require.NoError(t, m.UnlockContext(lctx))
	wg.Wait()
	_, info := commandCalls(t, ctx, rc)
	assert.NotContains(t, info, "cmdstat_lrange", "a wait read the lock's history from Redis")
	mu.Lock()
	defer mu.Unlock()
	// The first holder took the lock in Redis; the waiters queued in the
	// Client behind it.
	assert.Equal(t, []bool{false, true, true, true}, queued, "AcquireDone.Queued of the holder and the %d waiters", waiters)
	require.Len(t, got, waiters, "every waiter has blockers")
	for i, b := range got {
		// The i-th served waited behind the first holder and the i before it.
		assert.Len(t, b, i+1, "blockers of the waiter served %d-th: %v", i+1, b)
		if len(b) > 0 {
			assert.Equal(t, "h1", b[0], "the first holder")
		}
	}
}
