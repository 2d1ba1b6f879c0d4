package dsync_test

import (
	"context"
	"errors"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/dsync/dsync/internal/redistest"
	"github.com/redis/rueidis"
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
	if err := s.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
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
		if err == nil {
			t.Fatalf("%s succeeded against a stalled server", tc.name)
		}
		if ctx.Err() != nil {
			t.Fatalf("%s: the test's context ended: %v", tc.name, err)
		}
		t.Logf("%s: %v", tc.name, err)
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			t.Errorf("%s = %v: a context error while ctx is live", tc.name, err)
		}
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
	if err != nil {
		t.Fatal(err)
	}
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
	if err := elsewhere.UnlockContext(other); err != nil {
		t.Fatal(err)
	}
	var ls []context.Context
	for range 2 {
		select {
		case r := <-got:
			if r.err != nil {
				t.Fatal(r.err)
			}
			ls = append(ls, r.l)
		case <-time.After(5 * time.Second):
			t.Fatal("the owner's second acquisition did not re-enter while the owner held the lock")
		}
	}
	t1, _ := dsync.FencingToken(ls[0])
	t2, _ := dsync.FencingToken(ls[1])
	if t1 != t2 {
		t.Fatalf("re-entries of one hold have tokens %d and %d", t1, t2)
	}
	for _, l := range ls {
		if err := m.UnlockContext(l); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok, err := c.NewMutex("m").TryLockContext(ctxT(t)); !ok || err != nil {
		t.Fatalf("after both releases: %v %v", ok, err)
	}
}
