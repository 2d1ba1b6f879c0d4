package dsync_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/dsync/dsync/internal/redistest"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// getKey reads a raw key of the shared server.
func getKey(t testing.TB, rc rueidis.Client, key string) (string, bool) {
	t.Helper()
	v, err := rc.Do(context.Background(), rc.B().Get().Key(key).Build()).ToString()
	if rueidis.IsRedisNil(err) {
		return "", false
	}
	require.NoError(t, err)
	return v, true
}

func TestMutexContextDeadline(t *testing.T) {
	c := newClient(t)
	rc := newRueidis(t)
	key := prefixOf(t, c) + ":{d}:mutex"
	m := c.NewMutex("d")
	held, err := m.LockContext(ctxT(t))
	require.NoError(t, err)
	holder, _ := getKey(t, rc, key)

	// Waiters in this Client (local queue) and in another Client (Redis).
	other := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefixOf(t, c)))
	for _, mm := range []*dsync.Mutex{m, other.NewMutex("d")} {
		ctx, cancel := context.WithTimeout(context.Background(), 80*time.Millisecond)
		start := time.Now()
		_, err := mm.LockContext(ctx)
		late := time.Since(start) - 80*time.Millisecond
		cancel()
		require.ErrorIs(t, err, context.DeadlineExceeded, "LockContext")
		assert.LessOrEqual(t, late, 30*time.Millisecond, "returned after the deadline")
	}
	// A context cancelled before the call fails at once, with its error.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = other.NewMutex("d").LockContext(ctx)
	require.ErrorIs(t, err, context.Canceled, "cancelled ctx")
	// Nothing was left behind: the holder's value is unchanged (the mark
	// a waiter sets, " w", goes with the last waiting Client's entry in
	// the waiting count, which the give-up removes in the background), and
	// after the release the lock is free for anyone.
	waitFor(t, time.Second, "the holder's value as it was", func() bool {
		v, _ := getKey(t, rc, key)
		return v == holder
	})
	n, err := rc.Do(context.Background(), rc.B().Exists().Key(key+":waiting").Build()).AsInt64()
	require.NoError(t, err)
	require.Zero(t, n, "waiting count left by cancelled waiters")
	require.NoError(t, m.UnlockContext(held))
	v, _ := getKey(t, rc, key)
	require.True(t, strings.HasPrefix(v, "- "), "after release the key is %q, want a free marker", v)
	l, ok, err := other.NewMutex("d").TryLockContext(ctxT(t))
	require.True(t, ok, "lock not free after cancelled waits")
	require.NoError(t, err, "lock not free after cancelled waits")
	other.NewMutex("d").UnlockContext(l)
}

func TestMutexLeaseTimeExpires(t *testing.T) {
	c := newClient(t)
	m := c.NewMutex("fixed", dsync.WithLeaseTime(150*time.Millisecond))
	start := time.Now()
	lctx, err := m.LockContext(ctxT(t))
	require.NoError(t, err)
	select {
	case <-lctx.Done():
	case <-time.After(2 * time.Second):
		t.Fatal("lock context not cancelled after the fixed lease")
	}
	// The lock context's deadline, where its lease clock ends it, is within
	// the lease of the acquire's start; when the clock's timer runs and this
	// goroutine sees it is the scheduler's (156 ms in a make test with both
	// CPUs busy).
	end, ok := lctx.Deadline()
	require.True(t, ok, "a fixed lease's lock context has a deadline")
	assert.LessOrEqual(t, end.Sub(start), 150*time.Millisecond, "the lock context's deadline: after the lease of 150ms from the acquire ran out")
	t.Logf("seen ended %v after the acquire began", time.Since(start))
	require.ErrorIs(t, context.Cause(lctx), dsync.ErrLockLost, "cause")
	// Redis expired it too: another owner gets it.
	waitFor(t, time.Second, "the lock to expire in Redis", func() bool {
		l, ok, _ := c.NewMutex("fixed").TryLockContext(context.Background())
		if ok {
			c.NewMutex("fixed").UnlockContext(l)
		}
		return ok
	})
	require.ErrorIs(t, m.UnlockContext(lctx), dsync.ErrNotHeld, "unlock after expiry")
}

// The watchdog keeps a held lock: for 6 leases nobody else gets it and its
// context stays live. The lease is 600 ms (renewals every 200 ms): with
// 150 ms, a renewal 100 ms late, as a loaded 2-core machine under -race
// makes some now and then, let the key expire (1 run in 10-15 at a load of
// 6-7), which says nothing about the watchdog.
func TestMutexWatchdogRenews(t *testing.T) {
	const lease = 600 * time.Millisecond
	c := newClient(t, dsync.WithLease(lease))
	m := c.NewMutex("dog")
	lctx, err := m.LockContext(ctxT(t))
	require.NoError(t, err)
	// Proving a negative: for 6 leases nothing may take it or cancel it.
	other := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefixOf(t, c)))
	deadline := time.Now().Add(6 * lease)
	for time.Now().Before(deadline) {
		_, ok, _ := other.NewMutex("dog").TryLockContext(context.Background())
		require.False(t, ok, "another owner acquired a lock the watchdog should keep")
		require.NoError(t, lctx.Err(), "lock context ended: %v", context.Cause(lctx))
		time.Sleep(20 * time.Millisecond)
	}
	require.NoError(t, m.UnlockContext(lctx))
}

func TestFencingTokensSurviveRestart(t *testing.T) {
	s := redistest.Start(t)
	rc := s.Client(t)
	c := newClientOn(t, rc)
	var last uint64
	for i := 0; i < 3; i++ {
		lctx, err := c.NewMutex("r").LockContext(ctxT(t))
		require.NoError(t, err)
		tok, _ := dsync.FencingToken(lctx)
		require.Greater(t, tok, last, "token not above the previous one")
		last = tok
		require.NoError(t, c.NewMutex("r").UnlockContext(lctx))
		require.NoError(t, s.Do(t, "FLUSHALL").Error()) // forget the counter
	}
}

// A waiter must get a free lock even when the release message never comes.
func TestMutexLostWakeup(t *testing.T) {
	const lease = 600 * time.Millisecond // fallback: lease/3 = 200ms
	prefix := testPrefix(t)
	rc := newRueidis(t)
	holder := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefix), dsync.WithLease(lease))
	waiter := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefix), dsync.WithLease(lease))
	for _, tc := range []struct {
		name string
		free func(t *testing.T, lctx context.Context)
	}{
		{"freed without a message", func(t *testing.T, lctx context.Context) {
			// As if the holder crashed and its key expired: no PUBLISH.
			rc.Do(context.Background(), rc.B().Del().Key(prefix+":{lw}:mutex").Build())
		}},
		{"pubsub connection killed", func(t *testing.T, lctx context.Context) {
			require.NoError(t, rc.Do(context.Background(), rc.B().ClientKill().TypePubsub().Build()).Error())
			require.NoError(t, holder.NewMutex("lw").UnlockContext(lctx))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lctx, err := holder.NewMutex("lw").LockContext(ctxT(t))
			require.NoError(t, err)
			got := make(chan time.Time, 1)
			go func() {
				l, err := waiter.NewMutex("lw").LockContext(ctxT(t))
				assert.NoError(t, err)
				got <- time.Now()
				waiter.NewMutex("lw").UnlockContext(l)
			}()
			// Let the waiter subscribe and block.
			waitFor(t, 2*time.Second, "the waiter to subscribe", func() bool {
				n, _ := rc.Do(context.Background(), rc.B().PubsubNumsub().Channel(prefix+":{lw}:mutex:ch").Build()).AsIntMap()
				return n[prefix+":{lw}:mutex:ch"] > 0
			})
			freed := time.Now()
			tc.free(t, lctx)
			select {
			case at := <-got:
				d := at.Sub(freed)
				assert.LessOrEqual(t, d, lease/3+150*time.Millisecond, "waiter acquired %v after the lock was freed; fallback bound is %v", d, lease/3)
			case <-time.After(5 * time.Second):
				t.Fatal("waiter stalled with the lock free")
			}
		})
	}
}

func TestCloseEndsEverything(t *testing.T) {
	s := server(t)
	before := goleak.IgnoreCurrent()
	func() {
		rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{s.Addr}, DisableCache: true})
		require.NoError(t, err)
		defer rc.Close()
		prefix := testPrefix(t)
		c, err := dsync.NewClient(rc, dsync.WithKeyPrefix(prefix))
		require.NoError(t, err)
		m := c.NewMutex("close")
		lctx, err := m.LockContext(context.Background())
		require.NoError(t, err)
		fixed, err := c.NewMutex("close2", dsync.WithLeaseTime(time.Minute)).LockContext(context.Background())
		require.NoError(t, err)
		waitErr := make(chan error, 1)
		go func() {
			_, err := m.LockContext(context.Background())
			waitErr <- err
		}()
		require.NoError(t, c.Close())
		require.ErrorIs(t, <-waitErr, dsync.ErrClosed, "waiter")
		for _, l := range []context.Context{lctx, fixed} {
			require.ErrorIs(t, context.Cause(l), dsync.ErrClosed, "held lock context cause")
		}
		_, err = m.LockContext(context.Background())
		require.ErrorIs(t, err, dsync.ErrClosed, "LockContext after Close")
		require.ErrorIs(t, m.UnlockContext(lctx), dsync.ErrClosed, "UnlockContext after Close")
		require.NoError(t, c.Close(), "second Close")
		// Close released the locks: a new Client gets them at once.
		c2, _ := dsync.NewClient(rc, dsync.WithKeyPrefix(prefix))
		defer c2.Close()
		_, ok, err := c2.NewMutex("close").TryLockContext(context.Background())
		require.True(t, ok, "lock not released by Close")
		require.NoError(t, err, "lock not released by Close")
		// The fixed-lease hold too (WithLeaseTime's doc): released, not
		// left to its minute.
		_, ok, err = c2.NewMutex("close2", dsync.WithLeaseTime(time.Minute)).TryLockContext(context.Background())
		require.NoError(t, err)
		require.True(t, ok, "fixed-lease lock not released by Close")
	}()
	require.NoError(t, goleak.Find(before))
}

// Renewal batches EVALSHA itself; after SCRIPT FLUSH (as after a restart or
// failover) it must load the scripts again rather than lose the holds.
func TestRenewalAfterScriptFlush(t *testing.T) {
	s := redistest.Start(t)
	const lease = 240 * time.Millisecond
	c := newClientOn(t, s.Client(t), dsync.WithLease(lease))
	var held []context.Context
	for _, n := range []string{"a", "b", "c"} {
		l, err := c.NewMutex(n).LockContext(ctxT(t))
		require.NoError(t, err)
		held = append(held, l)
	}
	require.NoError(t, s.Do(t, "SCRIPT", "FLUSH").Error())
	// Proving a negative: for 4 leases no hold may be lost.
	deadline := time.Now().Add(4 * lease)
	for time.Now().Before(deadline) {
		for _, l := range held {
			require.NoError(t, l.Err(), "hold lost after SCRIPT FLUSH: %v", context.Cause(l))
		}
		time.Sleep(10 * time.Millisecond)
	}
	for i, n := range []string{"a", "b", "c"} {
		require.NoError(t, c.NewMutex(n).UnlockContext(held[i]))
	}
}

// The renewal loop renews mutex holds in batches of many keys per script:
// every hold of a batch is kept, and a hold whose key is gone is lost alone.
func TestRenewalBatches(t *testing.T) {
	s := redistest.Start(t)
	rc := s.Client(t)
	const lease, n = 300 * time.Millisecond, 600 // more than two batches
	c := newClientOn(t, rc, dsync.WithLease(lease), dsync.WithKeyPrefix("b"))
	held := make(map[string]context.Context, n)
	for i := range n {
		name := strconv.Itoa(i)
		l, err := c.NewMutex(name).LockContext(ctxT(t))
		require.NoError(t, err)
		held[name] = l
	}
	const victim = "417"
	rc.Do(context.Background(), rc.B().Del().Key("b:{"+victim+"}:mutex").Build())
	onlyVictimLost(t, lease, held, victim)
	for name, l := range held {
		if name == victim {
			continue
		}
		pttl, _ := rc.Do(context.Background(), rc.B().Pttl().Key("b:{"+name+"}:mutex").Build()).AsInt64()
		require.Greater(t, pttl, int64(0), "hold %s has pttl", name)
		require.NoError(t, c.NewMutex(name).UnlockContext(l))
	}
}

// onlyVictimLost checks the renewal loop's verdicts after the key of held's
// victim was deleted: within two leases that hold is lost, with cause
// ErrLockLost, and over three more leases no other hold is.
func onlyVictimLost(t *testing.T, lease time.Duration, held map[string]context.Context, victim string) {
	t.Helper()
	waitFor(t, 2*lease, "the hold whose key was deleted to be lost", func() bool { return held[victim].Err() != nil })
	require.ErrorIs(t, context.Cause(held[victim]), dsync.ErrLockLost, "cause")
	// Proving a negative: over 3 more leases no other hold is lost.
	deadline := time.Now().Add(3 * lease)
	for time.Now().Before(deadline) {
		for name, l := range held {
			if name != victim {
				require.NoError(t, l.Err(), "hold %s lost: %v", name, context.Cause(l))
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
}
