package dsync

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dsync/dsync/internal/redistest"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
)

// In a cluster, when the node under a sharded subscription goes away,
// rueidis retries the subscription by itself; the Client must still learn
// of the break: waiters are signalled and told to poll (a new waiter does
// not wait for a confirmation that cannot come), and when the node is back
// the subscription is confirmed again and waiters are signalled to look.
// A one-node cluster (all slots on one master) cannot fail over, so the
// node can be killed and restarted at will.
func TestShardedSubscriptionBreak(t *testing.T) {
	s := redistest.Start(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf")
	require.NoError(t, s.Do(t, "CLUSTER", "ADDSLOTSRANGE", "0", "16383").Error())
	waitUntil(t, 10*time.Second, "the one-node cluster to be ok", func() bool {
		info, err := s.Do(t, "CLUSTER", "INFO").ToString()
		return err == nil && strings.Contains(info, "cluster_state:ok")
	})
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{s.Addr}, DisableCache: true})
	require.NoError(t, err)
	defer rc.Close()
	require.Equal(t, rueidis.ClientModeCluster, rc.Mode(), "mode")
	c, err := NewClient(rc, WithKeyPrefix("brk"))
	require.NoError(t, err)
	defer c.Close()
	require.True(t, c.sharded, "a Redis 7 cluster without sharded pub/sub")
	const ch = "brk:{x}:mutex:ch"
	sub, live := c.notify.subscribe(context.Background(), ch)
	defer sub.close()
	require.True(t, live, "subscription not confirmed")
	sub.drain()
	state := func() (live, broken bool) {
		c.notify.subsMu.RLock()
		defer c.notify.subsMu.RUnlock()
		cs := c.notify.subs[ch]
		return cs.live, cs.broken
	}

	require.NoError(t, s.Signal(syscall.SIGKILL))
	waitUntil(t, 5*time.Second, "the break to be recorded", func() bool {
		l, b := state()
		return !l && b
	})
	select {
	case <-sub.C:
	default:
		t.Fatal("waiter not signalled when the subscription broke")
	}
	start := time.Now()
	other, live2 := c.notify.subscribe(context.Background(), ch)
	other.close()
	require.False(t, live2, "a new waiter during the break: live")
	require.LessOrEqual(t, time.Since(start), 100*time.Millisecond, "a new waiter during the break: live")

	require.NoError(t, s.Restart()) // keeps nodes.conf: the same one-node cluster
	waitUntil(t, 15*time.Second, "the subscription to be confirmed again", func() bool {
		l, _ := state()
		return l
	})
	select {
	case <-sub.C:
	case <-time.After(time.Second):
		t.Fatal("waiter not signalled when the subscription came back")
	}
	n, err := s.Do(t, "PUBSUB", "SHARDNUMSUB", ch).ToArray()
	require.NoError(t, err, "SHARDNUMSUB: %v", n)
	require.Len(t, n, 2, "SHARDNUMSUB: %v", n)
	v, _ := n[1].AsInt64()
	require.Equal(t, int64(1), v, "sharded subscriptions on the restarted node")
}
