package dsync

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dsync/dsync/internal/redistest"
	"github.com/stretchr/testify/require"
)

// Issue 30: a Client whose goroutines hold a Mutex and queue for it locally
// begins to close while the holder's release is on its way (past the
// release's check that the Client is open). Before the fix, the release
// handed the lock to the next local goroutine from the reserved token
// block; the new hold could not start (the Client is closed), so the old
// hold ended without a release in Redis, and Close, whose list of holds no
// longer had it, released nothing: the lock stayed in Redis as
// "<owner> <last token of the block> 1 b" for the rest of its lease, under
// an owner no hold of any Client named, and another Client's waiter got it
// only when it expired. Now a release that finds the Client closing gives
// the lock back to Redis with the release script, which wakes that waiter.
func TestClosePassOnReleases(t *testing.T) {
	const lease = 6 * time.Second
	s := redistest.Start(t)
	c, err := NewClient(s.Client(t), WithLease(lease), WithMaxLocalHandoffs(4), WithLogger(quiet))
	require.NoError(t, err)
	other, err := NewClient(s.Client(t), WithLease(lease), WithLogger(quiet))
	require.NoError(t, err)
	defer other.Close()
	rc := s.Client(t)
	ctx := context.Background()
	m := c.NewMutex("i30")
	first, err := m.LockContext(ctx)
	require.NoError(t, err)
	type res struct {
		lctx context.Context
		err  error
	}
	got := make(chan res, 2)
	for range 2 {
		go func() {
			l, err := m.LockContext(ctx)
			got <- res{l, err}
		}()
	}
	waitUntil(t, 5*time.Second, "two local waiters", func() bool { return queued(c, m.key) == 2 })
	// The first release hands the lock to a local waiter through Redis,
	// which reserves a block of tokens for the next handoff.
	require.NoError(t, m.UnlockContext(first))
	held := <-got
	require.NoError(t, held.err)
	before, _ := rc.Do(ctx, rc.B().Get().Key(m.key).Build()).ToString()
	t.Logf("lock value while the handed-on hold is held: %q", before)
	// Another Client waits for the lock too.
	bGot := make(chan time.Time, 1)
	go func() {
		l, err := other.NewMutex("i30").LockContext(ctx)
		if err == nil {
			bGot <- time.Now()
			_ = other.NewMutex("i30").UnlockContext(l)
		}
	}()
	waitUntil(t, 5*time.Second, "the other Client to wait", func() bool {
		// Its entry (beside this Client's own, for its queued waiter).
		all, _ := rc.Do(ctx, rc.B().Hgetall().Key(m.key+":waiting").Build()).AsStrMap()
		for f := range all {
			if strings.HasPrefix(f, other.ident+" ") {
				return true
			}
		}
		return false
	})
	// Its release begins, then Close begins: the release is past its
	// check and has taken the hold out of the lock's state.
	st := c.getMutex(m.sk())
	st.mu.Lock()
	h := st.h
	require.NotNil(t, h)
	st.h = nil
	c.closed.Store(true)
	released := time.Now()
	_ = m.passOnLocked(ctx, st, h) // unlocks st.mu
	c.putMutex(m.sk(), st)
	v, err := rc.Do(ctx, rc.B().Get().Key(m.key).Build()).ToString()
	require.NoError(t, err)
	pttl, _ := rc.Do(ctx, rc.B().Pttl().Key(m.key).Build()).AsInt64()
	t.Logf("lock value after the release: %q, PTTL %d ms (the hold's owner in Redis: %s, token %d)", v, pttl, h.rOwner, h.rToken)
	require.False(t, strings.HasPrefix(v, h.rOwner+" "+strconv.FormatUint(h.rToken, 10)+" "), "the lock was left held under the owner the release handed on: %q", v)
	select {
	case at := <-bGot:
		d := at.Sub(released)
		t.Logf("the other Client's waiter got the lock %v after the release", d)
		require.LessOrEqual(t, d, 100*time.Millisecond)
	case <-time.After(lease + time.Second):
		t.Fatal("the other Client's waiter never got the lock")
	}
	r := <-got // the second local waiter: the Client is closing
	require.ErrorIs(t, r.err, ErrClosed)
	c.closed.Store(false) // so that Close runs (its first step sets it)
	require.NoError(t, c.Close())
}
