package dsync_test

import (
	"context"
	"errors"
	"io"
	"syscall"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/dsync/dsync/internal/redistest"
	"github.com/stretchr/testify/require"
)

// Redis stalled, then restarted with its data lost: calls fail with the
// caller's deadline, the leader's term is lost by its lease clock, and the
// observer (in another Client) reports no leader each time and then the
// next one.
func TestElectionRedisGone(t *testing.T) {
	s := redistest.Start(t)
	const lease = time.Second
	prefix := testPrefix(t)
	a := newClientOn(t, s.Client(t), dsync.WithKeyPrefix(prefix), dsync.WithLease(lease))
	b := newClientOn(t, s.Client(t), dsync.WithKeyPrefix(prefix), dsync.WithLease(lease))
	ctx := ctxT(t)
	ea, eb := a.NewElection("gone"), b.NewElection("gone")
	obs := eb.Observe(ctx)
	require.Equal(t, dsync.Leader{}, recv(t, obs, 5*time.Second))
	lctx, err := ea.Campaign(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, "a", recv(t, obs, 5*time.Second).Value)

	// Stalled.
	require.NoError(t, s.Signal(syscall.SIGSTOP))
	stalled := true
	defer func() {
		if stalled {
			s.Signal(syscall.SIGCONT)
		}
	}()
	// Proclaim first: it needs the term live when it is called, and the
	// term's lease clock (1 s from the last renewal, up to lease/3 before
	// the stop) may end within 200 ms of a call made after another.
	short, cancel := context.WithTimeout(lctx, 200*time.Millisecond)
	require.ErrorIs(t, ea.Proclaim(short, "x"), context.DeadlineExceeded)
	cancel()
	short, cancel = context.WithTimeout(ctx, 200*time.Millisecond)
	_, err = eb.Leader(short)
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	select {
	case <-lctx.Done():
		require.ErrorIs(t, context.Cause(lctx), dsync.ErrLockLost)
	case <-time.After(5 * lease):
		t.Fatal("the term outlived its lease while Redis was stalled")
	}
	require.NoError(t, s.Signal(syscall.SIGCONT))
	stalled = false
	l := recv(t, obs, 10*time.Second)
	if l.Value == "x" {
		// The Proclaim whose caller gave up was still in Redis' socket, and
		// ran within the lease (the lease clock ends a little early).
		l = recv(t, obs, 10*time.Second)
	}
	require.Equal(t, dsync.Leader{}, l, "the lapsed term, once Redis is back")

	// Restarted, its data lost.
	lctx, err = ea.Campaign(ctx, "a2")
	require.NoError(t, err)
	require.Equal(t, "a2", recv(t, obs, 5*time.Second).Value)
	require.NoError(t, s.Restart())
	require.Equal(t, dsync.Leader{}, recv(t, obs, 10*time.Second), "the term Redis forgot")
	select {
	case <-lctx.Done():
		require.ErrorIs(t, context.Cause(lctx), dsync.ErrLockLost)
	case <-time.After(5 * lease):
		t.Fatal("the forgotten term's context was not cancelled")
	}
	// The restart broke the connections: a first call may meet one that
	// rueidis has not yet seen broken (on a busy machine its reader runs
	// late) and fail with io.EOF, "the call may be retried" (a failed
	// acquisition holds nothing); it is retried on that error alone.
	for try := 0; ; try++ {
		lctx, err = eb.Campaign(ctx, "b")
		if err == nil || !errors.Is(err, io.EOF) || try == 3 {
			break
		}
		t.Logf("Campaign after the restart: %v; again", err)
	}
	require.NoError(t, err)
	require.Equal(t, "b", recv(t, obs, 10*time.Second).Value)
	require.NoError(t, eb.Resign(lctx))
	require.Equal(t, dsync.Leader{}, recv(t, obs, 5*time.Second))
}
