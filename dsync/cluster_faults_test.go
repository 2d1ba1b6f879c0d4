package dsync_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/dsync/dsync/internal/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestClusterFailoverUnderLoad fails the lock's master over to its replica
// (CLUSTER FAILOVER) while eight goroutines contend: never two holders, and
// every goroutine finishes, so waiters were woken after the failover.
func TestClusterFailoverUnderLoad(t *testing.T) {
	prefix := testPrefix(t)
	cl := cluster(t)
	name := "failover"
	_, replica, err := cl.MasterOf(prefix + ":{" + name + "}:mutex")
	require.NoError(t, err)
	// A release caught by the failover's write pause can fail; its key then
	// frees itself when the lease runs out, so the lease bounds the stall.
	const lease = 3 * time.Second
	errs, after := clusterHammer(t, prefix, name, 20, func() {
		assert.NoError(t, cl.Failover(replica, 10*time.Second))
	}, dsync.WithLease(lease))
	role, roleErr := redistest.Role(replica)
	require.NoError(t, roleErr, "no failover happened")
	require.Equal(t, "master", role, "replica role: no failover happened")
	t.Logf("160 acquisitions after the failover took %v; %d failed calls retried", after, errs)
	// Waiters of the other Client are woken by the release message; were
	// they not, each crossing would wait up to lease/3, and 160 acquisitions
	// (handed over in-process at most 8 in a row) would take far longer.
	require.LessOrEqual(t, after, lease+3*time.Second, "waiters not woken after the failover for 160 acquisitions")
}

// TestClusterPrimitives runs a small cross-Client hammer of every other
// primitive on the cluster: exclusion (or the permit bound) holds, and
// Once runs its function once.
func TestClusterPrimitives(t *testing.T) {
	prefix := testPrefix(t)
	var clients []*dsync.Client
	for range 2 {
		clients = append(clients, newClientOn(t, clusterRueidis(t), dsync.WithKeyPrefix(prefix)))
	}
	type lockFn func(c *dsync.Client, ctx context.Context) (context.Context, func() error, error)
	cases := []struct {
		name  string
		limit int32
		lock  lockFn
	}{
		{"FairMutex", 1, func(c *dsync.Client, ctx context.Context) (context.Context, func() error, error) {
			m := c.NewFairMutex("fair")
			l, err := m.LockContext(ctx)
			return l, func() error { return m.UnlockContext(l) }, err
		}},
		{"RWMutex", 1, func(c *dsync.Client, ctx context.Context) (context.Context, func() error, error) {
			rw := c.NewRWMutex("rw")
			l, err := rw.LockContext(ctx)
			return l, func() error { return rw.UnlockContext(l) }, err
		}},
		{"Semaphore", 2, func(c *dsync.Client, ctx context.Context) (context.Context, func() error, error) {
			s := c.NewSemaphore("sem", 2)
			l, err := s.Acquire(ctx, 1)
			return l, func() error { return s.Release(l, 1) }, err
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(ctxT(t), 20*time.Second)
			defer cancel()
			var inside, peak atomic.Int32
			var wg sync.WaitGroup
			for _, c := range clients {
				for range 3 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for range 10 {
							_, unlock, err := tc.lock(c, ctx)
							if !assert.NoError(t, err) {
								return
							}
							n := inside.Add(1)
							assert.LessOrEqual(t, n, tc.limit, "holders over the limit")
							for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
							}
							time.Sleep(200 * time.Microsecond)
							inside.Add(-1)
							assert.NoError(t, unlock())
						}
					}()
				}
			}
			wg.Wait()
			if tc.limit > 1 && peak.Load() < 2 {
				t.Logf("semaphore never had two holders at once (peak %d)", peak.Load())
			}
		})
	}
	// Waiters poll only every lease/3 = 10s without wakeups; the 5s bounds
	// below hold only if the sharded wakeups arrive.
	t.Run("Once", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(ctxT(t), 5*time.Second)
		defer cancel()
		var runs atomic.Int32
		var wg sync.WaitGroup
		for _, c := range clients {
			for range 3 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					err := c.NewOnce("once").Do(ctx, func(context.Context) error {
						runs.Add(1)
						time.Sleep(20 * time.Millisecond)
						return nil
					})
					assert.NoError(t, err)
				}()
			}
		}
		wg.Wait()
		require.Equal(t, int32(1), runs.Load(), "runs of f by Once")
	})
	t.Run("WaitGroup", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(ctxT(t), 5*time.Second)
		defer cancel()
		a, b := clients[0].NewWaitGroup("wg"), clients[1].NewWaitGroup("wg")
		require.NoError(t, a.Add(ctx, 3))
		waited := make(chan error, 1)
		go func() { waited <- b.Wait(ctx) }()
		waitShardSubscribed(t, prefix+":{wg}:wg")
		for range 3 {
			select {
			case err := <-waited:
				t.Fatalf("Wait returned before the counter reached zero: %v", err)
			default:
			}
			require.NoError(t, a.Done(ctx))
		}
		require.NoError(t, <-waited, "Wait on the other Client")
	})
}

// TestClusterRenewalBySlot: in a cluster the watchdog renews the holds of
// one slot in one script call. Holds sharing slots (and others alone in
// theirs) stay held over several leases; deleting one key of a shared slot
// loses that hold only.
func TestClusterRenewalBySlot(t *testing.T) {
	prefix := testPrefix(t)
	rc := clusterRueidis(t)
	const lease = 300 * time.Millisecond
	c := newClientOn(t, rc, dsync.WithKeyPrefix(prefix), dsync.WithLease(lease))
	key := func(name string) string { return prefix + ":{" + name + "}:mutex" }
	// Names grouped by slot: three slots with three names each.
	bySlot := map[uint16][]string{}
	var shared [][]string
	for i := 0; len(shared) < 3 && i < 200000; i++ {
		name := fmt.Sprintf("s%d", i)
		cmd := rc.B().Get().Key(key(name)).Build()
		slot := cmd.Slot()
		bySlot[slot] = append(bySlot[slot], name)
		if len(bySlot[slot]) == 3 {
			shared = append(shared, bySlot[slot])
		}
	}
	require.GreaterOrEqual(t, len(shared), 3, "found no three slots with three names each")
	names := append([]string{"alone1", "alone2"}, shared[0]...)
	names = append(append(names, shared[1]...), shared[2]...)
	held := map[string]context.Context{}
	for _, name := range names {
		l, err := c.NewMutex(name).LockContext(ctxT(t))
		require.NoError(t, err)
		held[name] = l
	}
	victim := shared[1][1]
	require.NoError(t, rc.Do(context.Background(), rc.B().Del().Key(key(victim)).Build()).Error())
	onlyVictimLost(t, lease, held, victim)
	for name, l := range held {
		if name == victim {
			continue
		}
		require.NoError(t, c.NewMutex(name).UnlockContext(l), "%s", name)
	}
}

// TestClusterSlotMigration: when the slot of a lock moves to another master
// while a waiter of another Client is subscribed, the old master ends the
// sharded subscription and the waiter subscribes again on the new one;
// the release there wakes it at once (its fallback poll is lease/3 = 10s).
func TestClusterSlotMigration(t *testing.T) {
	prefix := testPrefix(t)
	a := newClientOn(t, clusterRueidis(t), dsync.WithKeyPrefix(prefix))
	b := newClientOn(t, clusterRueidis(t), dsync.WithKeyPrefix(prefix))
	ctx := ctxT(t)
	const name = "moving"
	key := prefix + ":{" + name + "}:mutex"
	lctx, err := a.NewMutex(name).LockContext(ctx)
	require.NoError(t, err)
	tok, _ := dsync.FencingToken(lctx)
	wait := waitForLock(ctx, b, name)
	waitShardSubscribed(t, key)
	from, _, err := cluster(t).MasterOf(key)
	require.NoError(t, err)
	to, err := cluster(t).MigrateSlot(key, 10*time.Second)
	require.NoError(t, err)
	t.Logf("slot of %s moved from %s to %s", key, from.Addr, to.Addr)
	waitShardSubscribed(t, key) // now on the new master
	require.Equal(t, int64(0), shardNumsub(t, from.Addr, key+":ch"), "still subscribed on the old master %s", from.Addr)
	require.NoError(t, lctx.Err(), "the hold was lost in the migration: %v", context.Cause(lctx))
	bctx := releaseWakes(t, a, name, lctx, wait)
	tok2, _ := dsync.FencingToken(bctx)
	require.Greater(t, tok2, tok, "token not above the previous one")
	require.NoError(t, b.NewMutex(name).UnlockContext(bctx))
}

// TestClusterMasterKilled: the master of a lock's slot dies (SIGKILL) and
// the cluster promotes its replica (node timeout 2 s). The hold survives
// (its lease outlasts the failover and renewal finds the new master); the
// waiter of another Client, whose sharded subscription broke with the node,
// subscribes again on the new master and is woken there by the release,
// well within its fallback poll (lease/3), and gets a larger token. The
// node is restarted afterwards and rejoins as a replica.
func TestClusterMasterKilled(t *testing.T) {
	prefix := testPrefix(t)
	cl := cluster(t)
	const name, lease = "killed", 12 * time.Second
	key := prefix + ":{" + name + "}:mutex"
	master, replica, err := cl.MasterOf(key)
	require.NoError(t, err)
	a := newClientOn(t, clusterRueidis(t), dsync.WithKeyPrefix(prefix), dsync.WithLease(lease))
	b := newClientOn(t, clusterRueidis(t), dsync.WithKeyPrefix(prefix), dsync.WithLease(lease))
	ctx := ctxT(t)
	lctx, err := a.NewMutex(name).LockContext(ctx)
	require.NoError(t, err)
	tok, _ := dsync.FencingToken(lctx)
	waitFor(t, 5*time.Second, "the hold to reach the replica", func() bool {
		n, err := replica.Do(t, "EXISTS", key).AsInt64()
		return err == nil && n == 1
	})
	// A wait can fail while the slot has no master (retrying is the
	// caller's job, as with sync.Locker's Lock): the waiter retries.
	wait := make(chan lockResult, 1)
	var failed atomic.Int32
	go func() {
		for {
			l, err := b.NewMutex(name).LockContext(ctx)
			if err == nil || ctx.Err() != nil {
				wait <- lockResult{l, err}
				return
			}
			if failed.Add(1) == 1 {
				t.Logf("wait failed during the failover (retried): %v", err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	waitShardSubscribed(t, key)

	require.NoError(t, master.Signal(syscall.SIGKILL))
	t.Cleanup(func() {
		if !assert.NoError(t, master.Restart(), "restarting %s", master.Addr) {
			return
		}
		assert.NoError(t, cl.WaitOK(30*time.Second))
	})
	killed := time.Now()
	waitFor(t, 30*time.Second, "the replica to be promoted", func() bool {
		role, err := redistest.Role(replica)
		return err == nil && role == "master"
	})
	promoted := time.Since(killed)
	waitFor(t, 10*time.Second, "the waiter to subscribe on the new master", func() bool {
		return shardNumsub(t, replica.Addr, key+":ch") > 0
	})
	resubscribed := time.Since(killed)
	released := time.Now()
	require.NoError(t, lctx.Err(), "the hold was lost in the failover: %v", context.Cause(lctx))
	require.NoError(t, a.NewMutex(name).UnlockContext(lctx), "release on the new master")
	var r lockResult
	select {
	case r = <-wait:
	case <-time.After(2 * time.Second):
		t.Fatal("waiter not woken within 2s of the release on the new master")
	}
	require.NoError(t, r.err)
	t.Logf("promoted after %v, waiter resubscribed after %v, lock taken %v after the release; %d failed waits retried",
		promoted.Round(time.Millisecond), resubscribed.Round(time.Millisecond), time.Since(released).Round(time.Millisecond), failed.Load())
	tok2, _ := dsync.FencingToken(r.ctx)
	require.Greater(t, tok2, tok, "token not above the previous one")
	require.NoError(t, b.NewMutex(name).UnlockContext(r.ctx))
}

// An election on a cluster: its lock, record and change channel share a
// slot, and changes reach an observer of another Client by sharded pub/sub.
func TestClusterElection(t *testing.T) {
	prefix := testPrefix(t)
	a := newClientOn(t, clusterRueidis(t), dsync.WithKeyPrefix(prefix))
	b := newClientOn(t, clusterRueidis(t), dsync.WithKeyPrefix(prefix))
	ctx := ctxT(t)
	for _, name := range []string{"e1", "e2", "e3"} {
		ea, eb := a.NewElection(name), b.NewElection(name)
		obs := eb.Observe(ctx)
		require.Equal(t, dsync.Leader{}, recv(t, obs, 10*time.Second))
		lctx, err := ea.Campaign(ctx, "a")
		require.NoError(t, err)
		require.Equal(t, "a", recv(t, obs, 10*time.Second).Value)
		require.NoError(t, ea.Proclaim(lctx, "a2"))
		require.Equal(t, "a2", recv(t, obs, 10*time.Second).Value)
		require.NoError(t, ea.Resign(lctx))
		require.Equal(t, dsync.Leader{}, recv(t, obs, 10*time.Second))
		lctx, err = eb.Campaign(ctx, "b")
		require.NoError(t, err)
		l, err := ea.Leader(ctx)
		require.NoError(t, err)
		require.Equal(t, "b", l.Value)
		require.Equal(t, "b", recv(t, obs, 10*time.Second).Value)
		require.NoError(t, eb.Resign(lctx))
	}
}
