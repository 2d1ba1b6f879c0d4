package dsync

import (
	"context"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/dsync/dsync/internal/redistest"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
)

// twoClients starts a server and two Clients on it (lease 6 s), closed
// when t ends, and returns a counter of the EVALSHA calls it has run.
func twoClients(t *testing.T) (*redistest.Server, *Client, *Client, func() int) {
	s := redistest.Start(t)
	newC := func() *Client {
		rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{s.Addr}, DisableCache: true})
		require.NoError(t, err)
		t.Cleanup(rc.Close)
		c, err := NewClient(rc, WithKeyPrefix("p"), WithLease(6*time.Second))
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		return c
	}
	h, w := newC(), newC()
	evalshas := func() int {
		info, err := s.Do(t, "INFO", "commandstats").ToString()
		require.NoError(t, err)
		m := evalshaStat.FindStringSubmatch(info)
		if m == nil {
			return 0
		}
		n, _ := strconv.Atoi(m[1])
		return n
	}
	return s, h, w, evalshas
}

var evalshaStat = regexp.MustCompile(`cmdstat_evalsha:calls=(\d+)`)

// A wait whose subscription breaks (the notifier's loop reconnecting)
// polls, backing off by the subscribes that failed in a row, not by how
// often it had looked before: a wait that had looked a dozen times used to
// poll once a second, and saw a change made meanwhile up to a second late
// (the rolling restart's Group subtest: a run cut by a Close taken over
// 1.28 s late). Here a Once's waiter is woken 10 times by stray messages,
// then its subscription breaks, then the run it waits for ends: it must
// return within 100 ms of that end.
func TestWaitPollsSoonWhenItsSubscriptionBreaks(t *testing.T) {
	s, h, w, evalshas := twoClients(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	release, started := make(chan struct{}), make(chan struct{})
	ended := make(chan time.Time, 1)
	go func() {
		_ = h.NewOnce("o").Do(ctx, func(context.Context) error { close(started); <-release; return nil })
		ended <- time.Now()
	}()
	<-started
	returned := make(chan time.Time, 1)
	go func() {
		_ = w.NewOnce("o").Do(ctx, func(context.Context) error { return nil })
		returned <- time.Now()
	}()
	ch := w.NewOnce("o").runRecord.ch
	waitUntil(t, 10*time.Second, "the waiter to subscribe", func() bool { return w.notify.isLive(ch) })
	for range 10 {
		before := evalshas()
		require.NoError(t, s.Do(t, "PUBLISH", ch, "x").Error())
		waitUntil(t, 5*time.Second, "the waiter to look again", func() bool { return evalshas() > before })
	}

	// The subscription breaks: the loop holds opMu as while it reconnects,
	// and the server no longer delivers the channel's messages.
	n := w.notify
	n.opMu.Lock()
	unlocked := false
	defer func() {
		if !unlocked {
			n.opMu.Unlock()
		}
	}()
	require.NoError(t, n.dc.Do(ctx, n.dc.B().Unsubscribe().Channel(ch).Build()).Error())
	before := evalshas()
	n.disconnected()
	waitUntil(t, 5*time.Second, "the waiter to look after the break", func() bool { return evalshas() > before })

	close(release)
	end := <-ended
	var back time.Time
	select {
	case back = <-returned:
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter did not return within 5 s of the run's end")
	}
	n.opMu.Unlock()
	unlocked = true
	took := back.Sub(end)
	t.Logf("the waiter returned %v after the run it waited for ended", took)
	require.Less(t, took, 100*time.Millisecond, "a wait whose subscription broke polled late")
}

// A wait that subscribes while the notifier sweeps idle channels (one
// UNSUBSCRIBE under the loop's lock, at most a second) waits the sweep
// out and subscribes after it, instead of polling Redis meanwhile with a
// backoff that can leave it looking again well after the sweep ended.
// Here the sweep lasts 200 ms: the waiter must not look in between, and
// must be subscribed within 100 ms of its end.
func TestWaitSubscribesAfterSweep(t *testing.T) {
	_, h, w, evalshas := twoClients(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	release, started := make(chan struct{}), make(chan struct{})
	defer close(release)
	go func() {
		_ = h.NewOnce("o").Do(ctx, func(context.Context) error { close(started); <-release; return nil })
	}()
	<-started
	ch := w.NewOnce("o").runRecord.ch
	n := w.notify
	n.sweeping.Store(true) // as sweep does, before it takes opMu
	n.opMu.Lock()
	before := evalshas()
	go func() { _ = w.NewOnce("o").Do(ctx, func(context.Context) error { return nil }) }()
	waitUntil(t, 5*time.Second, "the waiter's first look", func() bool { return evalshas() > before })
	first := evalshas()
	time.Sleep(200 * time.Millisecond) // the sweep's round trip, as long as it may take under load
	during := evalshas() - first
	end := time.Now()
	n.opMu.Unlock()
	n.sweeping.Store(false)
	waitUntil(t, 5*time.Second, "the waiter to subscribe", func() bool { return n.isLive(ch) })
	took := time.Since(end)
	t.Logf("looks during the sweep: %d; subscribed %v after it", during, took)
	require.Zero(t, during, "the waiter polled while the notifier swept")
	require.Less(t, took, 100*time.Millisecond, "subscribed late after the sweep")
}
