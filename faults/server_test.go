package faults

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// holdOne acquires name on c and returns its lock context and the moment it
// was seen cancelled (a channel closed then).
func holdOne(t *testing.T, c *dsync.Client, name string) (context.Context, *time.Time, chan struct{}) {
	t.Helper()
	lctx, err := c.NewMutex(name).LockContext(context.Background())
	require.NoError(t, err)
	at := new(time.Time)
	done := make(chan struct{})
	context.AfterFunc(lctx, func() { *at = time.Now(); close(done) })
	return lctx, at, done
}

func tokenOf(ctx context.Context) uint64 { tok, _ := dsync.FencingToken(ctx); return tok }

// Scenario (g), FLUSHALL: the holder learns at its next renewal that its
// key is gone: its lock context is cancelled (ErrLockLost) within one
// renewal interval, and the next token is still larger than the last.
func TestFaultServerFlushall(t *testing.T) {
	srv := startRedis(t)
	prefix := testPrefix()
	const lease = time.Second
	c := newDsync(t, srv.Addr, prefix, lease)
	lctx, at, done := holdOne(t, c, "f")
	before := tokenOf(lctx)
	require.NoError(t, srv.do(t, "FLUSHALL").Error())
	flushed := time.Now()
	select {
	case <-done:
	case <-time.After(2 * lease):
		t.Fatal("holder not cancelled within 2 leases of FLUSHALL")
	}
	took := at.Sub(flushed)
	l2, ok, err := newDsync(t, srv.Addr, prefix, lease).NewMutex("f").TryLockContext(context.Background())
	require.NoError(t, err, "after FLUSHALL TryLock")
	require.True(t, ok, "after FLUSHALL TryLock")
	after := tokenOf(l2)
	bound := lease/3 + 100*time.Millisecond
	t.Logf("(g) FLUSHALL: holder cancelled %v later (bound lease/3 + 100ms = %v, cause %v); token %d -> %d", took.Round(time.Millisecond), bound, context.Cause(lctx), before, after)
	assert.ErrorIs(t, context.Cause(lctx), dsync.ErrLockLost, "holder cancelled after FLUSHALL")
	assert.LessOrEqual(t, took, bound, "holder cancelled after FLUSHALL")
	assert.Greater(t, after, before, "token after FLUSHALL not above the one before")
}

// Scenario (g), restart without persistence: SHUTDOWN NOSAVE, then an
// empty server on the same port. The holder is cancelled within one lease
// of the shutdown, and no token issued after the restart repeats (or is
// below) one issued before: the token is max(last+1, server time in µs).
func TestFaultServerRestart(t *testing.T) {
	srv := startRedis(t)
	prefix := testPrefix()
	const lease = time.Second
	c := newDsync(t, srv.Addr, prefix, lease)
	m := c.NewMutex("r")
	var maxBefore uint64
	for range 50 { // a run of tokens, each one more than the last
		l, err := m.LockContext(context.Background())
		require.NoError(t, err)
		maxBefore = max(maxBefore, tokenOf(l))
		require.NoError(t, m.UnlockContext(l))
	}
	lctx, at, done := holdOne(t, c, "r")
	maxBefore = max(maxBefore, tokenOf(lctx))
	srv.shutdownNoSave(t)
	down := time.Now()
	srv.restart(t)
	up := time.Now()
	select {
	case <-done:
	case <-time.After(3 * lease):
		t.Fatal("holder not cancelled within 3 leases of the restart")
	}
	took := at.Sub(down)
	var minAfter uint64
	for range 20 {
		l, err := m.LockContext(context.Background())
		require.NoError(t, err)
		if tok := tokenOf(l); minAfter == 0 || tok < minAfter {
			minAfter = tok
		}
		require.NoError(t, m.UnlockContext(l))
	}
	t.Logf("(g) SHUTDOWN NOSAVE + restart (down %v): holder cancelled %v after the shutdown (cause %v); largest token before %d, smallest after %d (gap %v of server time)",
		up.Sub(down).Round(time.Millisecond), took.Round(time.Millisecond), context.Cause(lctx), maxBefore, minAfter, time.Duration(minAfter-maxBefore)*time.Microsecond)
	assert.ErrorIs(t, context.Cause(lctx), dsync.ErrLockLost, "holder cancelled after the shutdown")
	assert.LessOrEqual(t, took, lease+100*time.Millisecond, "holder cancelled after the shutdown, want within a lease")
	assert.Greater(t, minAfter, maxBefore, "a token after the restart is not above every token before")
}

// Scenario (g), stalls: DEBUG SLEEP and CLIENT PAUSE WRITE shorter than the
// lease leave the hold intact; a SIGSTOP of redis-server for 2x lease
// cancels the holder by its own lease clock, before the resumed server
// grants the lock to anyone else. Calls during a stall end with their
// context.
func TestFaultServerStall(t *testing.T) {
	srv := startRedis(t)
	prefix := testPrefix()
	const lease = time.Second
	c := newDsync(t, srv.Addr, prefix, lease)
	c2 := newDsync(t, srv.Addr, prefix, lease)
	lctx, at, done := holdOne(t, c, "st")
	slack := 50 * time.Millisecond
	for _, stall := range [][]string{{"DEBUG", "SLEEP", "0.3"}, {"CLIENT", "PAUSE", "500", "WRITE"}} {
		go func() { _ = srv.do(t, stall...).Error() }()
		time.Sleep(20 * time.Millisecond) // let the stall begin
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		t0 := time.Now()
		_, err := c2.NewMutex("st").LockContext(ctx)
		took := time.Since(t0)
		cancel()
		t.Logf("(g) %v: LockContext(100ms) on the held lock returned %v in %v", stall, err, took.Round(time.Millisecond))
		assert.ErrorIs(t, err, context.DeadlineExceeded, "during %v: LockContext(100ms)", stall)
		assert.LessOrEqual(t, took, 100*time.Millisecond+slack, "during %v: LockContext(100ms)", stall)
		time.Sleep(lease) // the stall ends; a renewal or two pass
		require.NoError(t, lctx.Err(), "hold lost over %v shorter than the lease: %v", stall, context.Cause(lctx))
	}
	srv.signal(t, syscall.SIGSTOP)
	stopped := time.Now()
	acq := make(chan time.Time, 1)
	go func() {
		// LockContext ends with a Redis error (a timeout) while the server
		// is frozen; a caller that wants the lock retries.
		var l context.Context
		var err error
		for l == nil {
			if l, err = c2.NewMutex("st").LockContext(context.Background()); err != nil {
				time.Sleep(10 * time.Millisecond)
			}
		}
		acq <- time.Now()
		_ = c2.NewMutex("st").UnlockContext(l)
	}()
	time.Sleep(2 * lease) // the fault: the server frozen 2x lease
	srv.signal(t, syscall.SIGCONT)
	<-done
	acquired := <-acq
	uerr := c.NewMutex("st").UnlockContext(lctx)
	t.Logf("(g) redis-server SIGSTOPped %v: holder cancelled %v after the stop (cause %v), %v before the other Client acquired; holder's Unlock: %v",
		2*lease, at.Sub(stopped).Round(time.Millisecond), context.Cause(lctx), acquired.Sub(*at).Round(time.Millisecond), uerr)
	assert.True(t, at.Before(acquired), "the holder was cancelled %v after another Client acquired", at.Sub(acquired))
	assert.LessOrEqual(t, at.Sub(stopped), lease, "holder cancelled after the server froze")
	assert.ErrorIs(t, uerr, dsync.ErrNotHeld, "the lost holder's Unlock")
}
