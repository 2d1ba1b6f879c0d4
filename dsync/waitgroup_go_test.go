package dsync_test

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/stretchr/testify/require"
)

// TestWaitGroupGo: Go runs each task in its own goroutine, counted in the
// shared counter until it returns: a Wait of another Client (another
// process) returns only once every task has. A task whose context ended
// while it ran is still counted done, and one ended by runtime.Goexit too.
func TestWaitGroupGo(t *testing.T) {
	observed, opt := observeWaits()
	c := newClient(t)
	c2 := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefixOf(t, c)), opt)
	ctx := ctxT(t)
	wg := c.NewWaitGroup("go")

	const tasks = 5
	release := make(chan struct{})
	var started, finished atomic.Int64
	running := make(chan struct{}, tasks)
	task := func() {
		started.Add(1)
		running <- struct{}{}
		<-release
		finished.Add(1)
	}
	short, cancel := context.WithCancel(ctx)
	for i := range tasks {
		tctx := ctx
		if i == 0 {
			tctx = short // ends while its task runs
		}
		require.NoError(t, wg.Go(tctx, task))
	}
	require.NoError(t, wg.Go(ctx, func() { running <- struct{}{}; <-release; runtime.Goexit() }))
	for range tasks + 1 {
		<-running // all at once: each in its own goroutine
	}
	cancel()

	waited := make(chan error, 1)
	go func() { waited <- c2.NewWaitGroup("go").Wait(ctx) }()
	require.Eventually(t, func() bool { return observed.Load() == 1 }, 10*time.Second, time.Millisecond,
		"the Wait did not observe the counter above zero")
	select {
	case err := <-waited:
		t.Fatalf("Wait returned %v with %d tasks running", err, tasks+1)
	default:
	}
	close(release)
	select {
	case err := <-waited:
		require.NoError(t, err)
	case <-time.After(5 * time.Second): // the fallback look is lease/3 = 10 s
		t.Fatal("Wait not woken when the tasks returned")
	}
	require.Equal(t, int64(tasks), finished.Load())
	require.NoError(t, c2.NewWaitGroup("go").Wait(ctx), "counter left above zero")
}

// TestWaitGroupGoRefused: Go whose Add fails returns the error and does
// not call f: an ended context, a closed Client, a nil f.
func TestWaitGroupGoRefused(t *testing.T) {
	c := newClient(t)
	wg := c.NewWaitGroup("go-refused")
	var ran atomic.Int64
	f := func() { ran.Add(1) }
	done, cancel := context.WithCancel(ctxT(t))
	cancel()
	require.ErrorIs(t, wg.Go(done, f), context.Canceled)
	err := wg.Go(ctxT(t), nil)
	require.ErrorIs(t, err, dsync.ErrInvalidArgument)
	require.ErrorContains(t, err, "go-refused")
	require.NoError(t, c.Close())
	require.ErrorIs(t, wg.Go(ctxT(t), f), dsync.ErrClosed)
	require.Zero(t, ran.Load(), "f ran after a refused Go")
}
