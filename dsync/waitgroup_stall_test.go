package dsync_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/dsync/dsync/dsync"
	"github.com/dsync/dsync/internal/redistest"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
)

// timingOut is a rueidis client whose calls, once armed, fail with
// context.DeadlineExceeded as rueidis' own timeouts do (a dial or a
// handshake under another caller's context, a stalled connection's
// keepalive), the caller's context live.
type timingOut struct {
	rueidis.Client
	armed atomic.Bool
}

func (c *timingOut) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	if c.armed.Load() {
		return rueidis.NewErrorResult(context.DeadlineExceeded)
	}
	return c.Client.Do(ctx, cmd)
}

func (c *timingOut) DoMulti(ctx context.Context, cmds ...rueidis.Completed) []rueidis.RedisResult {
	if !c.armed.Load() {
		return c.Client.DoMulti(ctx, cmds...)
	}
	res := make([]rueidis.RedisResult, len(cmds))
	for i := range res {
		res[i] = rueidis.NewErrorResult(context.DeadlineExceeded)
	}
	return res
}

// An Add that fails on a timeout of rueidis' own (the caller's context
// live) returns an error that does not read as the caller's deadline and
// says that the delta's fate is unknown.
func TestWaitGroupAddOwnTimeout(t *testing.T) {
	s := redistest.Start(t)
	rc := &timingOut{Client: s.Client(t)}
	c := newClientOn(t, rc, dsync.WithLogger(quietLog))
	wg := c.NewWaitGroup("stalled")
	ctx := ctxT(t)
	require.NoError(t, wg.Add(ctx, 1))
	rc.armed.Store(true)
	err := wg.Add(ctx, 1)
	rc.armed.Store(false)
	require.Error(t, err)
	require.NoError(t, ctx.Err())
	require.False(t, errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled),
		"Add's error reads as the caller's context's, which is live: %v", err)
	require.ErrorContains(t, err, "unknown whether the delta was applied")
	require.ErrorContains(t, err, `"stalled"`)
	require.NoError(t, wg.Add(ctx, -1), "Add after the timeouts")
}
