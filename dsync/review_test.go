package dsync_test

import (
	"context"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/dsync/dsync/internal/redistest"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A failure that is not the caller's context ending, here rueidis' own
// connection timeout against a stalled server, must not pass for one:
// errors.Is(err, context.DeadlineExceeded) holds only when ctx ended the
// call. Mutex and FairMutex already meet this; Semaphore and Once did not.
// (The Mutex goes first: the first call after the stall meets a broken
// connection rather than a timeout.)
func TestOwnTimeoutIsNotContextError(t *testing.T) {
	s := redistest.Start(t)
	rc := s.Client(t, func(o *rueidis.ClientOption) {
		o.ConnWriteTimeout = 300 * time.Millisecond
		o.Dialer = net.Dialer{Timeout: 300 * time.Millisecond}
	})
	c := newClientOn(t, rc, dsync.WithKeyPrefix("own"))
	ctx := ctxT(t)
	require.NoError(t, s.Signal(syscall.SIGSTOP))
	t.Cleanup(func() { s.Signal(syscall.SIGCONT) })
	calls := []struct {
		name string
		call func() error
	}{
		{"Mutex.LockContext", func() error { _, err := c.NewMutex("m").LockContext(ctx); return err }},
		{"Semaphore.Acquire", func() error { _, err := c.NewSemaphore("s", 2).Acquire(ctx, 1); return err }},
		{"Once.Do", func() error { return c.NewOnce("o").Do(ctx, func(context.Context) error { return nil }) }},
	}
	for _, tc := range calls {
		err := tc.call()
		require.Error(t, err, "%s succeeded against a stalled server", tc.name)
		require.NoError(t, ctx.Err(), "%s: the test's context ended: %v", tc.name, err)
		t.Logf("%s: %v", tc.name, err)
		assert.NotErrorIs(t, err, context.DeadlineExceeded, "%s: a context error while ctx is live", tc.name)
		assert.NotErrorIs(t, err, context.Canceled, "%s: a context error while ctx is live", tc.name)
	}
}

// Two goroutines acquiring with the same owner while another process holds
// the lock (one waits in Redis, one in the local queue): when the lock comes to the owner, the second re-enters at once,
// as it would had it arrived a moment later, instead of waiting in the
// local queue for the first to release (which deadlocks a holder that waits
// for its partner). A later acquisition gets a new fencing token.
func TestMutexSameOwnerWaitersReenter(t *testing.T) {
	c := newClient(t)
	m := c.NewMutex("m")
	elsewhere := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefixOf(t, c))).NewMutex("m")
	other, err := elsewhere.LockContext(ctxT(t))
	require.NoError(t, err)
	owner := dsync.WithOwner(ctxT(t))
	type result struct {
		l   context.Context
		err error
	}
	got := make(chan result, 2)
	for range 2 {
		go func() {
			l, err := m.LockContext(owner)
			got <- result{l, err}
		}()
	}
	waitSubscribed(t, newRueidis(t), prefixOf(t, c)+":{m}:mutex:ch") // one waits in Redis (the other locally, or re-enters on arrival)
	require.NoError(t, elsewhere.UnlockContext(other))
	var ls []context.Context
	for range 2 {
		select {
		case r := <-got:
			require.NoError(t, r.err)
			ls = append(ls, r.l)
		case <-time.After(5 * time.Second):
			t.Fatal("the owner's second acquisition did not re-enter while the owner held the lock")
		}
	}
	t1, _ := dsync.FencingToken(ls[0])
	t2, _ := dsync.FencingToken(ls[1])
	require.Equal(t, t2, t1, "re-entries of one hold have tokens")
	for _, l := range ls {
		require.NoError(t, m.UnlockContext(l))
	}
	_, ok, err := c.NewMutex("m").TryLockContext(ctxT(t))
	require.True(t, ok, "after both releases")
	require.NoError(t, err, "after both releases")
}
