package dsync_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/dsync/dsync/internal/redistest"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
		require.NoError(t, s.Signal(syscall.SIGKILL))
		t.Cleanup(func() {
			assert.NoError(t, s.Restart())
		})
	}
}

// lockValue is the mutex key of name on s ("" if absent).
func lockValue(t *testing.T, s *redistest.Server, prefix, name string) string {
	t.Helper()
	v, err := s.Do(t, "GET", prefix+":{"+name+"}:mutex").ToString()
	if !rueidis.IsRedisNil(err) {
		require.NoError(t, err)
	}
	return v
}

func TestRedLockBasic(t *testing.T) {
	clients, servers, prefix := redlockClients(t)
	rl := dsync.NewRedLock("r", clients, dsync.WithNodeTimeout(300*time.Millisecond))
	ctx := ctxT(t)
	lctx, err := rl.LockContext(ctx)
	require.NoError(t, err)
	owner, _ := dsync.OwnerOf(lctx)
	_, ok := dsync.FencingToken(lctx)
	require.False(t, ok, "a RedLock lock context carries a fencing token")
	for _, s := range servers {
		v := lockValue(t, s, prefix, "r")
		require.True(t, strings.HasPrefix(v, owner+" "), "%s holds %q, want the owner's hold", s.Addr, v)
	}
	_, ok, err = dsync.NewRedLock("r", clients).TryLockContext(ctx)
	require.False(t, ok, "TryLockContext by another owner")
	require.NoError(t, err, "TryLockContext by another owner")
	require.NoError(t, rl.UnlockContext(lctx))
	require.Error(t, lctx.Err(), "lock context not cancelled by the release")
	require.ErrorIs(t, rl.UnlockContext(lctx), dsync.ErrNotHeld, "second unlock")
	for _, s := range servers {
		if v := lockValue(t, s, prefix, "r"); v != "" {
			require.True(t, strings.HasPrefix(v, "- "), "%s still holds %q after the release", s.Addr, v)
		}
	}
	var l sync.Locker = rl
	l.Lock()
	require.False(t, rl.TryLock(), "TryLock on a held RedLock succeeded")
	l.Unlock()
	for _, bad := range []*dsync.RedLock{dsync.NewRedLock("", clients), dsync.NewRedLock("x", nil), dsync.NewRedLock("x", []*dsync.Client{nil})} {
		_, err := bad.LockContext(ctx)
		require.ErrorIs(t, err, dsync.ErrInvalidArgument, "bad RedLock")
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
	require.NoError(t, err, "with 3 of 5 up")
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	_, err = dsync.NewRedLock("r", clients).LockContext(short)
	require.ErrorIs(t, err, context.DeadlineExceeded, "second owner")
	require.NoError(t, rl.UnlockContext(lctx))
	l2, ok, err := dsync.NewRedLock("r", clients).TryLockContext(ctx)
	require.True(t, ok, "after release")
	require.NoError(t, err, "after release")
	rl.UnlockContext(l2) // another RedLock value's hold: not ours
}

// TestRedLockMajorityDown: with 2 of 5 killed and a third stalled
// (SIGSTOP), acquisition fails within the node timeout and leaves no hold
// on the live servers.
func TestRedLockMajorityDown(t *testing.T) {
	clients, servers, prefix := redlockClients(t)
	kill(t, servers[1], servers[2])
	require.NoError(t, servers[4].Signal(syscall.SIGSTOP))
	t.Cleanup(func() { servers[4].Signal(syscall.SIGCONT) })
	const nodeTimeout = 300 * time.Millisecond
	rl := dsync.NewRedLock("r", clients, dsync.WithNodeTimeout(nodeTimeout))
	start := time.Now()
	_, err := rl.LockContext(ctxT(t))
	took := time.Since(start)
	require.Error(t, err, "acquired with 2 of 5 servers up")
	require.NotErrorIs(t, err, context.DeadlineExceeded, "failure reported as a context error")
	require.NotErrorIs(t, err, context.Canceled, "failure reported as a context error")
	require.LessOrEqual(t, took, nodeTimeout+500*time.Millisecond, "failed after %v; the node timeout is %v", took, nodeTimeout)
	t.Logf("failed in %v: %v", took, err)
	for _, s := range []*redistest.Server{servers[0], servers[3]} {
		if v := lockValue(t, s, prefix, "r"); v != "" {
			require.True(t, strings.HasPrefix(v, "- "), "live server %s left holding %q", s.Addr, v)
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
	require.NoError(t, err)
	kill(t, servers[0], servers[1])
	// A minority lost: still held past several leases.
	time.Sleep(1500 * time.Millisecond)
	require.NoError(t, lctx.Err(), "lost with a majority alive: %v", context.Cause(lctx))
	kill(t, servers[2])
	waitFor(t, 3*time.Second, "the RedLock to be lost", func() bool { return lctx.Err() != nil })
	require.ErrorIs(t, context.Cause(lctx), dsync.ErrLockLost, "cause")
	require.ErrorIs(t, rl.UnlockContext(lctx), dsync.ErrNotHeld, "unlock of a lost RedLock")
}

// TestRedLockWaits: an owner's LockContext that finds the RedLock held
// goes on trying, round after round (the wait loop without a Client of its
// own: see RedLock), and holds it on a majority of the nodes after the
// holder releases, with no other hold left on the rest.
//
// The second owner's node timeout is 5 s: the test is of the wait, not of
// the node timeout (TestRedLockMajorityDown is). With the default 100 ms,
// on a clean clone with both CPUs kept busy (2026-12-04, 52340fd), 4 of 5
// nodes of a round answered after it, which ends the wait as a majority
// unreachable, as it should. Until 2026-12-04 the test asked every node to
// hold the second owner's hold, more than a RedLock promises: a round that
// reaches a node before the holder's release there and the others after it
// holds a majority, and the node it missed keeps the release's marker (an
// idle CI run of 8dba7ab: 4 of 5 nodes).
func TestRedLockWaits(t *testing.T) {
	clients, servers, prefix := redlockClients(t)
	rl := dsync.NewRedLock("r", clients, dsync.WithNodeTimeout(300*time.Millisecond))
	ctx := ctxT(t)
	lctx, err := rl.LockContext(ctx)
	require.NoError(t, err)
	scripts := func() int {
		info, err := servers[0].Do(t, "INFO", "commandstats").ToString()
		require.NoError(t, err)
		n := 0
		for _, line := range strings.Split(info, "\n") {
			for _, cmd := range []string{"cmdstat_evalsha:calls=", "cmdstat_eval:calls=", "cmdstat_fcall:calls="} {
				if rest, ok := strings.CutPrefix(line, cmd); ok {
					calls, _, _ := strings.Cut(rest, ",")
					k, err := strconv.Atoi(calls)
					require.NoError(t, err)
					n += k
				}
			}
		}
		return n
	}
	before := scripts()
	type result struct {
		lctx context.Context
		err  error
	}
	// The second owner on Clients of its own, as in another process (a
	// Client's own Mutex answers a try locally while another owner of the
	// Client holds it).
	var others []*dsync.Client
	for _, s := range servers {
		others = append(others, newClientOn(t, s.Client(t), dsync.WithKeyPrefix(prefix)))
	}
	rl2 := dsync.NewRedLock("r", others, dsync.WithNodeTimeout(5*time.Second))
	got := make(chan result, 1)
	go func() {
		l, err := rl2.LockContext(ctx)
		got <- result{l, err}
	}()
	// Three rounds on the first node (an acquire each, whose replies say
	// the lock is taken), and the wait still under way.
	waitFor(t, 10*time.Second, "the second owner's rounds", func() bool { return scripts() >= before+3 })
	select {
	case r := <-got:
		t.Fatalf("second owner returned while the lock was held: %v", r.err)
	default:
	}
	require.NoError(t, rl.UnlockContext(lctx))
	r := <-got
	require.NoError(t, r.err, "second owner after the release")
	owner, _ := dsync.OwnerOf(r.lctx)
	holds := 0
	for _, s := range servers {
		v := lockValue(t, s, prefix, "r")
		if strings.HasPrefix(v, owner+" ") {
			holds++
			continue
		}
		// Not the second owner's: nothing, or a release's marker ("- "
		// and the token), never a hold of another owner.
		require.True(t, v == "" || strings.HasPrefix(v, "- "), "%s holds %q, want the second owner's hold or none", s.Addr, v)
	}
	require.GreaterOrEqual(t, holds, len(servers)/2+1, "the second owner holds %d of %d nodes", holds, len(servers))
	require.NoError(t, rl2.UnlockContext(r.lctx))
}
