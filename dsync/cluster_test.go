package dsync_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/dsync/dsync/internal/redistest"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The scale-out deployments are started on first use, once per package, and
// stopped by TestMain through stopScaleOut.
var scaleOut struct {
	mu       sync.Mutex
	cluster  *redistest.Cluster
	clErr    error
	clOnce   sync.Once
	sentinel *redistest.Sentinel
	stErr    error
	stOnce   sync.Once
	servers  []*redistest.Server
	svErr    error
	svOnce   sync.Once
}

func stopScaleOut() {
	scaleOut.mu.Lock()
	defer scaleOut.mu.Unlock()
	if scaleOut.cluster != nil {
		scaleOut.cluster.Stop()
	}
	if scaleOut.sentinel != nil {
		scaleOut.sentinel.Stop()
	}
	for _, s := range scaleOut.servers {
		s.Stop()
	}
}

func requireScaleOut(t testing.TB, err error) {
	t.Helper()
	redistest.Require(t)
	require.NoError(t, err)
}

// cluster returns the package's 3-master, 3-replica Redis Cluster.
func cluster(t testing.TB) *redistest.Cluster {
	t.Helper()
	redistest.Require(t)
	scaleOut.clOnce.Do(func() {
		cl, err := redistest.StartCluster()
		scaleOut.mu.Lock()
		scaleOut.cluster, scaleOut.clErr = cl, err
		scaleOut.mu.Unlock()
	})
	requireScaleOut(t, scaleOut.clErr)
	return scaleOut.cluster
}

// sentinel returns the package's master, replica and three sentinels.
func sentinel(t testing.TB) *redistest.Sentinel {
	t.Helper()
	redistest.Require(t)
	scaleOut.stOnce.Do(func() {
		st, err := redistest.StartSentinel()
		scaleOut.mu.Lock()
		scaleOut.sentinel, scaleOut.stErr = st, err
		scaleOut.mu.Unlock()
	})
	requireScaleOut(t, scaleOut.stErr)
	return scaleOut.sentinel
}

// redlockServers returns the package's five independent servers, all
// running (a test that kills some restarts them when it ends).
func redlockServers(t testing.TB) []*redistest.Server {
	t.Helper()
	redistest.Require(t)
	scaleOut.svOnce.Do(func() {
		ss, err := redistest.StartServers(5)
		scaleOut.mu.Lock()
		scaleOut.servers, scaleOut.svErr = ss, err
		scaleOut.mu.Unlock()
	})
	requireScaleOut(t, scaleOut.svErr)
	return scaleOut.servers
}

// clusterRueidis returns a rueidis cluster client, closed when t ends.
func clusterRueidis(t testing.TB) rueidis.Client {
	t.Helper()
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: cluster(t).Addrs(), DisableCache: true})
	require.NoError(t, err)
	t.Cleanup(rc.Close)
	return rc
}

// namesOnMasters returns one lock name per cluster master, so a test
// covers every node.
func namesOnMasters(t testing.TB, prefix string) []string {
	t.Helper()
	cl := cluster(t)
	seen := map[string]bool{}
	var names []string
	for i := 0; len(names) < 3 && i < 1000; i++ {
		name := fmt.Sprintf("n%d", i)
		m, _, err := cl.MasterOf(prefix + ":{" + name + "}:mutex")
		require.NoError(t, err)
		if !seen[m.Addr] {
			seen[m.Addr] = true
			names = append(names, name)
		}
	}
	require.GreaterOrEqual(t, len(names), 3, "could not find names on three masters")
	return names
}

func TestClusterMutexBasic(t *testing.T) {
	prefix := testPrefix(t)
	c := newClientOn(t, clusterRueidis(t), dsync.WithKeyPrefix(prefix))
	ctx := ctxT(t)
	for _, name := range append(namesOnMasters(t, prefix), "brace}{name", "") {
		m := c.NewMutex(name)
		if name == "" {
			_, err := m.LockContext(ctx)
			require.ErrorIs(t, err, dsync.ErrInvalidArgument, "empty name")
			continue
		}
		lctx, err := m.LockContext(ctx)
		require.NoError(t, err, "%q", name)
		tok, _ := dsync.FencingToken(lctx)
		_, ok, err := m.TryLockContext(ctx)
		require.NoError(t, err, "%q: TryLockContext by another owner", name)
		require.False(t, ok, "%q: TryLockContext by another owner", name)
		require.NoError(t, m.UnlockContext(lctx), "%q", name)
		require.ErrorIs(t, m.UnlockContext(lctx), dsync.ErrNotHeld, "%q: second unlock", name)
		lctx2, ok, err := m.TryLockContext(ctx)
		require.NoError(t, err, "%q: relock", name)
		require.True(t, ok, "%q: relock", name)
		tok2, _ := dsync.FencingToken(lctx2)
		require.Greater(t, tok2, tok, "%q: token", name)
		require.NoError(t, m.UnlockContext(lctx2))
	}
}

// TestClusterWakeup proves that a release on any master wakes a waiter in
// another Client at once: the waiter's fallback poll is lease/3 = 10s, far
// beyond the bound checked here.
func TestClusterWakeup(t *testing.T) {
	prefix := testPrefix(t)
	a := newClientOn(t, clusterRueidis(t), dsync.WithKeyPrefix(prefix))
	b := newClientOn(t, clusterRueidis(t), dsync.WithKeyPrefix(prefix))
	ctx := ctxT(t)
	for _, name := range namesOnMasters(t, prefix) {
		lctx, err := a.NewMutex(name).LockContext(ctx)
		require.NoError(t, err)
		wait := waitForLock(ctx, b, name)
		waitShardSubscribed(t, prefix+":{"+name+"}:mutex")
		bctx := releaseWakes(t, a, name, lctx, wait)
		require.NoError(t, b.NewMutex(name).UnlockContext(bctx))
	}
	// Close drops the subscriptions from the rueidis client's connections,
	// which outlive the Client.
	b.Close()
	for _, name := range namesOnMasters(t, prefix) {
		key := prefix + ":{" + name + "}:mutex"
		m, _, err := cluster(t).MasterOf(key)
		require.NoError(t, err)
		waitFor(t, 5*time.Second, "the subscription to "+key+":ch to end", func() bool {
			return shardNumsub(t, m.Addr, key+":ch") == 0
		})
	}
}

// waitForLock starts LockContext of the mutex name through c; the returned
// channel delivers its outcome.
func waitForLock(ctx context.Context, c *dsync.Client, name string) <-chan lockResult {
	got := make(chan lockResult, 1)
	go func() {
		l, err := c.NewMutex(name).LockContext(ctx)
		got <- lockResult{l, err}
	}()
	return got
}

type lockResult struct {
	ctx context.Context
	err error
}

// releaseWakes releases lctx, the hold of name through a, and checks that
// the waiter started by waitForLock gets the lock within 2s (the fallback
// poll is lease/3 = 10s, so only a wakeup message can do it). It returns
// the waiter's lock context.
func releaseWakes(t *testing.T, a *dsync.Client, name string, lctx context.Context, wait <-chan lockResult) context.Context {
	t.Helper()
	released := time.Now()
	require.NoError(t, a.NewMutex(name).UnlockContext(lctx))
	select {
	case r := <-wait:
		require.NoError(t, r.err)
		t.Logf("%s: woken %v after the release", name, time.Since(released))
		return r.ctx
	case <-time.After(2 * time.Second):
		t.Fatalf("%s: waiter not woken within 2s of the release", name)
		return nil
	}
}

// waitShardSubscribed waits until a waiter is subscribed to the channel of
// the lock at key with SSUBSCRIBE on the master that owns the key's slot,
// and checks that no node has a classic subscription to it.
func waitShardSubscribed(t testing.TB, key string) {
	t.Helper()
	cl := cluster(t)
	m, _, err := cl.MasterOf(key)
	require.NoError(t, err)
	ch := key + ":ch"
	waitFor(t, 5*time.Second, "a waiter to SSUBSCRIBE to "+ch+" on "+m.Addr, func() bool {
		return shardNumsub(t, m.Addr, ch) > 0
	})
	for _, addr := range cl.Addrs() {
		n := numsubOn(t, "NUMSUB", addr, ch)
		require.Equal(t, int64(0), n, "%d classic subscribers of %s on %s; wakeups in a cluster are sharded", n, ch, addr)
	}
}

func shardNumsub(t testing.TB, addr, ch string) int64 { return numsubOn(t, "SHARDNUMSUB", addr, ch) }

// numsubOn asks the node at addr for PUBSUB sub (NUMSUB or SHARDNUMSUB) of ch.
func numsubOn(t testing.TB, sub, addr, ch string) int64 {
	t.Helper()
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, ForceSingleClient: true, DisableCache: true})
	require.NoError(t, err)
	defer rc.Close()
	v, err := rc.Do(context.Background(), rc.B().Arbitrary("PUBSUB", sub).Args(ch).Build()).ToArray()
	require.NoError(t, err, "PUBSUB %s on %s: %v", sub, addr, v)
	require.Len(t, v, 2, "PUBSUB %s on %s: %v", sub, addr, v)
	n, _ := v[1].AsInt64()
	return n
}

// clusterHammer runs goroutines in two Clients over the cluster, each taking
// the mutex name iters times; it fails on two holders at once. With during,
// it calls it once the hammer runs, and each goroutine goes on until it has
// done iters more acquisitions after during returned; it reports how long
// that took.
func clusterHammer(t *testing.T, prefix, name string, iters int, during func(), opts ...dsync.Option) (errs int64, after time.Duration) {
	const clients, goroutines = 2, 4
	var inside, done atomic.Int32
	var faulted atomic.Bool
	if during == nil {
		faulted.Store(true)
	}
	var nerr atomic.Int64
	ctx, cancel := context.WithTimeout(ctxT(t), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for range clients {
		c := newClientOn(t, clusterRueidis(t), append([]dsync.Option{dsync.WithKeyPrefix(prefix)}, opts...)...)
		for range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer done.Add(1)
				m := c.NewMutex(name)
				for i := 0; i < iters; {
					if !faulted.Load() {
						i = 0 // count only the acquisitions after the fault
					}
					lctx, err := m.LockContext(ctx)
					if err != nil {
						if !assert.NoError(t, ctx.Err(), "hammer stuck: %d of %d iterations, %v", i, iters, err) {
							return
						}
						// A failover may fail a call; retrying is the caller's job.
						if nerr.Add(1) <= 3 {
							t.Logf("call failed (retried): %v", err)
						}
						time.Sleep(10 * time.Millisecond)
						continue
					}
					assert.Equal(t, int32(1), inside.Add(1), "holders at once")
					time.Sleep(200 * time.Microsecond)
					inside.Add(-1)
					if err := m.UnlockContext(lctx); err != nil {
						// Under a failover a release can fail; the lock then
						// frees itself when its lease runs out.
						t.Logf("unlock failed: %v", err)
						nerr.Add(1)
					}
					i++
				}
			}()
		}
	}
	var faultDone time.Time
	if during != nil {
		waitFor(t, 10*time.Second, "the hammer to start", func() bool { return inside.Load() > 0 })
		during()
		faultDone = time.Now()
		faulted.Store(true)
	}
	wg.Wait()
	if during != nil {
		after = time.Since(faultDone)
	}
	return nerr.Load(), after
}

func TestClusterMutexHammer(t *testing.T) {
	prefix := testPrefix(t)
	for _, name := range namesOnMasters(t, prefix)[:2] {
		errs, _ := clusterHammer(t, prefix, name, 25, nil)
		require.Equal(t, int64(0), errs, "errors without a fault")
	}
}
