package dsync

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dsync/dsync/internal/redistest"
	"github.com/dsync/dsync/internal/scripts"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
)

// deadlineClient is a Client that has acquired once, so that it knows the
// server clock and its fresh Mutex owners carry a deadline.
func deadlineClient(t *testing.T) (*Client, rueidis.Client) {
	t.Helper()
	rc := redistest.Start(t).Client(t)
	c, err := NewClient(rc, WithKeyPrefix("dl"))
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	m := c.NewMutex("warm")
	l, err := m.LockContext(context.Background())
	require.NoError(t, err)
	require.NoError(t, m.UnlockContext(l))
	require.True(t, c.srv.known(), "the first acquisition tells the Client the server clock")
	return c, rc
}

// serverSeconds is the server clock's seconds (TIME).
func serverSeconds(t *testing.T, rc rueidis.Client) int64 {
	t.Helper()
	tm, err := rc.Do(context.Background(), rc.B().Time().Build()).AsStrSlice()
	require.NoError(t, err)
	s, err := strconv.ParseInt(tm[0], 10, 64)
	require.NoError(t, err)
	return s
}

// ownerWith makes a fresh owner of m with deadline dl (server seconds), as
// lock does, and returns it with its undo mark.
func ownerWith(c *Client, m *Mutex, dl int64) (owner, mark string) {
	b := newDeadlineOwnerBuf(m.key, ":x:", c.ident, dl, c.ownerSeq.Add(1), 0)
	mark = string(b)
	return mark[len(m.key)+len(":x:"):], mark
}

// TestAcquireAfterDeadlineDoesNothing: the acquire sent as the owner alone
// does nothing once the server clock has reached the owner's deadline,
// whether the lock is free (no key made) or held (no waiting entry, no
// waiter's mark), and replies {-2, server seconds}; before the deadline it
// acquires from the clock (-token) with the default lease.
func TestAcquireAfterDeadlineDoesNothing(t *testing.T) {
	c, rc := deadlineClient(t)
	ctx := context.Background()
	m := c.NewMutex("late")
	now := serverSeconds(t, rc)
	past, _ := ownerWith(c, m, now)
	vals, err := appendInts(nil, c.runScript(ctx, scripts.MutexAcquire, []string{m.key}, []string{past}))
	require.NoError(t, err)
	require.Len(t, vals, 2, "reply %v", vals)
	require.Equal(t, int64(acqLate), vals[0], "reply %v", vals)
	require.GreaterOrEqual(t, vals[1], now, "the server's seconds")
	n, err := rc.Do(ctx, rc.B().Exists().Key(m.key).Build()).AsInt64()
	require.NoError(t, err)
	require.Zero(t, n, "a late attempt made the lock's key")

	future, _ := ownerWith(c, m, now+60)
	vals, err = appendInts(nil, c.runScript(ctx, scripts.MutexAcquire, []string{m.key}, []string{future}))
	require.NoError(t, err)
	require.Len(t, vals, 3, "reply %v: acquired from the clock", vals)
	require.Equal(t, int64(acqAcquired), vals[0])
	require.Equal(t, vals[1], vals[2], "the token is the server clock")
	v, err := rc.Do(ctx, rc.B().Get().Key(m.key).Build()).ToString()
	require.NoError(t, err)
	require.Equal(t, future+" "+strconv.FormatInt(vals[1], 10)+" 1", v)
	pttl, err := rc.Do(ctx, rc.B().Pttl().Key(m.key).Build()).AsInt64()
	require.NoError(t, err)
	require.InDelta(t, DefaultLease.Milliseconds(), pttl, 2000)

	// Held: a late attempt neither registers nor marks the value.
	vals, err = appendInts(nil, c.runScript(ctx, scripts.MutexAcquire, []string{m.key}, []string{past}))
	require.NoError(t, err)
	require.Equal(t, int64(acqLate), vals[0], "reply %v", vals)
	v2, err := rc.Do(ctx, rc.B().Get().Key(m.key).Build()).ToString()
	require.NoError(t, err)
	require.Equal(t, v, v2, "a late attempt changed the held value")
	n, err = rc.Do(ctx, rc.B().Exists().Key(m.key+":waiting").Build()).AsInt64()
	require.NoError(t, err)
	require.Zero(t, n, "a late attempt registered a wait")
}

// TestMutexLateUndoReleasesALateCopy: a copy of a lost owner-alone attempt
// that arrives after the wait's undo (rueidis may send the undo on another
// connection) acquires, since the attempt reads no mark; the undo run when
// the server clock has passed the owner's deadline (lateUndo) releases it,
// and no copy applies after that.
func TestMutexLateUndoReleasesALateCopy(t *testing.T) {
	c, rc := deadlineClient(t)
	ctx := context.Background()
	m := c.NewMutex("copy")
	dl := serverSeconds(t, rc) + 2
	owner, mark := ownerWith(c, m, dl)
	m.undoFresh(ctx, owner, mark) // the undo first
	vals, err := appendInts(nil, c.runScript(ctx, scripts.MutexAcquire, []string{m.key}, []string{owner}))
	require.NoError(t, err)
	require.Equal(t, int64(acqAcquired), vals[0], "the late copy, before the deadline: %v", vals)
	m.lateUndo(owner, mark, dl)
	waitForCond(t, 20*time.Second, "the late undo to release the copy's hold", func() bool {
		v, err := rc.Do(ctx, rc.B().Get().Key(m.key).Build()).ToString()
		return err == nil && strings.HasPrefix(v, "- ")
	})
	require.Greater(t, serverSeconds(t, rc), dl-1, "released after the deadline")
	vals, err = appendInts(nil, c.runScript(ctx, scripts.MutexAcquire, []string{m.key}, []string{owner}))
	require.NoError(t, err)
	require.Equal(t, int64(acqLate), vals[0], "a copy after the deadline: %v", vals)
}

// TestMutexOwnerDeadlineBehindServer: a Client whose estimate of the server
// clock is behind (a minute) makes owners whose deadline has passed; the
// acquire refuses their owner-alone attempt, and the wait acquires with
// every argument at once, correcting the estimate.
func TestMutexOwnerDeadlineBehindServer(t *testing.T) {
	c, rc := deadlineClient(t)
	ctx := context.Background()
	c.srv.off.Add(-60e6)
	m := c.NewMutex("behind")
	l, err := m.LockContext(ctx)
	require.NoError(t, err)
	require.NoError(t, m.UnlockContext(l))
	est := c.srv.now() / 1e6
	require.InDelta(t, serverSeconds(t, rc), est, 2, "the estimate, corrected by the refusal")
	n, err := rc.Do(ctx, rc.B().Exists().Key(m.key+":waiting").Build()).AsInt64()
	require.NoError(t, err)
	require.Zero(t, n, "the refused attempt registered a wait")
}

// waitForCond polls cond until it holds or d passes.
func waitForCond(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(d)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
