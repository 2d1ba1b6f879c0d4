package dsync_test

import (
	"context"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A Wait that nothing wakes looks at the counter once, then waits for the
// message (its fallback look is lease/3 away: 10 s with the default
// lease), as its doc says. (Before the fix it looked again every
// millisecond: a wait hint of 0 means "look again at once" to the wait
// loop's timer since bd58103, and Wait passed 0 for "none". 246 MGETs in
// one 300 ms Wait: each waiter a Redis call in flight nearly all the
// time, and about 800 calls a second loading Redis and the machine. In
// the fault suite's scenario 1, where one such Wait returned 107 ms after
// its context ended, 4 processes of 8 goroutines each ran them.)
func TestWaitGroupWaitDoesNotPoll(t *testing.T) {
	observed, observe := observeWaits()
	c := newClient(t, observe)
	rc := newRueidis(t)
	ctx := ctxT(t)
	wg := c.NewWaitGroup("quiet")
	require.NoError(t, wg.Add(ctx, 1))
	mgets := func() int {
		info, err := rc.Do(ctx, rc.B().Info().Section("commandstats").Build()).ToString()
		require.NoError(t, err)
		m := mgetStat.FindStringSubmatch(info)
		if m == nil {
			return 0
		}
		n, _ := strconv.Atoi(m[1])
		return n
	}
	// Subscribed before it waits: a Wait that could not subscribe polls
	// with a backoff instead, which is not what this checks.
	ch := prefixOf(t, c) + ":{quiet}:wg:ch"
	warm, cancel := context.WithCancel(ctx)
	warmed := make(chan error, 1)
	go func() { warmed <- wg.Wait(warm) }()
	waitSubscribed(t, rc, ch)
	cancel()
	require.ErrorIs(t, <-warmed, context.Canceled)

	const d = 300 * time.Millisecond
	before := mgets()
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	obs := observed.Load()
	err := wg.Wait(wctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Equal(t, obs+1, observed.Load(), "the Wait did not observe the counter")
	n := mgets() - before
	t.Logf("%d looks (MGET) in a Wait of %v nothing woke", n, d)
	assert.LessOrEqual(t, n, 1, "looks in a %v Wait nothing woke (its fallback is lease/3 = %v)", d, dsync.DefaultLease/3)
	require.NoError(t, wg.Done(ctx))
}

var mgetStat = regexp.MustCompile(`cmdstat_mget:calls=(\d+)`)

// A Wait returns by its context while its look at the counter waits for a
// connection another call of its Client is opening again, also when no
// call failed on the connection before (rueidis saw it break by itself:
// the case Client.inDoubt does not cover, so that calls there ran inline,
// TestWaitNotBehindAnotherCallsDial's note). The new connection's
// handshake is held 1.5 s. Before the fix the Wait returned when the
// handshake did, about 1.5 s after its 50 ms context.
func TestWaitGroupWaitNotBehindDialAfterNoFailure(t *testing.T) {
	// The case needs rueidis to have seen the cut before the other call is
	// sent; the sign the test waits for (a connection held again) may come
	// first, and the other call then fails on the cut connection. That run
	// is not this case: it is run again, and one run must reach it.
	for run := 1; ; run++ {
		if waitNotBehindDialAfterNoFailure(t) {
			return
		}
		t.Logf("run %d: a call failed on the cut connection: not the case this test is about; again", run)
		require.Less(t, run, 5, "no run reached the case: every one had a call fail on the cut connection")
	}
}

// waitNotBehindDialAfterNoFailure is one run of
// TestWaitGroupWaitNotBehindDialAfterNoFailure; it reports false, having
// asserted nothing, when a call failed on the cut connection.
func waitNotBehindDialAfterNoFailure(t *testing.T) bool {
	p := newStallProxy(t, server(t).Addr)
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{p.addr}, DisableCache: true,
		PipelineMultiplex: -1}) // one connection: every call needs the one being opened
	require.NoError(t, err)
	t.Cleanup(rc.Close)
	c := newClientOn(t, rc, dsync.WithKeyPrefix(testPrefix(t)), dsync.WithLease(3*time.Second))
	wg := c.NewWaitGroup("a")
	// A call under a context without a deadline makes rueidis read the
	// connection in the background: it sees the cut itself, no call
	// failing on it.
	bctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	require.NoError(t, wg.Add(bctx, 1))
	// The preload of the Client's scripts dials a connection of its own:
	// it ends before the cut, or its dial could be the one held first.
	waitPreloaded(t, c)
	p.cut(1500 * time.Millisecond)
	// The pub/sub connection, opened again by the Client at once, is held
	// first: the cut has been seen. Then another call, with seconds to
	// wait, opens the command connection again.
	select {
	case <-p.held:
	case <-time.After(5 * time.Second):
		t.Fatal("no connection was opened again")
	}
	other := make(chan error, 1)
	go func() {
		octx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		other <- c.NewWaitGroup("dialer").Add(octx, 1)
	}()
	waitFor(t, 5*time.Second, "the other call's connection held, or its failure", func() bool { return p.nheld.Load() >= 2 || dsync.InDoubt(c) })
	if dsync.InDoubt(c) {
		<-other // it ends with the held dial
		return false
	}
	ctx, cancel2 := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel2()
	start := time.Now()
	err = wg.Wait(ctx)
	took := time.Since(start)
	t.Logf("the Wait returned %v after its 50 ms context (%v)", took-50*time.Millisecond, err)
	assert.Less(t, took, 50*time.Millisecond+100*time.Millisecond, "the Wait returned %v after its 50 ms deadline (%v)", took-50*time.Millisecond, err)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	require.NoError(t, <-other, "the other call")
	return true
}
