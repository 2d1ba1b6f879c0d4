package dsync_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/dsync/dsync/internal/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// logBuf is a log destination safe for concurrent writes.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) lines(msg string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range strings.Split(l.b.String(), "\n") {
		if strings.Contains(line, "msg=\""+msg) {
			out = append(out, line)
		}
	}
	return out
}

func newLogger(l *logBuf) *slog.Logger { return slog.New(slog.NewTextHandler(l, nil)) }

// lostCause waits (up to 10 s) for lctx to end and returns its cause.
func lostCause(t *testing.T, lctx context.Context) error {
	t.Helper()
	select {
	case <-lctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the lock context did not end within 10 s")
	}
	return context.Cause(lctx)
}

// TestLostLockCauseSaysWhy (issue 38, item 8): the cause of a lost lock's
// context names the lock and says why it was lost - its key gone from
// Redis, a forced release, its fixed lease run out, its lease run out
// while renewals failed - and is an ErrLockLost. The log of the loss
// carries the same cause.
func TestLostLockCauseSaysWhy(t *testing.T) {
	var logs logBuf
	c := newClient(t, dsync.WithLease(600*time.Millisecond), dsync.WithLogger(newLogger(&logs)))
	prefix := prefixOf(t, c)
	rc := newRueidis(t)
	ctx := ctxT(t)

	check := func(t *testing.T, lctx context.Context, name, says string) {
		t.Helper()
		cause := lostCause(t, lctx)
		require.ErrorIs(t, cause, dsync.ErrLockLost)
		assert.Contains(t, cause.Error(), `"`+name+`"`, "the cause names the lock")
		assert.Contains(t, cause.Error(), says, "the cause says why")
	}

	t.Run("key gone", func(t *testing.T) {
		lctx, err := c.NewMutex("lost-gone").LockContext(ctx)
		require.NoError(t, err)
		require.NoError(t, rc.Do(ctx, rc.B().Del().Key(prefix+":{lost-gone}:mutex").Build()).Error())
		check(t, lctx, "lost-gone", "gone from Redis")
	})
	t.Run("forced", func(t *testing.T) {
		waitFor(t, 10*time.Second, "the control subscription", func() bool { return dsync.ForceSubscribed(c) })
		lctx, err := c.NewSemaphore("lost-forced", 2).Acquire(ctx, 1)
		require.NoError(t, err)
		_, err = c.ForceUnlock(ctx, "lost-forced")
		require.NoError(t, err)
		check(t, lctx, "lost-forced", "force-unlocked")
	})
	t.Run("fixed lease", func(t *testing.T) {
		lctx, err := c.NewFairMutex("lost-fixed", dsync.WithLeaseTime(100*time.Millisecond)).LockContext(ctx)
		require.NoError(t, err)
		check(t, lctx, "lost-fixed", "lease")
	})
	t.Run("renewals failed", func(t *testing.T) {
		s := redistest.Start(t)
		c2 := newClientOn(t, s.Client(t), dsync.WithKeyPrefix(prefix), dsync.WithLease(600*time.Millisecond), dsync.WithLogger(newLogger(&logs)))
		lctx, err := c2.NewMutex("lost-down").LockContext(ctx)
		require.NoError(t, err)
		s.Stop()
		// "renewals failed since ...", or, on a machine so loaded that the
		// lease clock acted 250 ms late, "while the process was paused or
		// starved": a lease run out either way.
		check(t, lctx, "lost-down", "lease ran out")
		t.Log(context.Cause(lctx))
	})
	lost := logs.lines("dsync: lock lost")
	require.NotEmpty(t, lost)
	for _, l := range lost {
		assert.Contains(t, l, "cause=", "the log says why")
	}
}

// TestLockRetryWarnsOnce (issue 38, item 9): Lock through an outage warns
// once at its first failure, not at every retry (8 in its first second
// before), and logs spell the kind as the Kind constants do ("mutex").
func TestLockRetryWarnsOnce(t *testing.T) {
	s := redistest.Start(t)
	var logs logBuf
	var failed atomic.Int64
	obs := dsync.Observer{AcquireDone: func(_ context.Context, e dsync.AcquireDone) {
		if e.Err != nil {
			failed.Add(1)
		}
	}}
	c, err := dsync.NewClient(s.Client(t), dsync.WithKeyPrefix(testPrefix(t)), dsync.WithLogger(newLogger(&logs)), dsync.WithObserver(obs))
	require.NoError(t, err)
	m := c.NewMutex("lock-outage")
	s.Stop()
	done := make(chan any, 1)
	go func() {
		defer func() { done <- recover() }()
		m.Lock()
	}()
	waitFor(t, 30*time.Second, "8 failed attempts", func() bool { return failed.Load() >= 8 })
	warns := logs.lines("dsync: Lock retrying")
	require.NoError(t, c.Close())
	select {
	case p := <-done:
		require.NotNil(t, p, "Lock ends with a panic (ErrClosed) when the Client closes")
	case <-time.After(10 * time.Second):
		t.Fatal("Lock did not end after Close")
	}
	require.Len(t, warns, 1, "one warning for %d failed attempts: %q", failed.Load(), warns)
	assert.Contains(t, warns[0], "kind=mutex")
	assert.Contains(t, warns[0], "name=lock-outage")
}
