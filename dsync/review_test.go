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
