package dsync_test

import (
	"context"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/dsync/dsync/internal/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A wait cancelled while Redis does not answer (CLIENT PAUSE: every
// command waits) returns within 100 ms of the cancellation (of a context
// without a deadline), for the
// primitives whose give-up talks to Redis (a FairMutex leaves its queue, a
// Semaphore undoes its place): the cleanup goes on in the background, and
// the queue is clean once Redis answers again.
func TestCancelledWaitReturnsWhileRedisStalls(t *testing.T) {
	s := redistest.Start(t)
	holder := newClientOn(t, s.Client(t), dsync.WithKeyPrefix("stall"))
	waiter := newClientOn(t, s.Client(t), dsync.WithKeyPrefix("stall"))
	admin := s.Client(t)
	ctx := ctxT(t)
	for _, tc := range []struct {
		kind string
		hold func() (release func())
		wait func(ctx context.Context) error
	}{
		{"FairMutex", func() func() {
			l, err := holder.NewFairMutex("f").LockContext(ctx)
			require.NoError(t, err)
			return func() { require.NoError(t, holder.NewFairMutex("f").UnlockContext(l)) }
		}, func(ctx context.Context) error { _, err := waiter.NewFairMutex("f").LockContext(ctx); return err }},
		{"Semaphore", func() func() {
			l, err := holder.NewSemaphore("s", 1).Acquire(ctx, 1)
			require.NoError(t, err)
			return func() { require.NoError(t, holder.NewSemaphore("s", 1).Release(l, 1)) }
		}, func(ctx context.Context) error { _, err := waiter.NewSemaphore("s", 1).Acquire(ctx, 1); return err }},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			release := tc.hold()
			// A context with no deadline: rueidis waits out a command in
			// flight on a connection it uses synchronously until the
			// reply or the context's deadline, not its cancellation (see
			// docs/design.md, "Waiting"); with no deadline it stops at the
			// cancellation.
			wctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			errc := make(chan error, 1)
			go func() { errc <- tc.wait(wctx) }()
			// The waiter has queued once its first attempt is answered.
			waitFor(t, 5*time.Second, "the waiter queued", func() bool {
				st, err := holder.Inspect(ctx, map[string]string{"FairMutex": "f", "Semaphore": "s"}[tc.kind])
				return err == nil && len(st) == 1 && len(st[0].Waiters) == 1
			})
			require.NoError(t, admin.Do(ctx, admin.B().ClientPause().Timeout(1000).All().Build()).Error())
			cancel()
			cancelled := time.Now()
			select {
			case err := <-errc:
				assert.ErrorIs(t, err, context.Canceled)
				assert.Less(t, time.Since(cancelled), 100*time.Millisecond, "the cancelled wait returned late")
			case <-time.After(5 * time.Second):
				t.Fatal("the cancelled wait did not return")
			}
			// Redis answers again after the pause: the queue empties.
			waitFor(t, 5*time.Second, "the waiter gone from the queue", func() bool {
				st, err := holder.Inspect(ctx, map[string]string{"FairMutex": "f", "Semaphore": "s"}[tc.kind])
				return err == nil && len(st) == 1 && len(st[0].Waiters) == 0
			})
			release()
		})
	}
}
