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

// Inspect, List and ForceUnlock report an election under its own name and
// kind; a forced release ends the term as a loss: observers see no leader,
// then the next candidate, and the deposed leader's context is cancelled.
func TestElectionInspectListForce(t *testing.T) {
	const lease = 600 * time.Millisecond
	c := newClient(t, dsync.WithLease(lease))
	c2 := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefixOf(t, c)), dsync.WithLease(lease))
	ctx := ctxT(t)
	e := c.NewElection("db primary")
	obs := e.Observe(ctx)
	require.Equal(t, dsync.Leader{}, recv(t, obs, 5*time.Second))
	lctx, err := e.Campaign(ctx, "host-a")
	require.NoError(t, err)
	leader := recv(t, obs, 5*time.Second)
	next := make(chan context.Context, 1)
	cctx := dsync.WithOwner(ctx)
	go func() {
		l, err := c2.NewElection("db primary").Campaign(cctx, "host-b")
		assert.NoError(t, err)
		next <- l
	}()
	waitFor(t, 5*time.Second, "the candidate to queue", func() bool { return llen(t, c, "db primary") == 1 })

	st, err := c.Inspect(ctx, "db primary")
	require.NoError(t, err)
	require.Len(t, st, 1, "%+v", st)
	s := st[0]
	require.Equal(t, dsync.KindElection, s.Kind)
	require.Equal(t, "db primary", s.Name)
	require.Equal(t, leader, s.Leader)
	require.Len(t, s.Holders, 1)
	require.Equal(t, leader.Owner, s.Holders[0].Owner)
	require.Equal(t, leader.Term, s.Holders[0].Token)
	require.Len(t, s.Waiters, 1)
	cand, _ := dsync.OwnerOf(cctx)
	require.Equal(t, cand, s.Waiters[0].Owner)

	refs, err := c.List(ctx, "")
	require.NoError(t, err)
	require.Equal(t, []dsync.LockRef{{Kind: dsync.KindElection, Name: "db primary"}}, refs)

	refs, err = c.ForceUnlock(ctx, "db primary")
	require.NoError(t, err)
	require.Equal(t, []dsync.LockRef{{Kind: dsync.KindElection, Name: "db primary"}}, refs)
	require.Equal(t, dsync.Leader{}, recv(t, obs, 5*time.Second), "the forced end of the term")
	nl := recv(t, obs, 5*time.Second)
	require.Equal(t, "host-b", nl.Value)
	require.Greater(t, nl.Term, leader.Term)
	lctx2 := <-next
	select {
	case <-lctx.Done():
		require.ErrorIs(t, context.Cause(lctx), dsync.ErrLockLost)
	case <-time.After(5 * time.Second):
		t.Fatal("the deposed leader's context was not cancelled")
	}
	require.ErrorIs(t, e.Resign(lctx), dsync.ErrNotHeld)
	require.NoError(t, c2.NewElection("db primary").Resign(lctx2))
	require.Equal(t, dsync.Leader{}, recv(t, obs, 5*time.Second))
}

// An observer sends nothing to Redis while nothing changes (here, within
// the leader's lease), and one read per change.
func TestElectionObserveIdle(t *testing.T) {
	s := redistest.Start(t)
	rc := s.Client(t)
	prefix := testPrefix(t)
	a := newClientOn(t, s.Client(t), dsync.WithKeyPrefix(prefix))
	b := newClientOn(t, s.Client(t), dsync.WithKeyPrefix(prefix))
	ctx := ctxT(t)
	obs := b.NewElection("idle").Observe(ctx)
	require.Equal(t, dsync.Leader{}, recv(t, obs, 5*time.Second))
	e := a.NewElection("idle")
	lctx, err := e.Campaign(ctx, "v")
	require.NoError(t, err)
	require.Equal(t, "v", recv(t, obs, 5*time.Second).Value)

	// A signal that raced with the read that found "v" may cause one more
	// read (finding nothing new); then all is quiet.
	requireNoMore(t, obs, 300*time.Millisecond)
	resetStats(t, ctx, rc, a, b)
	requireNoMore(t, obs, 1500*time.Millisecond)
	n, info := commandCalls(t, ctx, rc)
	require.Zero(t, n, "commands while nothing changed:\n%s", info)

	require.NoError(t, e.Proclaim(lctx, "w"))
	require.Equal(t, "w", recv(t, obs, 5*time.Second).Value)
	n, info = commandCalls(t, ctx, rc)
	require.NotZero(t, n, "the counter counts:\n%s", info)
	t.Logf("a Proclaim and the observer's read: %d commands", n)
	require.NoError(t, e.Resign(lctx))
}

// What a term costs Redis, uncontended: Campaign (the fair lock's acquire,
// the record) and Resign (the record, the release). The counts include the
// commands inside the scripts.
func TestElectionCommandsPerTerm(t *testing.T) {
	s := redistest.Start(t)
	rc := s.Client(t)
	c := newClientOn(t, s.Client(t), dsync.WithKeyPrefix(testPrefix(t)))
	ctx := ctxT(t)
	e := c.NewElection("cost")
	lctx, err := e.Campaign(ctx, "warm") // scripts loaded, keys made
	require.NoError(t, err)
	require.NoError(t, e.Resign(lctx))
	resetStats(t, ctx, rc, c)
	lctx, err = e.Campaign(ctx, "v")
	require.NoError(t, err)
	campaign, info := commandCalls(t, ctx, rc)
	require.NoError(t, e.Resign(lctx))
	total, info2 := commandCalls(t, ctx, rc)
	t.Logf("Campaign %d commands, Resign %d", campaign, total-campaign)
	require.LessOrEqual(t, campaign, 20, "Campaign (14 on 2026-11-25: 2 scripts)\n%s", info)
	require.LessOrEqual(t, total-campaign, 20, "Resign (13 on 2026-11-25: 2 scripts)\n%s", info2)
}
