package dsync_test

import (
	"context"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/dsync/dsync/internal/redistest"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
)

// delCut is a rueidis client whose first DEL of an attempt marker (the
// lock's key, ":a:", the attempt) fails as a cut connection does, without
// reaching Redis; cut counts those.
type delCut struct {
	rueidis.Client
	cut atomic.Int32
}

func (r *delCut) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	if a := cmd.Commands(); len(a) == 2 && a[0] == "DEL" && strings.Contains(a[1], ":a:") && r.cut.CompareAndSwap(0, 1) {
		return rueidis.NewErrorResult(io.ErrUnexpectedEOF)
	}
	return r.Client.Do(ctx, cmd)
}

// The attempt marker of an acquisition by an owner the caller supplied
// (the lock's key, ":a:", the attempt; "1" for a lease, for the exact undo
// of a lost reply) is gone once Close returns, even when its delete
// failed without a reply (a cut connection): the delete is retried as the
// other cleanups are, and Close waits for it. The fault suite's soak
// asserts that nothing of a closed Client is left in Redis after its
// Close. Before, the one DEL was not retried: the marker stayed in Redis
// for the rest of its lease (here 20 s) after Close returned.
func TestAttemptMarkerGoneAfterCloseWhenItsDeleteFailed(t *testing.T) {
	s := redistest.Start(t)
	kinds := map[string]func(c *dsync.Client, ctx context.Context) error{
		"Mutex": func(c *dsync.Client, ctx context.Context) error {
			m := c.NewMutex("m")
			lctx, err := m.LockContext(ctx)
			if err != nil {
				return err
			}
			return m.UnlockContext(lctx)
		},
		"FairMutex": func(c *dsync.Client, ctx context.Context) error {
			m := c.NewFairMutex("f")
			lctx, err := m.LockContext(ctx)
			if err != nil {
				return err
			}
			return m.UnlockContext(lctx)
		},
		"RWMutex": func(c *dsync.Client, ctx context.Context) error {
			m := c.NewRWMutex("rw")
			lctx, err := m.RLockContext(ctx)
			if err != nil {
				return err
			}
			return m.RUnlockContext(lctx)
		},
	}
	for name, cycle := range kinds {
		t.Run(name, func(t *testing.T) {
			rc := s.Client(t)
			cut := &delCut{Client: rc}
			prefix := "markerdrop" + name
			c, err := dsync.NewClient(cut, dsync.WithKeyPrefix(prefix), dsync.WithLease(20*time.Second))
			require.NoError(t, err)
			require.NoError(t, cycle(c, dsync.WithOwner(ctxT(t))))
			require.NoError(t, c.Close())
			require.EqualValues(t, 1, cut.cut.Load(), "the marker's first DEL was cut")
			keys, err := rc.Do(context.Background(), rc.B().Keys().Pattern(prefix+"*:a:*").Build()).AsStrSlice()
			require.NoError(t, err)
			require.Empty(t, keys, "attempt markers left in Redis after Close returned")
		})
	}
}

// An acquisition by an owner the caller supplied that Redis applied but
// the replicas did not acknowledge (WithReplicaSync: ErrNotReplicated) is
// released by its token before the call returns, and its attempt marker
// goes with it: nothing of the attempt is left in Redis once Close
// returns. Before, that path released the hold and kept the marker ("1")
// for the rest of its lease (here 20 s). A server without replicas: the
// sync never comes. (The lock's own key stays, as after any release: it
// keeps the last token.)
func TestAttemptMarkerGoneAfterNotReplicated(t *testing.T) {
	s := redistest.Start(t)
	synced := dsync.WithReplicaSync(1, 50*time.Millisecond)
	kinds := map[string]func(c *dsync.Client, ctx context.Context) error{
		"Mutex": func(c *dsync.Client, ctx context.Context) error {
			_, err := c.NewMutex("m", synced).LockContext(ctx)
			return err
		},
		"FairMutex": func(c *dsync.Client, ctx context.Context) error {
			_, err := c.NewFairMutex("f", synced).LockContext(ctx)
			return err
		},
		"RWMutex": func(c *dsync.Client, ctx context.Context) error {
			_, err := c.NewRWMutex("rw", synced).RLockContext(ctx)
			return err
		},
	}
	for name, lock := range kinds {
		t.Run(name, func(t *testing.T) {
			rc := s.Client(t)
			prefix := "markersync" + name
			c, err := dsync.NewClient(rc, dsync.WithKeyPrefix(prefix), dsync.WithLease(20*time.Second))
			require.NoError(t, err)
			require.ErrorIs(t, lock(c, dsync.WithOwner(ctxT(t))), dsync.ErrNotReplicated)
			require.NoError(t, c.Close())
			keys, err := rc.Do(context.Background(), rc.B().Keys().Pattern(prefix+"*:a:*").Build()).AsStrSlice()
			require.NoError(t, err)
			require.Empty(t, keys, "attempt markers left in Redis after Close returned")
		})
	}
}
