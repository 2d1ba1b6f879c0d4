package dsync

import (
	"context"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dsync/dsync/internal/redistest"
	"github.com/dsync/dsync/internal/scripts"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
)

// deadlineClient is a Client that has acquired once, so that it knows the
// server clock and its fresh Mutex owners carry a deadline.
func deadlineClient(t *testing.T, opts ...Option) (*Client, rueidis.Client) {
	t.Helper()
	rc := redistest.Start(t).Client(t)
	c, err := NewClient(rc, append([]Option{WithKeyPrefix("dl")}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	m := c.NewMutex("warm")
	l, err := m.LockContext(context.Background())
	require.NoError(t, err)
	require.NoError(t, m.UnlockContext(l))
	require.True(t, c.srv.known(), "the first acquisition tells the Client the server clock")
	return c, rc
}

// lateEventClient is a deadlineClient that counts its test events by name
// (events("lateundo"): the late undo runs done).
func lateEventClient(t *testing.T) (*Client, rueidis.Client, func(event string) int) {
	var mu sync.Mutex
	n := map[string]int{}
	c, rc := deadlineClient(t, func(cfg *config) {
		cfg.test.mutexEvent = func(ev string) { mu.Lock(); n[ev]++; mu.Unlock() }
	})
	return c, rc, func(ev string) int { mu.Lock(); defer mu.Unlock(); return n[ev] }
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
	b := appendDeadlineOwner(nil, m.key, ":x:", c.ident, dl, c.ownerSeq.Add(1), 0)
	mark = string(b)
	return mark[len(m.key)+len(":x:"):], mark
}

// TestAcquireAfterDeadlineDoesNothing: the acquire sent as the owner alone
// does nothing once the server clock has reached the owner's deadline,
// whether the lock is free (no key made) or held (no waiting entry, no
// waiter's mark), and replies {-2, server µs}; before the deadline it
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
	require.GreaterOrEqual(t, vals[1], now*1e6, "the server's µs")
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
// connection) acquires, since the attempt reads no mark; the undo's next
// run (lateUndo, 20 ms later) releases it, as the runs after it release a
// copy that arrives later, until the run after the owner's deadline, after
// which no copy applies.
func TestMutexLateUndoReleasesALateCopy(t *testing.T) {
	c, rc, events := lateEventClient(t)
	count := func() int { return events("lateundo") }      // runs done
	sends := func() int { return events("lateundo.send") } // runs sent
	ctx := context.Background()
	m := c.NewMutex("copy")
	dl := serverSeconds(t, rc) + 3
	owner, mark := ownerWith(c, m, dl)
	copyOf := func() []int64 {
		vals, err := appendInts(nil, c.runScript(ctx, scripts.MutexAcquire, []string{m.key}, []string{owner}))
		require.NoError(t, err)
		return vals
	}
	free := func() bool {
		v, err := rc.Do(ctx, rc.B().Get().Key(m.key).Build()).ToString()
		return err == nil && strings.HasPrefix(v, "- ")
	}
	m.undoFresh(ctx, owner, mark) // the undo first
	vals := copyOf()
	require.Equal(t, int64(acqAcquired), vals[0], "the copy after the undo: %v", vals)
	m.lateUndo(owner, mark, dl)
	waitUntil(t, 10*time.Second, "the undo's next run to release the copy", free)
	waitUntil(t, 10*time.Second, "the runs of lateUndoGaps", func() bool { return count() >= len(lateUndoGaps) })
	// Those runs done (none in flight: the next is lateUndoEvery away),
	// a copy: only a run sent after it can release it.
	at := sends()
	vals = copyOf()
	require.Equal(t, int64(acqAcquired), vals[0], "a copy after those runs, before the deadline: %v", vals)
	waitUntil(t, 10*time.Second, "a later run to release it", free)
	require.Greater(t, sends(), at, "released by a later run")
	waitUntil(t, 20*time.Second, "the server clock to pass the deadline", func() bool { return serverSeconds(t, rc) >= dl })
	n := count()
	waitUntil(t, 10*time.Second, "the runs to end", func() bool {
		// The last run comes once the Client's estimate has passed the
		// deadline too; none after it.
		n2 := count()
		done := n2 == n && c.srv.now() > dl*1e6+int64(lateUndoEvery/time.Microsecond)
		n = n2
		return done
	})
	require.LessOrEqual(t, count(), len(lateUndoGaps)+int((3*time.Second)/lateUndoEvery)+2, "runs")
	vals = copyOf()
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

// TestMutexLateUndoOneGoroutine: the later undo runs of many lost attempts
// wait on one goroutine of the Client's (lateUndos), not one each, and
// each attempt is still undone until its deadline has passed.
func TestMutexLateUndoOneGoroutine(t *testing.T) {
	c, rc, events := lateEventClient(t)
	count := func() int { return events("lateundo") }
	const n = 200
	dl := serverSeconds(t, rc) + 2
	before := runtime.NumGoroutine()
	for i := range n {
		m := c.NewMutex("lost" + strconv.Itoa(i))
		owner, mark := ownerWith(c, m, dl)
		m.lateUndo(owner, mark, dl)
	}
	grown := runtime.NumGoroutine() - before
	// The undo runs themselves go in the background (a goroutine each
	// while one runs); the wait between them is what must be shared.
	require.Less(t, grown, n/4, "goroutines after %d lost attempts", n)
	waitUntil(t, 10*time.Second, "every attempt's gap runs", func() bool { return count() >= n*len(lateUndoGaps) })
	waitUntil(t, 20*time.Second, "the runs to end after the deadline", func() bool {
		c.late.mu.Lock()
		defer c.late.mu.Unlock()
		return len(c.late.q) == 0 && !c.late.running
	})
	require.GreaterOrEqual(t, count(), n*(len(lateUndoGaps)+1), "each attempt undone after the gaps, and after its deadline")
	require.Greater(t, c.srv.now(), dl*1e6, "the runs ended before the Client's estimate passed the deadline")
}

// TestMutexLateUndoLooksFirst: the later runs of a lost attempt's undo
// look before they write. 50 lost attempts that no copy followed: every
// run of each (after the gaps and after the deadline) is a GET, the runs
// due together go in one batch, and no script runs (before: an undo
// script per run, 200 at least, each sent on its own).
func TestMutexLateUndoLooksFirst(t *testing.T) {
	c, rc, events := lateEventClient(t)
	count := func() int { return events("lateundo") }
	ctx := context.Background()
	// The Client's start-up calls are behind us before the counts start:
	// the preload, and the check of every hold made when the control
	// subscription comes up, which runs the renewal script (an idle make
	// test of 6f44e45 counted a renewal script here, EVALSHA refused then
	// EVAL, with its MGET and TIME: most likely that check, made while
	// deadlineClient's warm-up lock was held, with the preload still
	// running).
	waitUntil(t, 10*time.Second, "the preload and the control subscription's check of the holds done", func() bool {
		select {
		case <-c.preloaded:
		default:
			return false
		}
		return ForceSubscribed(c)
	})
	require.NoError(t, rc.Do(ctx, rc.B().ConfigResetstat().Build()).Error())
	const n = 50
	dl := serverSeconds(t, rc) + 2
	for i := range n {
		m := c.NewMutex("looks" + strconv.Itoa(i))
		owner, mark := ownerWith(c, m, dl)
		m.lateUndo(owner, mark, dl)
	}
	waitUntil(t, 20*time.Second, "the runs to end after the deadline", func() bool {
		c.late.mu.Lock()
		defer c.late.mu.Unlock()
		return len(c.late.q) == 0 && !c.late.running
	})
	// Every run sent is done (its GET answered) before the counts are
	// read: the last batch's runs are in flight when the queue empties (a
	// busy make test of 55f39e0 counted 450 GETs for 500 runs, and
	// -count=30 with both CPUs busy 400 for 450: the INFO had overtaken
	// the last batch of 50, whose runs were counted after it).
	sends := events("lateundo.send")
	require.GreaterOrEqual(t, sends, n*(len(lateUndoGaps)+1), "runs sent")
	waitUntil(t, 10*time.Second, "every run sent to be done", func() bool { return count() == sends })
	info, err := rc.Do(ctx, rc.B().Info().Section("commandstats").Build()).ToString()
	require.NoError(t, err)
	stat := func(cmd string) int {
		m := regexp.MustCompile(`cmdstat_` + cmd + `:calls=(\d+)`).FindStringSubmatch(info)
		if m == nil {
			return 0
		}
		v, _ := strconv.Atoi(m[1])
		return v
	}
	require.Zero(t, stat("fcall")+stat("evalsha")+stat("eval"), "scripts, with nothing to undo:\n%s", info)
	require.GreaterOrEqual(t, stat("get"), count(), "a GET per run:\n%s", info)
	// 50 attempts queued at once come due at about the same times: a few
	// batches per step (the gaps, the runs every lateUndoEvery, the last).
	batches, runs := events("lateundo.batch"), count()
	require.Positive(t, batches, "batches")
	require.LessOrEqual(t, batches, runs/5, "batches for %d runs", runs)
}
