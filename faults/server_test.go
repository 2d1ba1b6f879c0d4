package faults

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
)

// holdOne acquires name on c and returns its lock context and the moment it
// was seen cancelled (a channel closed then).
func holdOne(t *testing.T, c *dsync.Client, name string) (context.Context, *time.Time, chan struct{}) {
	t.Helper()
	lctx, err := c.NewMutex(name).LockContext(context.Background())
	if err != nil {
		t.Fatal(err)
	}
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
	if err := srv.do(t, "FLUSHALL").Error(); err != nil {
		t.Fatal(err)
	}
	flushed := time.Now()
	select {
	case <-done:
	case <-time.After(2 * lease):
		t.Fatal("holder not cancelled within 2 leases of FLUSHALL")
	}
	took := at.Sub(flushed)
	l2, ok, err := newDsync(t, srv.Addr, prefix, lease).NewMutex("f").TryLockContext(context.Background())
	if err != nil || !ok {
		t.Fatalf("after FLUSHALL TryLock = %v, %v", ok, err)
	}
	after := tokenOf(l2)
	bound := lease/3 + 100*time.Millisecond
	t.Logf("(g) FLUSHALL: holder cancelled %v later (bound lease/3 + 100ms = %v, cause %v); token %d -> %d", took.Round(time.Millisecond), bound, context.Cause(lctx), before, after)
	if !errors.Is(context.Cause(lctx), dsync.ErrLockLost) || took > bound {
		t.Errorf("holder cancelled %v after FLUSHALL with %v; want ErrLockLost within %v", took, context.Cause(lctx), bound)
	}
	if after <= before {
		t.Errorf("token after FLUSHALL %d <= %d before", after, before)
	}
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
		if err != nil {
			t.Fatal(err)
		}
		maxBefore = max(maxBefore, tokenOf(l))
		if err := m.UnlockContext(l); err != nil {
			t.Fatal(err)
		}
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
		if err != nil {
			t.Fatal(err)
		}
		if tok := tokenOf(l); minAfter == 0 || tok < minAfter {
			minAfter = tok
		}
		if err := m.UnlockContext(l); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("(g) SHUTDOWN NOSAVE + restart (down %v): holder cancelled %v after the shutdown (cause %v); largest token before %d, smallest after %d (gap %v of server time)",
		up.Sub(down).Round(time.Millisecond), took.Round(time.Millisecond), context.Cause(lctx), maxBefore, minAfter, time.Duration(minAfter-maxBefore)*time.Microsecond)
	if !errors.Is(context.Cause(lctx), dsync.ErrLockLost) || took > lease+100*time.Millisecond {
		t.Errorf("holder cancelled %v after the shutdown with %v; want ErrLockLost within a lease", took, context.Cause(lctx))
	}
	if minAfter <= maxBefore {
		t.Errorf("a token after the restart (%d) is not above every token before (%d)", minAfter, maxBefore)
	}
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
		if !errors.Is(err, context.DeadlineExceeded) || took > 100*time.Millisecond+slack {
			t.Errorf("during %v: LockContext(100ms) = %v after %v", stall, err, took)
		}
		time.Sleep(lease) // the stall ends; a renewal or two pass
		if lctx.Err() != nil {
			t.Fatalf("hold lost over %v shorter than the lease: %v", stall, context.Cause(lctx))
		}
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
	if !at.Before(acquired) {
		t.Errorf("the holder was cancelled %v after another Client acquired", at.Sub(acquired))
	}
	if at.Sub(stopped) > lease {
		t.Errorf("holder cancelled %v after the server froze; want within the lease", at.Sub(stopped))
	}
	if !errors.Is(uerr, dsync.ErrNotHeld) {
		t.Errorf("the lost holder's Unlock = %v, want ErrNotHeld", uerr)
	}
}
