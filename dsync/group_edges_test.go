package dsync_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestGroupForgetAndTTL: with WithResultTTL a later call gets the kept
// result; Forget makes the next call run fn again.
func TestGroupForgetAndTTL(t *testing.T) {
	c := newClient(t)
	ctx := ctxT(t)
	g := dsync.NewGroup[int](c, "ttl", dsync.WithResultTTL(time.Minute))
	runs := 0
	fn := func(context.Context) (int, error) { runs++; return runs, nil }
	v, shared, err := g.Do(ctx, "k", fn)
	require.NoError(t, err)
	require.False(t, shared)
	require.Equal(t, 1, v)
	v, shared, err = g.Do(ctx, "k", fn)
	require.NoError(t, err)
	require.True(t, shared, "the kept result is another call's")
	require.Equal(t, 1, v, "a call within the TTL gets the kept result")
	require.NoError(t, g.Forget(ctx, "k"))
	v, _, err = g.Do(ctx, "k", fn)
	require.NoError(t, err)
	require.Equal(t, 2, v, "after Forget fn runs again")
	// Without a TTL nothing is kept.
	g2 := dsync.NewGroup[int](c, "nottl")
	for i := 1; i <= 2; i++ {
		v, _, err := g2.Do(ctx, "k", func(context.Context) (int, error) { return i, nil })
		require.NoError(t, err)
		require.Equal(t, i, v)
	}
}

// TestGroupBadInput: bad names, keys and functions, a cancelled context,
// a closed Client, and Do from inside fn.
func TestGroupBadInput(t *testing.T) {
	c := newClient(t)
	ctx := ctxT(t)
	fn := func(context.Context) (int, error) { return 1, nil }
	for _, tc := range []struct {
		name, key string
		fn        func(context.Context) (int, error)
	}{
		{"", "k", fn},
		{strings.Repeat("n", dsync.MaxNameLen+1), "k", fn},
		{"g", "", fn},
		{"g", strings.Repeat("k", dsync.MaxNameLen+1), fn},
		{"g", "k", nil},
	} {
		_, _, err := dsync.NewGroup[int](c, tc.name).Do(ctx, tc.key, tc.fn)
		require.ErrorIs(t, err, dsync.ErrInvalidArgument, "name %.10q key %.10q", tc.name, tc.key)
		if tc.fn != nil {
			require.ErrorIs(t, dsync.NewGroup[int](c, tc.name).Forget(ctx, tc.key), dsync.ErrInvalidArgument)
		}
	}
	g := dsync.NewGroup[int](c, "g")
	//lint:ignore SA1012 a nil context is the misuse under test
	_, _, err := g.Do(nil, "k", fn)
	require.ErrorIs(t, err, dsync.ErrInvalidArgument)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, _, err = g.Do(cctx, "k", fn)
	require.ErrorIs(t, err, context.Canceled)
	_, _, err = g.Do(ctx, "k", func(fctx context.Context) (int, error) {
		_, _, err := g.Do(fctx, "k", fn)
		return 0, err
	})
	require.ErrorIs(t, err, dsync.ErrInvalidArgument, "Do inside fn of the same key")
	// A value JSON cannot encode: the error is the leader's, shared.
	_, _, err = dsync.NewGroup[func()](c, "g").Do(ctx, "f", func(context.Context) (func(), error) { return func() {}, nil })
	require.ErrorContains(t, err, "encoding the result")
	require.NoError(t, c.Close())
	_, _, err = g.Do(ctx, "k", fn)
	require.ErrorIs(t, err, dsync.ErrClosed)
	require.ErrorIs(t, g.Forget(ctx, "k"), dsync.ErrClosed)
	requireNoGroupKeys(t, newRueidis(t), prefixOf(t, c), time.Second)
}

// TestGroupForceUnlock: ForceUnlock ends a Group's running run; a waiting
// caller runs fn next.
func TestGroupForceUnlock(t *testing.T) {
	c := newClient(t)
	c2 := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefixOf(t, c)))
	ctx := ctxT(t)
	release := make(chan struct{})
	started := make(chan struct{})
	leader := make(chan int, 1)
	go func() {
		v, _, _ := dsync.NewGroup[int](c, "stuck").Do(ctx, "k", func(context.Context) (int, error) {
			close(started)
			<-release
			return 1, nil
		})
		leader <- v
	}()
	<-started
	waiter := make(chan int, 1)
	go func() {
		v, shared, err := dsync.NewGroup[int](c2, "stuck").Do(ctx, "k", func(context.Context) (int, error) { return 2, nil })
		assert.NoError(t, err)
		assert.False(t, shared, "the waiter ran fn itself")
		waiter <- v
	}()
	waitFor(t, 5*time.Second, "the waiter", func() bool { return groupWaiters(t, c, "stuck", "k") == 1 })
	refs, err := c.ForceUnlock(ctx, "stuck")
	require.NoError(t, err)
	require.Equal(t, []dsync.LockRef{{Kind: dsync.KindGroup, Name: "stuck"}}, refs)
	require.Equal(t, 2, <-waiter)
	close(release)
	require.Equal(t, 1, <-leader, "the forced leader keeps its own result")
	refs, err = c.ForceUnlock(ctx, "stuck")
	require.NoError(t, err)
	require.Empty(t, refs)
}

// TestGroupCloseCutsRunAfterCtx pins what Client.Close promises of a
// Group's fn that is running: Close does not wait for it, ends the run in
// Redis before it returns (another Client's caller runs fn at once, while
// the first fn still runs), and cancels fn's lock context. When the
// leader's own context had already ended fn's context, its cause stays
// the caller's, and the leader's Do still returns fn's value: nothing but
// the Close tells that caller its run was cut. The fault suite's Group and
// Once histories model a run under a Close so (faults: chaosGen.cutBy).
func TestGroupCloseCutsRunAfterCtx(t *testing.T) {
	prefix := testPrefix(t)
	c1 := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefix))
	c2 := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefix))
	ctx := ctxT(t)
	g1, g2 := dsync.NewGroup[string](c1, "g"), dsync.NewGroup[string](c2, "g")
	inside, release := make(chan context.Context, 1), make(chan struct{})
	type result struct {
		v   string
		err error
	}
	done1 := make(chan result, 1)
	// The caller's context ends once fn runs (it ended fn's context
	// first; a deadline of 20 ms, as before, could pass before fn began
	// on a busy machine, and the test then waited for fn forever).
	dctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	running := make(chan struct{})
	go func() {
		v, _, err := g1.Do(dctx, "k", func(fctx context.Context) (string, error) {
			close(running)
			<-fctx.Done() // the caller's context ends fn's context first
			inside <- fctx
			<-release
			return "first", nil
		})
		done1 <- result{v, err}
	}()
	select {
	case <-running:
	case r := <-done1:
		t.Fatalf("Do returned without running fn: %v", r.err)
	}
	cancel(context.DeadlineExceeded)
	fctx := <-inside
	require.ErrorIs(t, context.Cause(fctx), context.DeadlineExceeded)
	require.NoError(t, c1.Close())
	require.ErrorIs(t, context.Cause(fctx), context.DeadlineExceeded, "the first cause stays")
	ran := false
	v, shared, err := g2.Do(ctx, "k", func(context.Context) (string, error) { ran = true; return "second", nil })
	require.NoError(t, err)
	require.True(t, ran, "after Close returned, another Client's caller runs fn while the cut fn still runs")
	require.False(t, shared)
	require.Equal(t, "second", v)
	close(release)
	r := <-done1
	require.NoError(t, r.err, "the cut leader's Do returns fn's own value")
	require.Equal(t, "first", r.v)
}

// TestGroupCloseBeforeClaimUntags: a Client that begins to close between
// a Group run's grant and its claim (the run is ended as Close ends it,
// and Do returns ErrClosed) takes the run's hold tag, written before the
// claim, back out of Redis before Close returns. Found by the fault
// suite's deploy check at CI size: "dsync1:{g0}:group:s:k427990:tags" of
// the closed Client left after its Close returned (1 Group row in 4).
func TestGroupCloseBeforeClaimUntags(t *testing.T) {
	prefix := testPrefix(t)
	rc := newRueidis(t)
	var c *dsync.Client
	closed := make(chan error, 1)
	obs := dsync.Observer{HoldTag: func(_ context.Context, e dsync.AcquireDone) string {
		if e.Name != "g" {
			return ""
		}
		// Close begins now, while the call is between the grant and
		// its claim (Close waits for the call to return).
		go func() { closed <- c.Close() }()
		waitFor(t, 5*time.Second, "Close to begin", func() bool {
			_, _, err := dsync.NewGroup[string](c, "probe").Do(context.Background(), "p", func(context.Context) (string, error) { return "", nil })
			return errors.Is(err, dsync.ErrClosed)
		})
		return "tag"
	}}
	c = newClientOn(t, rc, dsync.WithKeyPrefix(prefix), dsync.WithObserver(obs))
	ran := false
	_, _, err := dsync.NewGroup[string](c, "g").Do(ctxT(t), "k", func(context.Context) (string, error) { ran = true; return "v", nil })
	require.ErrorIs(t, err, dsync.ErrClosed)
	require.False(t, ran, "fn does not run once Close has begun")
	require.NoError(t, <-closed)
	keys, err := rc.Do(ctxT(t), rc.B().Keys().Pattern(prefix+":*").Build()).AsStrSlice()
	require.NoError(t, err)
	for _, k := range keys {
		require.False(t, strings.HasSuffix(k, ":tags"), "after Close returned, Redis still has the hold tag key %q", k)
	}
}
