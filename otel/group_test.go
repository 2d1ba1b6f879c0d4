package dsyncotel_test

import (
	"context"
	"testing"

	"github.com/dsync/dsync/dsync"
	dsyncotel "github.com/dsync/dsync/otel"
	"github.com/stretchr/testify/require"
)

// A Group call that runs fn is an acquire and a hold span of kind "group";
// one that gets a kept result only an acquire span (not acquired). A Cond's
// Wait is an acquire span of kind "cond" (the wait for a signal) beside the
// Mutex's own spans of the release and the re-acquisition.
func TestObserverGroupAndCond(t *testing.T) {
	s := server(t)
	tel := newTelemetry(t)
	c := client(t, s, newPrefix(), tel.observer())
	ctx, job := tel.tp.Tracer("test").Start(context.Background(), "job")
	g := dsync.NewGroup[int](c, "g", dsync.WithResultTTL(60e9))
	for range 2 {
		v, _, err := g.Do(ctx, "k", func(context.Context) (int, error) { return 1, nil })
		require.NoError(t, err)
		require.Equal(t, 1, v)
	}

	m := c.NewMutex("m")
	cd := c.NewCond(m)
	lctx, err := m.LockContext(ctx)
	require.NoError(t, err)
	woke := make(chan error, 1)
	go func() {
		nctx, err := cd.Wait(lctx)
		if err == nil {
			err = m.UnlockContext(nctx)
		}
		woke <- err
	}()
	waitFor(t, 5e9, "the waiter", func() bool {
		sts, err := c.Inspect(ctx, "m")
		require.NoError(t, err)
		for _, st := range sts {
			if st.Kind == dsync.KindCond && len(st.Waiters) == 1 {
				return true
			}
		}
		return false
	})
	require.NoError(t, cd.Signal(ctx))
	require.NoError(t, <-woke)
	job.End()

	require.Len(t, tel.spansUnder(job.SpanContext(), "dsync.group.acquire"), 2, "group calls")
	require.Len(t, tel.spansUnder(job.SpanContext(), "dsync.group.hold"), 1, "the run of fn")
	tel.mustValue(t, "dsync.lock.hold.duration", 1, dsyncotel.KeyKind.String("group"))
	require.Len(t, tel.spansUnder(job.SpanContext(), "dsync.cond.acquire"), 1, "the wait for a signal")
	require.Len(t, tel.spansUnder(job.SpanContext(), "dsync.mutex.acquire"), 2, "the lock and the re-acquisition")
}
