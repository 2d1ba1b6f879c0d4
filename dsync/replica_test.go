package dsync_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/dsync/dsync/internal/redistest"
	"github.com/stretchr/testify/require"
)

// replicaKinds are the lock kinds WithReplicaSync applies to. Each takes
// its lock "r" through c with opts (try: without waiting, and every permit
// or the write side, so that it succeeds only on a free lock) and returns
// the release; key is the key its hold writes, under the test prefix.
var replicaKinds = []struct {
	kind string
	key  string
	lock func(c *dsync.Client, ctx context.Context, try bool, opts ...dsync.LockOption) (release func() error, err error)
}{
	{"Mutex", "{r}:mutex", func(c *dsync.Client, ctx context.Context, try bool, opts ...dsync.LockOption) (func() error, error) {
		m := c.NewMutex("r", opts...)
		return tookIt(m.UnlockContext)(lockOrTry(ctx, try, m.LockContext, m.TryLockContext))
	}},
	{"FairMutex", "{r}:fair", func(c *dsync.Client, ctx context.Context, try bool, opts ...dsync.LockOption) (func() error, error) {
		m := c.NewFairMutex("r", opts...)
		return tookIt(m.UnlockContext)(lockOrTry(ctx, try, m.LockContext, m.TryLockContext))
	}},
	{"RWMutex", "{r}:rw", func(c *dsync.Client, ctx context.Context, try bool, opts ...dsync.LockOption) (func() error, error) {
		m := c.NewRWMutex("r", opts...)
		return tookIt(m.UnlockContext)(lockOrTry(ctx, try, m.LockContext, m.TryLockContext))
	}},
	{"RWMutex.RLock", "{r}:rw", func(c *dsync.Client, ctx context.Context, try bool, opts ...dsync.LockOption) (func() error, error) {
		m := c.NewRWMutex("r", opts...)
		if try {
			return tookIt(m.UnlockContext)(m.TryLockContext(ctx))
		}
		return tookIt(m.RUnlockContext)(lockOrTry(ctx, false, m.RLockContext, nil))
	}},
	{"Semaphore", "{r}:sem:holders", func(c *dsync.Client, ctx context.Context, try bool, opts ...dsync.LockOption) (func() error, error) {
		s := c.NewSemaphore("r", 2, opts...)
		if try {
			l, ok, err := s.TryAcquire(ctx, 2)
			return tookIt(func(context.Context) error { return s.Release(l, 2) })(l, ok, err)
		}
		l, err := s.Acquire(ctx, 1)
		return tookIt(func(context.Context) error { return s.Release(l, 1) })(l, err == nil, err)
	}},
}

func lockOrTry(ctx context.Context, try bool, lock func(context.Context) (context.Context, error),
	tryLock func(context.Context) (context.Context, bool, error)) (context.Context, bool, error) {
	if try {
		return tryLock(ctx)
	}
	l, err := lock(ctx)
	return l, err == nil, err
}

// tookIt turns an acquisition's result into a release of the lock context,
// or an error if nothing was acquired.
func tookIt(unlock func(context.Context) error) func(context.Context, bool, error) (func() error, error) {
	return func(l context.Context, ok bool, err error) (func() error, error) {
		if err == nil && !ok {
			err = errors.New("not acquired: the lock is not free")
		}
		if err != nil {
			return nil, err
		}
		return func() error { return unlock(l) }, nil
	}
}

// TestReplicaSync: for every lock kind, an acquisition with WithReplicaSync
// is on the replica when it returns; with the replica stalled (SIGSTOP) it
// fails with ErrNotReplicated and leaves the lock free; after SIGCONT it
// works again.
func TestReplicaSync(t *testing.T) {
	// No diskless-sync delay (5s by default): the replica syncs at once.
	master := redistest.Start(t, "--repl-diskless-sync-delay", "0")
	replica := redistest.Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(master.Port))
	// The master counts a replica for WAIT once it is online (it has
	// acknowledged its initial sync).
	waitFor(t, 10*time.Second, "the replica to sync", func() bool {
		info, err := master.Do(t, "INFO", "replication").ToString()
		return err == nil && strings.Contains(info, "state=online")
	})
	for _, k := range replicaKinds {
		t.Run(k.kind, func(t *testing.T) {
			prefix := testPrefix(t)
			c := newClientOn(t, master.Client(t), dsync.WithKeyPrefix(prefix))
			key := prefix + ":" + k.key
			ctx := ctxT(t)
			// A generous bound where the replica runs: its first
			// acknowledgement after a full sync can be slow on a loaded machine.
			synced := dsync.WithReplicaSync(1, 2*time.Second)

			release, err := k.lock(c, ctx, false, synced)
			require.NoError(t, err)
			// WAIT returned: the replica has the hold already, no polling.
			n, err := replica.Do(t, "EXISTS", key).AsInt64()
			require.NoError(t, err, "replica has no %s", key)
			require.Equal(t, int64(1), n, "replica has no %s", key)
			require.NoError(t, release())

			require.NoError(t, replica.Signal(syscall.SIGSTOP))
			stopped := true
			defer func() {
				if stopped {
					replica.Signal(syscall.SIGCONT)
				}
			}()
			start := time.Now()
			_, err = k.lock(c, ctx, false, dsync.WithReplicaSync(1, 300*time.Millisecond))
			require.ErrorIs(t, err, dsync.ErrNotReplicated, "with the replica stopped")
			require.LessOrEqual(t, time.Since(start), 2*time.Second, "failed too late; the sync timeout is 300ms")
			// Nothing left behind: without the option the lock is free at once.
			release, err = k.lock(c, ctx, true)
			require.NoError(t, err, "after the failed synced acquisition")
			require.NoError(t, release())

			replica.Signal(syscall.SIGCONT)
			stopped = false
			release, err = k.lock(c, ctx, false, synced)
			require.NoError(t, err, "after SIGCONT")
			require.NoError(t, release())
		})
	}
}

// TestReplicaSyncCluster: the synced acquisition runs on the slot's master
// through a cluster client, whose masters each have one replica.
func TestReplicaSyncCluster(t *testing.T) {
	prefix := testPrefix(t)
	c := newClientOn(t, clusterRueidis(t), dsync.WithKeyPrefix(prefix))
	ctx := ctxT(t)
	for _, name := range namesOnMasters(t, prefix) {
		m := c.NewMutex(name, dsync.WithReplicaSync(1, time.Second))
		lctx, err := m.LockContext(ctx)
		require.NoError(t, err, "%s", name)
		require.NoError(t, m.UnlockContext(lctx))
		// Two replicas are more than any master has.
		_, err = c.NewMutex(name, dsync.WithReplicaSync(2, 50*time.Millisecond)).LockContext(ctx)
		require.ErrorIs(t, err, dsync.ErrNotReplicated, "%s: asking 2 replicas of 1", name)
	}
}
