package dsync_test

import (
	"context"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A notice on the control channel (here a release by owner through
// another Client) sent while the holder's Client was not subscribed (its
// pub/sub connection broken, not yet back) is made up for when the
// subscription is back: the Client checks its holds in Redis then, and the
// lock context of the hold that is gone ends within a round trip of that,
// not at its next renewal (lease/3: 20 s here). Before, it lived on until
// the renewal (make test with both CPUs busy, 0196c5f, 2026-12-04: the
// control subscription of a new Client was not yet confirmed when the
// release was told, and the lock context outlived the release by 2 s).
func TestControlNoticeMissedWhileUnsubscribed(t *testing.T) {
	srv := server(t)
	var (
		refuse atomic.Bool
		mu     sync.Mutex
		outs   []string // the proxy's connections to Redis, by local address
	)
	addr := serveProxy(t, srv.Addr, func(in, out net.Conn) func() {
		if refuse.Load() {
			in.Close()
			out.Close()
			return func() {}
		}
		mu.Lock()
		outs = append(outs, out.LocalAddr().String())
		mu.Unlock()
		return func() {
			defer out.Close()
			buf := make([]byte, 32<<10)
			for {
				n, err := in.Read(buf)
				if err != nil {
					return
				}
				if _, err := out.Write(buf[:n]); err != nil {
					return
				}
			}
		}
	})
	rcA, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	require.NoError(t, err)
	t.Cleanup(rcA.Close)
	prefix := testPrefix(t)
	a := newClientOn(t, rcA, dsync.WithKeyPrefix(prefix), dsync.WithLease(time.Minute))
	b := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefix), dsync.WithLease(time.Minute))
	direct := newRueidis(t)
	ctx := ctxT(t)

	// A's pub/sub connection: a subscriber of the control channel that
	// came through the proxy.
	control := prefix + ":force"
	aSub := func() string {
		list, err := direct.Do(ctx, direct.B().ClientList().TypePubsub().Build()).ToString()
		require.NoError(t, err)
		mu.Lock()
		defer mu.Unlock()
		for _, line := range strings.Split(list, "\n") {
			for _, o := range outs {
				if strings.Contains(line, "addr="+o+" ") {
					return o
				}
			}
		}
		return ""
	}
	waitFor(t, 10*time.Second, "A's control subscription", func() bool {
		n, _ := direct.Do(ctx, direct.B().PubsubNumsub().Channel(control).Build()).AsIntMap()
		return n[control] == 2 && aSub() != ""
	})

	owner := dsync.WithOwner(ctx)
	lctx, err := a.NewMutex("gap").LockContext(owner)
	require.NoError(t, err)

	// A's subscription breaks and cannot come back; the release is told
	// meanwhile, to B's subscription only.
	refuse.Store(true)
	require.NoError(t, direct.Do(ctx, direct.B().ClientKill().Addr(aSub()).Build()).Error())
	waitFor(t, 10*time.Second, "A's subscription gone", func() bool {
		n, _ := direct.Do(ctx, direct.B().PubsubNumsub().Channel(control).Build()).AsIntMap()
		return n[control] == 1
	})
	require.NoError(t, b.NewMutex("gap").UnlockContext(owner), "a release by owner through another Client")
	require.NoError(t, lctx.Err(), "A learned of the release without its subscription")

	// The subscription comes back: the notice it missed is made up for.
	refuse.Store(false)
	select {
	case <-lctx.Done():
		cause := context.Cause(lctx)
		require.ErrorIs(t, cause, dsync.ErrLockLost)
		// The check cannot know a forced release took it: the cause
		// says what was found, and when (TestLostLockCauseSaysWhy/key_gone
		// read "force-unlocked" in CI when its Del landed before the
		// Client's first subscription was confirmed).
		assert.Contains(t, cause.Error(), "gone from Redis", "the cause says what the check found")
		assert.Contains(t, cause.Error(), "control subscription came up", "the cause says when it was found")
		assert.NotContains(t, cause.Error(), "force-unlocked (ForceUnlock", "the cause does not claim a forced release it cannot know of")
	case <-time.After(10 * time.Second): // the first renewal is 20 s away
		t.Fatal("the holder's lock context outlived the release told while its Client was not subscribed")
	}
}
