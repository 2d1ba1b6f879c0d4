package dsync_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/dsync/dsync/internal/redistest"
	"github.com/redis/rueidis"
)

// redlockClients returns one dsync Client per independent server, all with
// the same fresh prefix.
func redlockClients(t *testing.T, opts ...dsync.Option) ([]*dsync.Client, []*redistest.Server, string) {
	t.Helper()
	servers := redlockServers(t)
	prefix := testPrefix(t)
	var clients []*dsync.Client
	for _, s := range servers {
		rc := s.Client(t, func(o *rueidis.ClientOption) { o.Dialer.Timeout = 200 * time.Millisecond })
		clients = append(clients, newClientOn(t, rc, append([]dsync.Option{dsync.WithKeyPrefix(prefix)}, opts...)...))
	}
	return clients, servers, prefix
}

// kill SIGKILLs servers; they are restarted (empty) when t ends.
func kill(t *testing.T, servers ...*redistest.Server) {
	t.Helper()
	for _, s := range servers {
		if err := s.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := s.Restart(); err != nil {
				t.Error(err)
			}
		})
	}
}

// lockValue is the mutex key of name on s ("" if absent).
func lockValue(t *testing.T, s *redistest.Server, prefix, name string) string {
	t.Helper()
	v, err := s.Do(t, "GET", prefix+":{"+name+"}:mutex").ToString()
	if err != nil && !rueidis.IsRedisNil(err) {
		t.Fatal(err)
	}
	return v
}

func TestRedLockBasic(t *testing.T) {
	clients, servers, prefix := redlockClients(t)
	rl := dsync.NewRedLock("r", clients, dsync.WithNodeTimeout(300*time.Millisecond))
	ctx := ctxT(t)
	lctx, err := rl.LockContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	owner, _ := dsync.OwnerOf(lctx)
	if _, ok := dsync.FencingToken(lctx); ok {
		t.Fatal("a RedLock lock context carries a fencing token")
	}
	for _, s := range servers {
		if v := lockValue(t, s, prefix, "r"); !strings.HasPrefix(v, owner+" ") {
			t.Fatalf("%s holds %q, want the owner's hold", s.Addr, v)
		}
	}
	if _, ok, err := dsync.NewRedLock("r", clients).TryLockContext(ctx); ok || err != nil {
		t.Fatalf("TryLockContext by another owner = %v, %v", ok, err)
	}
	if err := rl.UnlockContext(lctx); err != nil {
		t.Fatal(err)
	}
	if lctx.Err() == nil {
		t.Fatal("lock context not cancelled by the release")
	}
	if err := rl.UnlockContext(lctx); !errors.Is(err, dsync.ErrNotHeld) {
		t.Fatalf("second unlock = %v, want ErrNotHeld", err)
	}
	for _, s := range servers {
		if v := lockValue(t, s, prefix, "r"); v != "" && !strings.HasPrefix(v, "- ") {
			t.Fatalf("%s still holds %q after the release", s.Addr, v)
		}
	}
	var l sync.Locker = rl
	l.Lock()
	if rl.TryLock() {
		t.Fatal("TryLock on a held RedLock succeeded")
	}
	l.Unlock()
	for _, bad := range []*dsync.RedLock{dsync.NewRedLock("", clients), dsync.NewRedLock("x", nil), dsync.NewRedLock("x", []*dsync.Client{nil})} {
		if _, err := bad.LockContext(ctx); !errors.Is(err, dsync.ErrInvalidArgument) {
			t.Fatalf("bad RedLock = %v, want ErrInvalidArgument", err)
		}
	}
}

// TestRedLockMinorityDown: with 2 of 5 servers killed the lock still works
// and still excludes.
func TestRedLockMinorityDown(t *testing.T) {
	clients, servers, _ := redlockClients(t)
	kill(t, servers[0], servers[3])
	rl := dsync.NewRedLock("r", clients, dsync.WithNodeTimeout(300*time.Millisecond))
	ctx := ctxT(t)
	lctx, err := rl.LockContext(ctx)
	if err != nil {
		t.Fatalf("with 3 of 5 up: %v", err)
	}
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, err := dsync.NewRedLock("r", clients).LockContext(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second owner = %v, want DeadlineExceeded", err)
	}
	if err := rl.UnlockContext(lctx); err != nil {
		t.Fatal(err)
	}
	l2, ok, err := dsync.NewRedLock("r", clients).TryLockContext(ctx)
	if !ok || err != nil {
		t.Fatalf("after release: %v %v", ok, err)
	}
	rl.UnlockContext(l2) // another RedLock value's hold: not ours
}

// TestRedLockMajorityDown: with 2 of 5 killed and a third stalled
// (SIGSTOP), acquisition fails within the node timeout and leaves no hold
// on the live servers.
func TestRedLockMajorityDown(t *testing.T) {
	clients, servers, prefix := redlockClients(t)
	kill(t, servers[1], servers[2])
	if err := servers[4].Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { servers[4].Signal(syscall.SIGCONT) })
	const nodeTimeout = 300 * time.Millisecond
	rl := dsync.NewRedLock("r", clients, dsync.WithNodeTimeout(nodeTimeout))
	start := time.Now()
	_, err := rl.LockContext(ctxT(t))
	took := time.Since(start)
	if err == nil {
		t.Fatal("acquired with 2 of 5 servers up")
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		t.Fatalf("failure reported as a context error: %v", err)
	}
	if took > nodeTimeout+500*time.Millisecond {
		t.Fatalf("failed after %v; the node timeout is %v", took, nodeTimeout)
	}
	t.Logf("failed in %v: %v", took, err)
	for _, s := range []*redistest.Server{servers[0], servers[3]} {
		if v := lockValue(t, s, prefix, "r"); v != "" && !strings.HasPrefix(v, "- ") {
			t.Fatalf("live server %s left holding %q", s.Addr, v)
		}
	}
}

// TestRedLockLostMajority: a held RedLock whose majority of servers dies
// is lost when their leases run out: the lock context ends with
// ErrLockLost.
func TestRedLockLostMajority(t *testing.T) {
	clients, servers, _ := redlockClients(t, dsync.WithLease(600*time.Millisecond))
	rl := dsync.NewRedLock("r", clients, dsync.WithNodeTimeout(300*time.Millisecond))
	lctx, err := rl.LockContext(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	kill(t, servers[0], servers[1])
	// A minority lost: still held past several leases.
	time.Sleep(1500 * time.Millisecond)
	if lctx.Err() != nil {
		t.Fatalf("lost with a majority alive: %v", context.Cause(lctx))
	}
	kill(t, servers[2])
	waitFor(t, 3*time.Second, "the RedLock to be lost", func() bool { return lctx.Err() != nil })
	if !errors.Is(context.Cause(lctx), dsync.ErrLockLost) {
		t.Fatalf("cause %v, want ErrLockLost", context.Cause(lctx))
	}
	if err := rl.UnlockContext(lctx); !errors.Is(err, dsync.ErrNotHeld) {
		t.Fatalf("unlock of a lost RedLock = %v, want ErrNotHeld", err)
	}
}
