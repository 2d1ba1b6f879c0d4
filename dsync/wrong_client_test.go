package dsync_test

import (
	"context"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReleaseThroughAnotherClientRefused (issue 38, item 1): a lock context
// passed to a primitive of the same name behind another Client of the same
// deployment and prefix is refused with ErrWrongContext, naming the lock
// and the Client that holds it; nothing changes in Redis (a third owner
// still cannot take the lock) and the lock context stays live; its own
// Client then releases it. Every primitive that takes a lock context.
func TestReleaseThroughAnotherClientRefused(t *testing.T) {
	a := newClient(t)
	b := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefixOf(t, a)))
	ctx := ctxT(t)
	type prim struct {
		what    string
		name    string
		lock    func(c *dsync.Client) (context.Context, error)
		release func(c *dsync.Client, lctx context.Context) error
		taken   func(c *dsync.Client) bool // another owner cannot take it now
	}
	condOf := func(c *dsync.Client) *dsync.Cond { return c.NewCond(c.NewMutex("wc-cond")) }
	prims := []prim{
		{"Mutex", "wc-mutex",
			func(c *dsync.Client) (context.Context, error) { return c.NewMutex("wc-mutex").LockContext(ctx) },
			func(c *dsync.Client, l context.Context) error { return c.NewMutex("wc-mutex").UnlockContext(l) },
			func(c *dsync.Client) bool { return !c.NewMutex("wc-mutex").TryLock() }},
		{"FairMutex", "wc-fair",
			func(c *dsync.Client) (context.Context, error) { return c.NewFairMutex("wc-fair").LockContext(ctx) },
			func(c *dsync.Client, l context.Context) error { return c.NewFairMutex("wc-fair").UnlockContext(l) },
			func(c *dsync.Client) bool { return !c.NewFairMutex("wc-fair").TryLock() }},
		{"RWMutex", "wc-rw",
			func(c *dsync.Client) (context.Context, error) { return c.NewRWMutex("wc-rw").LockContext(ctx) },
			func(c *dsync.Client, l context.Context) error { return c.NewRWMutex("wc-rw").UnlockContext(l) },
			func(c *dsync.Client) bool { return !c.NewRWMutex("wc-rw").TryRLock() }},
		{"RWMutex read", "wc-rwr",
			func(c *dsync.Client) (context.Context, error) { return c.NewRWMutex("wc-rwr").RLockContext(ctx) },
			func(c *dsync.Client, l context.Context) error { return c.NewRWMutex("wc-rwr").RUnlockContext(l) },
			func(c *dsync.Client) bool { return !c.NewRWMutex("wc-rwr").TryLock() }},
		{"Semaphore", "wc-sem",
			func(c *dsync.Client) (context.Context, error) { return c.NewSemaphore("wc-sem", 1).Acquire(ctx, 1) },
			func(c *dsync.Client, l context.Context) error { return c.NewSemaphore("wc-sem", 1).Release(l, 1) },
			func(c *dsync.Client) bool {
				return !c.NewSemaphore("wc-sem", 1).Locker(1).(interface{ TryLock() bool }).TryLock()
			}},
		{"Election Resign", "wc-el",
			func(c *dsync.Client) (context.Context, error) { return c.NewElection("wc-el").Campaign(ctx, "v") },
			func(c *dsync.Client, l context.Context) error { return c.NewElection("wc-el").Resign(l) },
			func(c *dsync.Client) bool {
				l, err := c.NewElection("wc-el").Leader(ctx)
				return err == nil && l.Value == "v"
			}},
		{"Election Proclaim", "wc-el2",
			func(c *dsync.Client) (context.Context, error) { return c.NewElection("wc-el2").Campaign(ctx, "v") },
			func(c *dsync.Client, l context.Context) error { return c.NewElection("wc-el2").Proclaim(l, "w") },
			func(c *dsync.Client) bool {
				l, err := c.NewElection("wc-el2").Leader(ctx)
				return err == nil && l.Value == "v"
			}},
		{"Cond Wait", "wc-cond",
			func(c *dsync.Client) (context.Context, error) { return c.NewMutex("wc-cond").LockContext(ctx) },
			func(c *dsync.Client, l context.Context) error { _, err := condOf(c).Wait(l); return err },
			func(c *dsync.Client) bool { return !c.NewMutex("wc-cond").TryLock() }},
	}
	ran := 0
	for _, p := range prims {
		t.Run(p.what, func(t *testing.T) {
			lctx, err := p.lock(a)
			require.NoError(t, err)
			err = p.release(b, lctx)
			require.Error(t, err, "a release through another Client must be refused")
			assert.ErrorIs(t, err, dsync.ErrWrongContext)
			assert.ErrorIs(t, err, dsync.ErrNotHeld)
			assert.Contains(t, err.Error(), `"`+p.name+`"`, "the error names the lock")
			assert.Contains(t, err.Error(), dsync.ClientID(a), "the error names the Client that holds it")
			require.NoError(t, lctx.Err(), "the holder's lock context stays live")
			assert.True(t, p.taken(b), "the lock is still held in Redis")
			require.NoError(t, lctx.Err())
			ran++
		})
	}
	require.Equal(t, len(prims), ran)
	// Its own Client releases it (one check suffices: the rest as above).
	lctx, err := a.NewMutex("wc-own").LockContext(ctx)
	require.NoError(t, err)
	require.ErrorIs(t, b.NewMutex("wc-own").UnlockContext(lctx), dsync.ErrWrongContext)
	require.NoError(t, a.NewMutex("wc-own").UnlockContext(lctx))
	require.Error(t, lctx.Err())
}

// TestCondOfAnotherClientsMutex (issue 38, sweep: wrong-client use): a
// Cond made by one Client for another Client's Mutex fails every call with
// ErrInvalidArgument naming it, instead of mixing the two Clients' keys
// and channels; the lock stays held.
func TestCondOfAnotherClientsMutex(t *testing.T) {
	a := newClient(t)
	b := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefixOf(t, a)))
	ctx := ctxT(t)
	m := a.NewMutex("cond-mixed")
	cd := b.NewCond(m)
	lctx, err := m.LockContext(ctx)
	require.NoError(t, err)
	_, err = cd.Wait(lctx)
	require.ErrorIs(t, err, dsync.ErrInvalidArgument)
	assert.Contains(t, err.Error(), `"cond-mixed"`)
	require.NoError(t, lctx.Err(), "the lock is still held")
	for _, f := range []func(context.Context) error{cd.Signal, cd.Broadcast} {
		err := f(ctx)
		require.ErrorIs(t, err, dsync.ErrInvalidArgument)
		assert.Contains(t, err.Error(), `"cond-mixed"`)
	}
	require.NoError(t, m.UnlockContext(lctx))
}

// A release by owner (a WithOwner context, not a lock context) through a
// Client that does not hold the lock frees it in Redis, as documented;
// the holding Client's lock context then ends at once (the releasing
// Client tells it, as a forced release does), not at its next renewal,
// so its holder does not go on believing it holds a lock another
// Client can take. The lease is a minute: without the telling, the lock
// context would stay live for lease/3.
func TestReleaseByOwnerThroughAnotherClientEndsTheHold(t *testing.T) {
	a := newClient(t, dsync.WithLease(time.Minute))
	b := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefixOf(t, a)), dsync.WithLease(time.Minute))
	type prim struct {
		what    string
		lock    func(c *dsync.Client, ctx context.Context) (context.Context, error)
		release func(c *dsync.Client, ctx context.Context) error
	}
	prims := []prim{
		{"Mutex",
			func(c *dsync.Client, ctx context.Context) (context.Context, error) {
				return c.NewMutex("bo-mutex").LockContext(ctx)
			},
			func(c *dsync.Client, ctx context.Context) error { return c.NewMutex("bo-mutex").UnlockContext(ctx) }},
		{"FairMutex",
			func(c *dsync.Client, ctx context.Context) (context.Context, error) {
				return c.NewFairMutex("bo-fair").LockContext(ctx)
			},
			func(c *dsync.Client, ctx context.Context) error { return c.NewFairMutex("bo-fair").UnlockContext(ctx) }},
		{"RWMutex",
			func(c *dsync.Client, ctx context.Context) (context.Context, error) {
				return c.NewRWMutex("bo-rw").LockContext(ctx)
			},
			func(c *dsync.Client, ctx context.Context) error { return c.NewRWMutex("bo-rw").UnlockContext(ctx) }},
		{"Semaphore",
			func(c *dsync.Client, ctx context.Context) (context.Context, error) {
				return c.NewSemaphore("bo-sem", 1).Acquire(ctx, 1)
			},
			func(c *dsync.Client, ctx context.Context) error { return c.NewSemaphore("bo-sem", 1).Release(ctx, 1) }},
	}
	for _, p := range prims {
		t.Run(p.what, func(t *testing.T) {
			owner := dsync.WithOwner(ctxT(t))
			lctx, err := p.lock(a, owner)
			require.NoError(t, err)
			require.NoError(t, p.release(b, owner), "a release by owner through another Client")
			select {
			case <-lctx.Done():
				require.ErrorIs(t, context.Cause(lctx), dsync.ErrLockLost)
			case <-time.After(2 * time.Second): // the first renewal is 5 s or more away
				t.Fatal("the holder's lock context outlived the release by its owner through another Client")
			}
		})
	}
}
