package dsync_test

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A wait behind more holds than a lock's history used to keep reports
// every one of them, up to MaxBlockers: 111 goroutines of one Client hold
// a FairMutex one after the other (each granted in Redis, in the order
// they queued) while a waiter of another Client, queued after them, waits;
// the waiter reports all 111, in the order they began, none dropped.
// Before (MaxBlockers and the history at 64): 64 blockers, and the
// waiting that the others caused unexplained (the bench's cross-process
// scenario, whose waits go behind more than 64 short holds, covered
// 86-88% of its waiting with links instead of 91-92%).
func TestBlockersBehindManyHolds(t *testing.T) {
	const queued = 110 // beside the first holder
	ctx := ctxT(t)
	prefix := testPrefix(t)
	var seq atomic.Int64
	obsA := dsync.Observer{
		HoldTag: func(context.Context, dsync.AcquireDone) string { return "a" + strconv.FormatInt(seq.Add(1), 10) },
	}
	var mu sync.Mutex
	var got *dsync.AcquireDone
	obsB := dsync.Observer{
		HoldTag: func(context.Context, dsync.AcquireDone) string { return "b" },
		AcquireDone: func(_ context.Context, e dsync.AcquireDone) {
			if e.Acquired {
				mu.Lock()
				got = &e
				mu.Unlock()
			}
		},
	}
	a := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefix), dsync.WithObserver(obsA))
	b := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefix), dsync.WithObserver(obsB))
	ma, mb := a.NewFairMutex("many"), b.NewFairMutex("many")
	waiters := func() int64 { return waitingCount(t, a, "many", dsync.KindFairMutex) }
	lctx, err := ma.LockContext(ctx)
	require.NoError(t, err)
	var wg sync.WaitGroup
	for range queued {
		wg.Go(func() {
			l, err := ma.LockContext(ctx)
			if assert.NoError(t, err) {
				assert.NoError(t, ma.UnlockContext(l))
			}
		})
	}
	waitFor(t, 10*time.Second, "A's goroutines queued", func() bool { return waiters() == queued })
	done := make(chan error, 1)
	go func() {
		l, err := mb.LockContext(ctx)
		if err == nil {
			err = mb.UnlockContext(l)
		}
		done <- err
	}()
	waitFor(t, 10*time.Second, "B's waiter queued", func() bool { return waiters() == queued+1 })
	require.NoError(t, ma.UnlockContext(lctx))
	wg.Wait()
	require.NoError(t, <-done)

	mu.Lock()
	defer mu.Unlock()
	require.NotNil(t, got, "B's acquisition reported")
	assert.Zero(t, got.BlockersDropped, "blockers dropped")
	want := make([]string, 0, queued+1)
	for i := range queued + 1 {
		want = append(want, "a"+strconv.Itoa(i+1))
	}
	assert.ElementsMatch(t, want, got.BlockedBy, "B waited behind every hold of A")
	assert.True(t, slices.IsSortedFunc(got.Blockers, func(x, y dsync.Blocker) int { return x.Start.Compare(y.Start) }),
		"the blockers are in the order their holds began")
}
