package dsync_test

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// recv returns the next state from an Observe channel, failing after d.
func recv(t testing.TB, ch <-chan dsync.Leader, d time.Duration) dsync.Leader {
	t.Helper()
	select {
	case l, ok := <-ch:
		require.True(t, ok, "observe channel closed")
		return l
	case <-time.After(d):
		t.Fatalf("no change observed within %v", d)
		return dsync.Leader{}
	}
}

// requireNoMore fails if ch delivers a state within d (it may be closed).
func requireNoMore(t testing.TB, ch <-chan dsync.Leader, d time.Duration) {
	t.Helper()
	select {
	case l, ok := <-ch:
		if ok {
			t.Fatalf("unexpected change observed: %+v", l)
		}
	case <-time.After(d):
	}
}

func TestElectionCampaignProclaimResign(t *testing.T) {
	c := newClient(t)
	c2 := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefixOf(t, c)))
	e, e2 := c.NewElection("cpr"), c2.NewElection("cpr")
	ctx := ctxT(t)

	_, err := e.Leader(ctx)
	require.ErrorIs(t, err, dsync.ErrNoLeader)

	before := time.Now()
	lctx, err := e.Campaign(ctx, "alpha")
	require.NoError(t, err)
	term, ok := dsync.FencingToken(lctx)
	require.True(t, ok, "the leadership context carries the term")
	owner, _ := dsync.OwnerOf(lctx)

	l, err := e2.Leader(ctx)
	require.NoError(t, err)
	assert.Equal(t, dsync.Leader{Value: "alpha", Owner: owner, Term: term, Since: l.Since}, l)
	assert.WithinDuration(t, before, l.Since, 2*time.Second, "Since is the server time the term began")

	for _, v := range []string{"", "\x00 bin\n{}% \xff", strings.Repeat("v", dsync.MaxLeaderValueLen)} {
		require.NoError(t, e.Proclaim(lctx, v))
		l, err := e2.Leader(ctx)
		require.NoError(t, err)
		require.Equal(t, v, l.Value, "any value, binary and empty included")
	}
	require.NoError(t, e.Proclaim(lctx, "beta"))
	l2, err := e2.Leader(ctx)
	require.NoError(t, err)
	assert.Equal(t, dsync.Leader{Value: "beta", Owner: owner, Term: term, Since: l.Since}, l2, "Proclaim keeps the term")

	// A second candidate waits until the leader resigns.
	got := make(chan context.Context, 1)
	go func() {
		l, err := e2.Campaign(ctx, "gamma")
		assert.NoError(t, err)
		got <- l
	}()
	select {
	case <-got:
		t.Fatal("a second candidate was elected while the leader leads")
	case <-time.After(200 * time.Millisecond):
	}
	require.NoError(t, lctx.Err())
	require.NoError(t, e.Resign(lctx))
	require.Error(t, lctx.Err(), "Resign cancels the leadership context")
	var lctx2 context.Context
	select {
	case lctx2 = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("the next candidate was not elected after Resign")
	}
	require.NotNil(t, lctx2)
	term2, _ := dsync.FencingToken(lctx2)
	assert.Greater(t, term2, term, "terms grow")
	l3, err := e.Leader(ctx)
	require.NoError(t, err)
	assert.Equal(t, "gamma", l3.Value)
	assert.Equal(t, term2, l3.Term)

	// The old leadership can no longer act.
	require.ErrorIs(t, e.Proclaim(lctx, "stale"), dsync.ErrNotHeld)
	require.ErrorIs(t, e.Resign(lctx), dsync.ErrNotHeld)
	require.NoError(t, e2.Resign(lctx2))
	_, err = e.Leader(ctx)
	require.ErrorIs(t, err, dsync.ErrNoLeader)
}

// Campaign's context bounds the wait, not the term: when it ends after
// Campaign returned, the leadership context lives on. A context derived
// from the leadership context and cancelled makes Proclaim fail with its
// error, and Resign still ends the term.
func TestElectionCampaignContextEnds(t *testing.T) {
	e := newClient(t).NewElection("cancelled-parent")
	parent, cancel := context.WithTimeout(dsync.WithOwner(ctxT(t)), time.Hour)
	lctx, err := e.Campaign(parent, "v")
	require.NoError(t, err)
	cancel()
	require.NoError(t, lctx.Err(), "the term goes on after Campaign's context ended")
	o1, _ := dsync.OwnerOf(parent)
	o2, _ := dsync.OwnerOf(lctx)
	require.Equal(t, o1, o2, "the leadership context carries the context's values")
	require.NoError(t, e.Proclaim(lctx, "w"))
	dctx, dcancel := context.WithCancel(lctx)
	dcancel()
	require.ErrorIs(t, e.Proclaim(dctx, "x"), context.Canceled)
	l, err := e.Leader(ctxT(t))
	require.NoError(t, err)
	require.Equal(t, "w", l.Value)
	require.NoError(t, e.Resign(dctx))
	require.Error(t, lctx.Err(), "Resign ends the term")
	_, err = e.Leader(ctxT(t))
	require.ErrorIs(t, err, dsync.ErrNoLeader)
}

// A term with a fixed lease ends when it runs out: the leader is gone for
// Leader and Observe, the leadership context is cancelled as lost, and the
// next candidate takes over.
func TestElectionLeaseRunsOut(t *testing.T) {
	c := newClient(t)
	const lease = 300 * time.Millisecond
	e := c.NewElection("runs-out", dsync.WithLeaseTime(lease))
	ctx := ctxT(t)
	obs := e.Observe(ctx)
	require.Equal(t, dsync.Leader{}, recv(t, obs, 5*time.Second), "no leader at first")
	start := time.Now() // before the term's lease began
	lctx, err := e.Campaign(ctx, "short")
	require.NoError(t, err)
	first := recv(t, obs, 5*time.Second)
	require.Equal(t, "short", first.Value)
	require.Equal(t, dsync.Leader{}, recv(t, obs, 5*time.Second), "the lapsed term is observed")
	took := time.Since(start)
	assert.GreaterOrEqual(t, took, lease*9/10, "the loss was reported before the lease ran out")
	t.Logf("a %v term's loss observed %v after Campaign was called", lease, took)
	select {
	case <-lctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the lapsed term's context was not cancelled")
	}
	require.ErrorIs(t, context.Cause(lctx), dsync.ErrLockLost)
	_, err = e.Leader(ctx)
	require.ErrorIs(t, err, dsync.ErrNoLeader, "the observer saw the loss, so Leader does too")
	require.ErrorIs(t, e.Proclaim(lctx, "late"), dsync.ErrNotHeld)

	lctx2, err := e.Campaign(ctx, "next")
	require.NoError(t, err)
	l := recv(t, obs, 5*time.Second)
	require.Equal(t, "next", l.Value)
	require.Greater(t, l.Term, first.Term)
	require.NoError(t, e.Resign(lctx2))
	require.Equal(t, dsync.Leader{}, recv(t, obs, 5*time.Second))
}

// A reader that keeps up sees every change in order; one that does not
// gets the changes in order with some skipped, ending on the current one.
func TestElectionObserveOrder(t *testing.T) {
	c := newClient(t)
	c2 := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefixOf(t, c)))
	e, e2 := c.NewElection("order"), c2.NewElection("order")
	ctx := ctxT(t)
	obs := e2.Observe(ctx)
	require.Equal(t, dsync.Leader{}, recv(t, obs, 5*time.Second))

	lctx, err := e.Campaign(ctx, "v0")
	require.NoError(t, err)
	require.Equal(t, "v0", recv(t, obs, 5*time.Second).Value)
	for i := 1; i <= 5; i++ {
		require.NoError(t, e.Proclaim(lctx, "v"+strconv.Itoa(i)))
	}
	// Resign, and the next candidate elected at once: both changes are
	// delivered, in order, although the record changed twice in a row.
	next := make(chan context.Context, 1)
	go func() {
		l, err := e2.Campaign(ctx, "w")
		assert.NoError(t, err)
		next <- l
	}()
	waitFor(t, 5*time.Second, "the candidate to queue", func() bool {
		return llen(t, c, "order") == 1
	})
	require.NoError(t, e.Resign(lctx))
	for i := 1; i <= 5; i++ {
		require.Equal(t, "v"+strconv.Itoa(i), recv(t, obs, 5*time.Second).Value)
	}
	require.Equal(t, dsync.Leader{}, recv(t, obs, 5*time.Second), "the resignation")
	require.Equal(t, "w", recv(t, obs, 5*time.Second).Value)
	lctx2 := <-next

	// A slow reader: 100 values proclaimed while nobody reads.
	for i := 0; i < 100; i++ {
		require.NoError(t, e2.Proclaim(lctx2, "s"+strconv.Itoa(i)))
	}
	prev, n := -1, 0
	for prev != 99 {
		l := recv(t, obs, 5*time.Second)
		i, err := strconv.Atoi(strings.TrimPrefix(l.Value, "s"))
		require.NoError(t, err, "value %q", l.Value)
		require.Greater(t, i, prev, "changes out of order")
		prev, n = i, n+1
	}
	assert.Less(t, n, 100, "a slow reader gets intermediate states coalesced")
	requireNoMore(t, obs, 100*time.Millisecond)
}

// Observe gets every change after its pub/sub connection is killed,
// including one made while it was down.
func TestElectionObservePubsubKilled(t *testing.T) {
	c := newClient(t)
	c2 := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefixOf(t, c)))
	e, e2 := c.NewElection("pskill"), c2.NewElection("pskill")
	ctx := ctxT(t)
	rc := newRueidis(t)
	obs := e2.Observe(ctx)
	require.Equal(t, dsync.Leader{}, recv(t, obs, 5*time.Second))
	lctx, err := e.Campaign(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, "a", recv(t, obs, 5*time.Second).Value)
	for i := 0; i < 3; i++ {
		require.NoError(t, rc.Do(ctx, rc.B().ClientKill().TypePubsub().Build()).Error())
		v := "after-kill-" + strconv.Itoa(i)
		require.NoError(t, e.Proclaim(lctx, v))
		require.Equal(t, v, recv(t, obs, 5*time.Second).Value, "change made as the connection broke")
		waitSubscribed(t, rc, electionChannel(prefixOf(t, c), "pskill"))
		v += "-resubscribed"
		require.NoError(t, e.Proclaim(lctx, v))
		require.Equal(t, v, recv(t, obs, 5*time.Second).Value)
	}
	require.NoError(t, e.Resign(lctx))
	require.Equal(t, dsync.Leader{}, recv(t, obs, 5*time.Second))
}

func TestElectionObserveClosed(t *testing.T) {
	c := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(testPrefix(t)))
	e := c.NewElection("closing")
	ctx, cancel := context.WithCancel(ctxT(t))
	obs := e.Observe(ctx)
	require.Equal(t, dsync.Leader{}, recv(t, obs, 5*time.Second))
	cancel()
	waitClosed(t, obs)
	obs = e.Observe(ctxT(t))
	require.Equal(t, dsync.Leader{}, recv(t, obs, 5*time.Second))
	lctx, err := e.Campaign(ctxT(t), "x")
	require.NoError(t, err)
	require.NoError(t, c.Close())
	waitClosed(t, obs)
	require.ErrorIs(t, context.Cause(lctx), dsync.ErrClosed)
	waitClosed(t, e.Observe(ctxT(t)))
}

func waitClosed(t testing.TB, ch <-chan dsync.Leader) {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-deadline:
			t.Fatal("observe channel not closed")
		}
	}
}

func TestElectionBadInput(t *testing.T) {
	c := newClient(t)
	ctx := ctxT(t)
	for _, name := range []string{"", strings.Repeat("x", dsync.MaxNameLen+1)} {
		e := c.NewElection(name)
		_, err := e.Campaign(ctx, "v")
		require.ErrorIs(t, err, dsync.ErrInvalidArgument)
		_, err = e.Leader(ctx)
		require.ErrorIs(t, err, dsync.ErrInvalidArgument)
		require.ErrorIs(t, e.Proclaim(ctx, "v"), dsync.ErrInvalidArgument)
		require.ErrorIs(t, e.Resign(ctx), dsync.ErrInvalidArgument)
		waitClosed(t, e.Observe(ctx))
	}
	e := c.NewElection("bad")
	//lint:ignore SA1012 a nil context is the misuse under test
	_, err := e.Campaign(nil, "v") //nolint:staticcheck
	require.ErrorIs(t, err, dsync.ErrInvalidArgument)
	//lint:ignore SA1012 a nil context is the misuse under test
	require.ErrorIs(t, e.Resign(nil), dsync.ErrInvalidArgument) //nolint:staticcheck
	_, err = e.Campaign(ctx, strings.Repeat("v", dsync.MaxLeaderValueLen+1))
	require.ErrorIs(t, err, dsync.ErrInvalidArgument)

	// Contexts that do not lead: none, another owner, another lock's.
	require.ErrorIs(t, e.Proclaim(ctx, "v"), dsync.ErrNotHeld)
	require.ErrorIs(t, e.Resign(ctx), dsync.ErrNotHeld)
	require.ErrorIs(t, e.Resign(dsync.WithOwner(ctx)), dsync.ErrNotHeld)
	octx := dsync.WithOwner(ctx)
	lctx, err := e.Campaign(octx, "v")
	require.NoError(t, err)
	mctx, err := c.NewMutex("bad").LockContext(octx)
	require.NoError(t, err)
	require.ErrorIs(t, e.Proclaim(mctx, "w"), dsync.ErrNotHeld, "a Mutex's lock context of the same owner")
	require.ErrorIs(t, e.Resign(mctx), dsync.ErrNotHeld, "a Mutex's lock context of the same owner")
	require.NoError(t, lctx.Err(), "the leadership survives")
	// The same owner campaigning again.
	_, err = e.Campaign(octx, "again")
	require.ErrorIs(t, err, dsync.ErrInvalidArgument)
	require.NoError(t, lctx.Err(), "the leadership survives")
	l, err := e.Leader(ctx)
	require.NoError(t, err)
	require.Equal(t, "v", l.Value)
	require.NoError(t, e.Resign(lctx))
	require.ErrorIs(t, e.Resign(lctx), dsync.ErrNotHeld, "resigned twice")

	// A cancelled context, and a wait ended by its context, leave nothing.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err = e.Campaign(cctx, "v")
	require.ErrorIs(t, err, context.Canceled)
	lctx, err = e.Campaign(ctx, "holder")
	require.NoError(t, err)
	wctx, wcancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer wcancel()
	_, err = e.Campaign(wctx, "waiter")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Zero(t, llen(t, c, "bad"), "the candidate left the line")
	require.NoError(t, e.Resign(lctx))
	_, err = e.Leader(ctx)
	require.ErrorIs(t, err, dsync.ErrNoLeader)

	// The longest name works.
	long := c.NewElection(strings.Repeat("L", dsync.MaxNameLen))
	lctx, err = long.Campaign(ctx, "long")
	require.NoError(t, err)
	l, err = long.Leader(ctx)
	require.NoError(t, err)
	require.Equal(t, "long", l.Value)
	require.NoError(t, long.Resign(lctx))

	// A closed Client.
	require.NoError(t, c.Close())
	_, err = e.Campaign(ctx, "v")
	require.ErrorIs(t, err, dsync.ErrClosed)
	_, err = e.Leader(ctx)
	require.ErrorIs(t, err, dsync.ErrClosed)
	require.ErrorIs(t, e.Proclaim(lctx, "v"), dsync.ErrClosed)
	require.ErrorIs(t, e.Resign(lctx), dsync.ErrClosed)
	waitClosed(t, e.Observe(ctx))
	require.True(t, errors.Is(err, dsync.ErrClosed))
}

// An observer whose Client's ACL user may not run a command the election's
// read needs (here LLEN) ends: its channel closes, long before its context
// does, and the Client's logger says why. (It used to retry forever,
// neither delivering nor closing.)
func TestElectionObserveRefused(t *testing.T) {
	s := server(t)
	user := "observe-" + testPrefix(t)
	require.NoError(t, s.Do(t, "ACL", "SETUSER", user, "on", ">pw", "~*", "&*", "+@all", "-llen").Error())
	t.Cleanup(func() { _ = s.Do(t, "ACL", "DELUSER", user).Error() })
	var logged atomic.Int64
	log := slog.New(logCount{msg: "dsync: Observe ended: Redis refuses the election's read (grant the Client's ACL user the commands dsync needs)", n: &logged})
	c := newClientOn(t, s.Client(t, func(o *rueidis.ClientOption) { o.Username, o.Password = user, "pw" }), dsync.WithLogger(log))
	_, err := c.NewElection("refused").Leader(ctxT(t))
	require.Error(t, err, "Leader reads as Observe does: refused")
	require.NotErrorIs(t, err, dsync.ErrNoLeader)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ch := c.NewElection("refused").Observe(ctx)
	select {
	case l, ok := <-ch:
		require.False(t, ok, "a refused observer delivered %+v", l)
	case <-time.After(5 * time.Second):
		t.Fatal("a refused observer's channel is still open after 5 s")
	}
	require.NoError(t, ctx.Err(), "closed by the refusal, not by its context")
	require.EqualValues(t, 1, logged.Load(), "the refusal logged once")
}
