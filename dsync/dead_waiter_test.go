package dsync_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A waiter whose process dies keeps its queue place until the place's
// lease lapses, a lease after its last look at the semaphore; a release
// before then grants it the permits, which it holds, unknowing, for the
// grant's lease. So a dead waiter keeps the others out for up to two
// leases after its death, not one (docs/design.md says so; the fault
// suite's quiet window after a SIGKILL, killQuiet, is two leases and a
// margin for this reason).
//
// The dead waiter is a real one: a Client whose traffic to Redis a proxy
// swallows from the moment it is queued (no undo, no later look reaches
// Redis; the grant's message still reaches it, and it loses the hold it
// cannot renew).
//
// The test reads the mechanism in Redis by server time: the grant is made
// before the place lapses, it lapses a lease after the grant, and the
// next waiter's token (server µs) comes after that.
func TestSemaphoreDeadWaiterGrantHoldsALease(t *testing.T) {
	const lease = time.Second
	prefix := testPrefix(t)
	rdb := newRueidis(t)
	a := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefix), dsync.WithLease(lease))
	p := newStallProxy(t, server(t).Addr)
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{p.addr}, DisableCache: true})
	require.NoError(t, err)
	t.Cleanup(rc.Close)
	b := newClientOn(t, rc, dsync.WithKeyPrefix(prefix), dsync.WithLease(lease))
	waitPreloaded(t, b) // nothing of it in flight when its process dies
	c := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefix), dsync.WithLease(lease))
	base := prefix + ":{dw}:sem"

	held, err := a.NewSemaphore("dw", 1).Acquire(ctxT(t), 1)
	require.NoError(t, err)
	bctx, bcancel := context.WithCancel(context.Background())
	defer bcancel()
	bdone := make(chan error, 1)
	go func() {
		_, err := b.NewSemaphore("dw", 1).Acquire(bctx, 1)
		bdone <- err
	}()
	want := func() (string, string) {
		m, err := rdb.Do(ctxT(t), rdb.B().Hgetall().Key(base+":want").Build()).AsStrMap()
		require.NoError(t, err)
		for w, rec := range m {
			return w, rec
		}
		return "", ""
	}
	waitFor(t, 5*time.Second, "the waiter queued", func() bool { w, _ := want(); return w != "" })
	p.freeze() // the waiter's process is dead from here: nothing of it reaches Redis
	w, rec := want()
	f := strings.Fields(rec) // "<permits> <owner> <lease ms> <place expiry ms>"
	require.Len(t, f, 4, "the waiter's record %q", rec)
	place, err := strconv.ParseInt(f[3], 10, 64)
	require.NoError(t, err)

	// The release, while the dead waiter's place lives, grants it; it
	// comes after the waiter's last look by the server clock (in ms, as
	// the place and the grant count: a release in the same millisecond as
	// the waiter's last look made a grant that lapses with the place, not
	// after it: an idle make test of f1d89bb, 2026-12-05).
	serverMS := func() int64 {
		tm, err := rdb.Do(ctxT(t), rdb.B().Time().Build()).AsStrSlice()
		require.NoError(t, err)
		s, _ := strconv.ParseInt(tm[0], 10, 64)
		us, _ := strconv.ParseInt(tm[1], 10, 64)
		return s*1000 + us/1000
	}
	waitFor(t, 5*time.Second, "the server clock past the waiter's last look", func() bool { return serverMS() > place-lease.Milliseconds() })
	require.NoError(t, a.NewSemaphore("dw", 1).Release(held, 1))
	hs, err := rdb.Do(ctxT(t), rdb.B().Zrange().Key(base+":holders").Min("0").Max("-1").Withscores().Build()).AsZScores()
	require.NoError(t, err)
	require.Len(t, hs, 1, "holders after the release")
	require.Contains(t, hs[0].Member, " "+w+" ", "the permit went to the dead waiter")
	grantTok, err := strconv.ParseUint(strings.Fields(hs[0].Member)[1], 10, 64) // "<owner> <token> <waiter> <permits>"
	require.NoError(t, err)
	assert.Less(t, int64(grantTok/1000), place, "the grant (its token, server µs) was made while the dead waiter's place lived")
	grantEnd := int64(hs[0].Score)
	assert.Greater(t, grantEnd, place, "the grant outlives the dead waiter's place")
	t.Logf("the dead waiter's place lapsed at %d ms, its grant at %d ms (%d ms later)", place, grantEnd, grantEnd-place)

	// The next waiter gets the permit once the grant lapses, not before.
	lctx, err := c.NewSemaphore("dw", 1).Acquire(ctxT(t), 1)
	require.NoError(t, err)
	tok, _ := dsync.FencingToken(lctx)
	assert.GreaterOrEqual(t, int64(tok/1000), grantEnd, "the next waiter's token (server µs) is from before the dead waiter's grant lapsed")
	require.NoError(t, c.NewSemaphore("dw", 1).Release(lctx, 1))
	bcancel()
	<-bdone
}
