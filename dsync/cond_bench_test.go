package dsync_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/stretchr/testify/require"
)

// BenchmarkCondSignalWake: from a Signal to the return of the Wait it
// wakes, with the lock re-acquired, the waiter on another Client (another
// process's stand-in). Each round the signaller takes and releases the
// lock first, so the waiter is registered (it registers before it
// releases). Reports the p50 and p99 of the latency.
func BenchmarkCondSignalWake(b *testing.B) {
	c := newClient(b)
	c2 := newClientOn(b, newRueidis(b), dsync.WithKeyPrefix(prefixOf(b, c)))
	m, m2 := c.NewMutex("bench"), c2.NewMutex("bench")
	cd, cd2 := c.NewCond(m), c2.NewCond(m2)
	ctx := context.Background()
	woke := make(chan time.Time)
	stop := make(chan struct{})
	errs := make(chan error, 1)
	held := make(chan struct{})
	go func() {
		lctx, err := m2.LockContext(ctx)
		close(held) // the signaller's first Lock waits for the first Wait
		for err == nil {
			if lctx, err = cd2.Wait(lctx); err != nil {
				break
			}
			select {
			case woke <- time.Now():
			case <-stop:
				errs <- m2.UnlockContext(lctx)
				return
			}
		}
		errs <- err
	}()
	<-held
	var lat []time.Duration
	for b.Loop() {
		l, err := m.LockContext(ctx)
		require.NoError(b, err)
		require.NoError(b, m.UnlockContext(l))
		t0 := time.Now()
		require.NoError(b, cd.Signal(ctx))
		lat = append(lat, (<-woke).Sub(t0))
	}
	close(stop)
	l, err := m.LockContext(ctx)
	require.NoError(b, err)
	require.NoError(b, m.UnlockContext(l))
	require.NoError(b, cd.Signal(ctx))
	require.NoError(b, <-errs)
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}
