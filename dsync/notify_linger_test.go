package dsync_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/dsync/dsync/internal/redistest"
	"github.com/stretchr/testify/require"
)

// Waits ended by their context leave no subscription behind while the
// Client stays open: a FairMutex waiter's own channel, subscribed with the
// caller's context, goes within two sweeps (subLinger, 2 s each) even when
// the context ended while the SUBSCRIBE was on its way.
func TestCancelledWaitsLeaveNoSubscription(t *testing.T) {
	s := redistest.Start(t)
	holder := newClientOn(t, s.Client(t), dsync.WithKeyPrefix("linger"))
	waiter := newClientOn(t, s.Client(t), dsync.WithKeyPrefix("linger"))
	ctx := ctxT(t)
	held, err := holder.NewFairMutex("busy").LockContext(ctx)
	require.NoError(t, err)
	f := waiter.NewFairMutex("busy")
	for range 300 {
		wctx, cancel := context.WithTimeout(ctx, time.Duration(rand.IntN(3000))*time.Microsecond)
		_, err := f.LockContext(wctx)
		cancel()
		require.Error(t, err)
	}
	rc := s.Client(t)
	waitFor(t, 6*time.Second, "no channel subscribed", func() bool {
		// The locks' channels ("linger:{<name>}:..."), not the Clients'
		// control channel ("linger:force"), subscribed for their life.
		chans, err := rc.Do(ctx, rc.B().PubsubChannels().Pattern("linger:{*").Build()).AsStrSlice()
		require.NoError(t, err)
		return len(chans) == 0
	})
	require.NoError(t, holder.NewFairMutex("busy").UnlockContext(held))
}
