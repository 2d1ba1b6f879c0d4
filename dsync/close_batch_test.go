package dsync_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/dsync/dsync/internal/redistest"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// closeHolds is how many Mutexes a Client holds at Close in the tests
// below: more than two release batches (dsync releases up to
// dsync.ReleaseBatch, 128, holds per script call).
const closeHolds = 300

// Close releases a Client's Mutex holds many per script call (issue 28:
// 10,000 holds released at Close, one script each, kept the waiters of
// another Client waiting behind 10,000 script calls): 300 holds cost at
// most 3 script calls, every lock is free after, and every waiter of
// another Client for them is woken by the release's wakeup, long before
// its fallback poll (lease/3 = 10 s).
func TestCloseReleasesInBatches(t *testing.T) {
	s := redistest.Start(t)
	rc := s.Client(t)
	prefix := testPrefix(t)
	ctx := ctxT(t)
	hold := func(c *dsync.Client, tag string) []string {
		names := make([]string, closeHolds)
		for i := range names {
			names[i] = fmt.Sprintf("%s%d", tag, i)
			_, err := c.NewMutex(names[i]).LockContext(ctx)
			require.NoError(t, err)
		}
		return names
	}
	other := newClientOn(t, s.Client(t), dsync.WithKeyPrefix(prefix))
	free := func(names []string) {
		for _, n := range names {
			l, ok, err := other.NewMutex(n).TryLockContext(ctx)
			require.NoError(t, err, "%s", n)
			require.True(t, ok, "%s: not free after the holder's Close", n)
			require.NoError(t, other.NewMutex(n).UnlockContext(l))
		}
	}

	// Script calls of the release alone.
	h := newClientOn(t, s.Client(t), dsync.WithKeyPrefix(prefix))
	names := hold(h, "a")
	require.NoError(t, rc.Do(ctx, rc.B().ConfigResetstat().Build()).Error())
	require.NoError(t, h.Close())
	info, err := rc.Do(ctx, rc.B().Info().Section("commandstats").Build()).ToString()
	require.NoError(t, err)
	evals := statCalls(info, "evalsha") + statCalls(info, "eval")
	t.Logf("Close released %d holds in %d script calls", closeHolds, evals)
	require.Greater(t, closeHolds, 2*dsync.ReleaseBatch, "the test's holds fill more than two batches")
	batches := (closeHolds + dsync.ReleaseBatch - 1) / dsync.ReleaseBatch
	assert.Equal(t, batches, evals, "script calls to release %d holds at Close, %d per call", closeHolds, dsync.ReleaseBatch)
	assert.Equal(t, closeHolds, statCalls(info, "set"), "SETs (one free marker per hold)")
	free(names)

	// Waiters of another Client, woken by the batch's wakeups.
	h = newClientOn(t, s.Client(t), dsync.WithKeyPrefix(prefix))
	names = hold(h, "b")
	w := newClientOn(t, s.Client(t), dsync.WithKeyPrefix(prefix))
	type got struct {
		lctx context.Context
		err  error
	}
	woken := make([]got, len(names))
	var wg sync.WaitGroup
	for i, n := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := w.NewMutex(n).LockContext(ctx)
			woken[i] = got{l, err}
		}()
	}
	for _, n := range names {
		waitMarked(t, rc, prefix+":{"+n+"}:mutex")
	}
	start := time.Now()
	require.NoError(t, h.Close())
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatalf("waiters not all woken 5 s after the holder's Close (their fallback poll is 10 s away)")
	}
	t.Logf("%d waiters woken %v after Close began", len(names), time.Since(start))
	for i, g := range woken {
		require.NoError(t, g.err, "%s", names[i])
		require.NoError(t, w.NewMutex(names[i]).UnlockContext(g.lctx))
	}
}

// waitMarked waits until the Mutex value at key carries a waiter's mark
// (" w"): a waiter found it held, and its release will publish.
func waitMarked(t testing.TB, rc rueidis.Client, key string) {
	t.Helper()
	waitFor(t, 10*time.Second, "a waiter's mark on "+key, func() bool {
		v, err := rc.Do(context.Background(), rc.B().Get().Key(key).Build()).ToString()
		return err == nil && len(v) > 2 && v[len(v)-2:] == " w"
	})
}

// Close in a Cluster releases every hold, in batches of one slot each:
// holds on every master, all free after.
func TestClusterCloseReleasesEveryHold(t *testing.T) {
	prefix := testPrefix(t)
	h := newClientOn(t, clusterRueidis(t), dsync.WithKeyPrefix(prefix))
	other := newClientOn(t, clusterRueidis(t), dsync.WithKeyPrefix(prefix))
	ctx := ctxT(t)
	names := namesOnMasters(t, prefix)
	for i := range closeHolds {
		names = append(names, fmt.Sprintf("c%d", i))
	}
	for _, n := range names {
		_, err := h.NewMutex(n).LockContext(ctx)
		require.NoError(t, err, "%s", n)
	}
	require.NoError(t, h.Close())
	for _, n := range names {
		l, ok, err := other.NewMutex(n).TryLockContext(ctx)
		require.NoError(t, err, "%s", n)
		require.True(t, ok, "%s: not free after the holder's Close", n)
		require.NoError(t, other.NewMutex(n).UnlockContext(l))
	}
}
