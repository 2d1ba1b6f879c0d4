package dsync_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/dsync/dsync/internal/scripts"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func init() {
	childRoles["fairwaiter"] = childFairWaiter
}

// fairKeys returns the lock, queue and places keys of fair mutex name.
func fairKeys(prefix, name string) []string {
	k := prefix + ":{" + name + "}:fair"
	return []string{k, k + ":queue", k + ":places"}
}

func lrange(t testing.TB, rc rueidis.Client, key string) []string {
	t.Helper()
	v, err := rc.Do(context.Background(), rc.B().Lrange().Key(key).Start(0).Stop(-1).Build()).AsStrSlice()
	require.NoError(t, err)
	return v
}

func zcard(t testing.TB, rc rueidis.Client, key string) int64 {
	t.Helper()
	n, err := rc.Do(context.Background(), rc.B().Zcard().Key(key).Build()).AsInt64()
	require.NoError(t, err)
	return n
}

func getStr(t testing.TB, rc rueidis.Client, key string) string {
	t.Helper()
	v, err := rc.Do(context.Background(), rc.B().Get().Key(key).Build()).ToString()
	if !rueidis.IsRedisNil(err) {
		require.NoError(t, err)
	}
	return v
}

// TestFairMutexBasic: what TestLockContract does not cover (its sync.Locker
// side through one value, and a bad name).
func TestFairMutexBasic(t *testing.T) {
	c := newClient(t)
	f := c.NewFairMutex("basic")
	var l sync.Locker = f
	l.Lock()
	require.False(t, f.TryLock(), "TryLock on a held FairMutex succeeded")
	l.Unlock()
	require.Panics(t, l.Unlock, "Unlock of an unlocked FairMutex did not panic")
	_, err := c.NewFairMutex("").LockContext(ctxT(t))
	require.ErrorIs(t, err, dsync.ErrInvalidArgument, "empty name")
}

// A waiter whose context ends leaves the queue at once and leaves nothing
// behind; TryLock does not jump the queue.
func TestFairMutexCancelledWaiterLeaves(t *testing.T) {
	c := newClient(t)
	rc := newRueidis(t)
	keys := fairKeys(prefixOf(t, c), "cancel")
	f := c.NewFairMutex("cancel")
	hctx, err := f.LockContext(ctxT(t))
	require.NoError(t, err)
	before := getStr(t, rc, keys[0])
	short, cancel := context.WithTimeout(ctxT(t), 150*time.Millisecond)
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		_, err := f.LockContext(short)
		errc <- err
	}()
	waitFor(t, 2*time.Second, "the waiter to queue", func() bool { return len(lrange(t, rc, keys[1])) == 1 })
	require.ErrorIs(t, <-errc, context.DeadlineExceeded, "wait ended by its deadline")
	q := lrange(t, rc, keys[1])
	require.Empty(t, q, "queue after a cancelled wait: %q", q)
	require.Equal(t, int64(0), zcard(t, rc, keys[2]), "queue places after a cancelled wait")
	require.Equal(t, before, getStr(t, rc, keys[0]), "lock value changed by a cancelled wait")
	// A queued waiter makes TryLock fail even on a free lock.
	queued := make(chan error, 1)
	go func() {
		l, err := f.LockContext(ctxT(t))
		if err == nil {
			err = f.UnlockContext(l)
		}
		queued <- err
	}()
	waitFor(t, 2*time.Second, "the second waiter to queue", func() bool { return len(lrange(t, rc, keys[1])) == 1 })
	require.NoError(t, f.UnlockContext(hctx))
	require.NoError(t, <-queued)
	q = lrange(t, rc, keys[1])
	require.Empty(t, q, "queue not empty at the end: %q", q)
}

// childFairWaiter: for each line "<id>" on stdin, start a goroutine that
// locks the fair mutex DSYNC_TEST_NAME, appends id to the list
// <prefix>:order, and unlocks. Exits when stdin closes and all are done.
func childFairWaiter(c *dsync.Client, rc rueidis.Client, prefix string) int {
	f := c.NewFairMutex(os.Getenv("DSYNC_TEST_NAME"))
	var wg sync.WaitGroup
	failed := make(chan struct{}, 1)
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		id := strings.TrimSpace(sc.Text())
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := fairTurn(f, rc, prefix+":order", id); err != nil {
				fmt.Fprintln(os.Stderr, err)
				select {
				case failed <- struct{}{}:
				default:
				}
			}
		}()
	}
	wg.Wait()
	if len(failed) > 0 {
		return 1
	}
	return 0
}

func fairTurn(f *dsync.FairMutex, rc rueidis.Client, list, id string) error {
	ctx := context.Background()
	l, err := f.LockContext(ctx)
	if err != nil {
		return err
	}
	if err := rc.Do(ctx, rc.B().Rpush().Key(list).Element(id).Build()).Error(); err != nil {
		return err
	}
	return f.UnlockContext(l)
}

// Waiters arrive in a known order from two child processes and this one;
// they must be served in exactly that order.
func TestFairMutexFIFOAcrossProcesses(t *testing.T) {
	const name, waiters = "fifo", 18
	prefix := testPrefix(t)
	rc := newRueidis(t)
	c := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefix))
	keys := fairKeys(prefix, name)
	f := c.NewFairMutex(name)
	hold, err := f.LockContext(ctxT(t))
	require.NoError(t, err)
	var stdins []*os.File
	var cmds []interface{ Wait() error }
	for i := 0; i < 2; i++ {
		cmd := startChild(t, "fairwaiter", prefix, "DSYNC_TEST_NAME="+name)
		r, w, err := os.Pipe()
		require.NoError(t, err)
		cmd.Stdin = r
		require.NoError(t, cmd.Start())
		r.Close()
		stdins = append(stdins, w)
		cmds = append(cmds, cmd)
	}
	var local sync.WaitGroup
	localErr := make(chan error, waiters)
	for i := 0; i < waiters; i++ {
		id := strconv.Itoa(i)
		if src := i % 3; src < 2 {
			_, err := fmt.Fprintln(stdins[src], id)
			require.NoError(t, err)
		} else {
			local.Add(1)
			go func() {
				defer local.Done()
				if err := fairTurn(f, rc, prefix+":order", id); err != nil {
					localErr <- err
				}
			}()
		}
		// The next arrives only once this one is queued: a known order.
		waitFor(t, 5*time.Second, "waiter "+id+" to queue", func() bool { return len(lrange(t, rc, keys[1])) == i+1 })
	}
	for _, w := range stdins {
		w.Close()
	}
	require.NoError(t, f.UnlockContext(hold))
	for _, cmd := range cmds {
		require.NoError(t, cmd.Wait(), "child")
	}
	local.Wait()
	close(localErr)
	for err := range localErr {
		require.NoError(t, err)
	}
	order := lrange(t, rc, prefix+":order")
	violations := 0
	for i, id := range order {
		if id != strconv.Itoa(i) {
			violations++
		}
	}
	t.Logf("FIFO: %d waiters from 3 processes, %d violations, order %v", len(order), violations, order)
	require.Equal(t, waiters, len(order), "served %d of %d waiters with %d FIFO violations: %v", len(order), waiters, violations, order)
	require.Equal(t, 0, violations, "served %d of %d waiters with %d FIFO violations: %v", len(order), waiters, violations, order)
}

// A waiter that is SIGKILLed while queued blocks the queue for at most one
// lease; while it lived, it kept its place past one lease.
func TestFairMutexKilledWaiterDropsOut(t *testing.T) {
	const name, lease = "killed", time.Second
	prefix := testPrefix(t)
	rc := newRueidis(t)
	c := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefix), dsync.WithLease(lease))
	keys := fairKeys(prefix, name)
	f := c.NewFairMutex(name)
	hold, err := f.LockContext(ctxT(t))
	require.NoError(t, err)
	cmd := startChild(t, "fairwaiter", prefix, "DSYNC_TEST_NAME="+name, "DSYNC_TEST_LEASE="+lease.String())
	cmd.Stdin = strings.NewReader("child\n")
	require.NoError(t, cmd.Start())
	defer cmd.Wait()
	defer cmd.Process.Kill()
	waitFor(t, 5*time.Second, "the child to queue", func() bool { return len(lrange(t, rc, keys[1])) == 1 })
	got := make(chan time.Time, 1)
	go func() {
		l, err := f.LockContext(ctxT(t))
		if !assert.NoError(t, err) {
			got <- time.Time{}
			return
		}
		got <- time.Now()
		f.UnlockContext(l)
	}()
	waitFor(t, 2*time.Second, "the local waiter to queue", func() bool { return len(lrange(t, rc, keys[1])) == 2 })
	// Sleep is the point here: a live waiter keeps its place past a lease.
	time.Sleep(lease + lease/2)
	q := lrange(t, rc, keys[1])
	require.Len(t, q, 2, "a live waiter lost its place: queue %q", q)
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	killed := time.Now()
	require.NoError(t, f.UnlockContext(hold))
	var at time.Time
	select {
	case at = <-got:
	case <-time.After(5 * lease):
		t.Fatal("the queue stayed blocked by a dead waiter")
	}
	wait := at.Sub(killed)
	t.Logf("next waiter served %v after the head was killed (lease %v)", wait, lease)
	require.LessOrEqual(t, wait, lease+lease/2, "dead waiter blocked the queue for %v, more than one lease (%v) plus slack", wait, lease)
}

// The scripts, called directly, with the Redis state checked after each:
// a release grants the lock to the head of the queue and tells that wait
// alone, on its Client's channel.
func TestFairMutexScripts(t *testing.T) {
	rc := newRueidis(t)
	ctx := ctxT(t)
	prefix := testPrefix(t)
	keys := fairKeys(prefix, "s")
	wch := keys[0] + ":w:"
	// Waits: owner, its wid "<client>.<n>" and the member it queues as.
	wid := map[string]string{"a": "ca.1", "b": "cb.1", "c": "cc.1", "d": "cd.1", "e": "ce.1"}
	member := func(o string) string { return o + " " + wid[o] + " 10000" }
	acquire := func(owner string, try bool) []int64 {
		t.Helper()
		tr := "0"
		if try {
			tr = "1"
		}
		v, err := scripts.FairAcquire.Exec(ctx, rc, keys, []string{owner, "10000", "1000", tr, wch, wid[owner]}).AsIntSlice()
		require.NoError(t, err)
		return v
	}
	release := func(owner, tok string) int64 {
		t.Helper()
		n, err := scripts.FairRelease.Exec(ctx, rc, keys, []string{owner, tok, "60000", wch}).AsInt64()
		require.NoError(t, err)
		return n
	}
	leave := func(owner string) int64 {
		t.Helper()
		n, err := scripts.FairLeave.Exec(ctx, rc, keys, []string{member(owner), wch, "60000"}).AsInt64()
		require.NoError(t, err)
		return n
	}
	// Listen on b's and c's Clients' channels: only the head is told.
	dc, cancel := rc.Dedicate()
	defer cancel()
	msgs := make(chan string, 16)
	wait := dc.SetPubSubHooks(rueidis.PubSubHooks{OnMessage: func(m rueidis.PubSubMessage) { msgs <- m.Channel + "|" + m.Message }})
	require.NoError(t, dc.Do(ctx, dc.B().Subscribe().Channel(wch+"cb", wch+"cc").Build()).Error())
	defer func() { dc.Close(); <-wait }()
	next := func(what string) string {
		t.Helper()
		select {
		case m := <-msgs:
			return m
		case <-time.After(2 * time.Second):
			t.Fatalf("no message: %s", what)
			return ""
		}
	}

	a := acquire("a", false)
	require.Equal(t, int64(1), a[0], "acquire on a free lock = %v", a)
	require.Greater(t, a[1], int64(0), "acquire on a free lock = %v", a)
	tok := strconv.FormatInt(a[1], 10)
	require.Equal(t, "a "+tok+" 1", getStr(t, rc, keys[0]), "lock value")
	v := acquire("a", false)
	require.Equal(t, int64(2), v[0], "re-entry = %v, value", v)
	require.Equal(t, a[1], v[1], "re-entry = %v, value", v)
	require.Equal(t, "a "+tok+" 2", getStr(t, rc, keys[0]), "re-entry = %v, value", v)
	v = acquire("b", true)
	require.Equal(t, int64(0), v[0], "a try queued or was granted: %v", v)
	require.Empty(t, lrange(t, rc, keys[1]), "a try queued or was granted: %v", v)
	v = acquire("b", false)
	require.Equal(t, int64(0), v[0], "b = %v, want {0, pttl}", v)
	require.Greater(t, v[1], int64(0), "b = %v, want {0, pttl}", v)
	require.LessOrEqual(t, v[1], int64(10000), "b = %v, want {0, pttl}", v)
	acquire("c", false)
	acquire("b", false) // renews b's place, keeps its position
	q := lrange(t, rc, keys[1])
	require.Equal(t, []string{member("b"), member("c")}, q, "queue")
	require.Equal(t, int64(2), zcard(t, rc, keys[2]), "queue %q", q)
	require.Equal(t, int64(0), release("x", "0"), "foreign release")
	require.Equal(t, int64(2), release("a", tok), "first of two releases")
	require.Equal(t, int64(1), release("a", tok), "release")
	// The release granted the lock to b, the head, and told b's wait.
	m := next("the release's grant")
	btok, ok := strings.CutPrefix(m, wch+"cb|1 ")
	require.True(t, ok, "release published %q, want a grant to b's wait 1 on b's Client's channel", m)
	require.Equal(t, "b "+btok+" 1 cb.1 "+tok, getStr(t, rc, keys[0]), "granted lock value")
	b, _ := strconv.ParseInt(btok, 10, 64)
	require.Greater(t, b, a[1], "granted token")
	require.Equal(t, []string{member("c")}, lrange(t, rc, keys[1]), "queue after the grant")
	require.Equal(t, int64(1), release("a", tok), "a retried release after a grant is a no-op")
	require.Equal(t, "b "+btok+" 1 cb.1 "+tok, getStr(t, rc, keys[0]), "a retried release changed the lock")
	// b's attempt (its message lost) claims the grant; another wait of b
	// re-enters and leaves the queue.
	// The claim restarts the lease: b counts it from the attempt's send
	// time, maybe long after the grant (here the grant's lease is made to
	// look nearly spent).
	require.NoError(t, rc.Do(ctx, rc.B().Pexpire().Key(keys[0]).Milliseconds(500).Build()).Error())
	v = acquire("b", false)
	require.Equal(t, []int64{3, b}, v, "b's attempt after its grant")
	pttl, err := rc.Do(ctx, rc.B().Pttl().Key(keys[0]).Build()).AsInt64()
	require.NoError(t, err)
	require.Greater(t, pttl, int64(9000), "lease left after the claim (the grantee counts 10 s from its attempt)")
	wid["b"] = "cb.2"
	acquire("c", false)
	require.Equal(t, int64(1), leave("c"), "c leaves") // c is requeued below
	v = acquire("b", false)
	require.Equal(t, []int64{2, b}, v, "another wait of b re-enters")
	require.Equal(t, "b "+btok+" 2 cb.1 "+tok, getStr(t, rc, keys[0]), "re-entered grant")
	require.Empty(t, lrange(t, rc, keys[1]), "a re-entry left its member queued")
	require.Equal(t, int64(2), release("b", btok), "release one of b's two counts")
	// c waits; b's release grants c; c gives up before it sees the grant:
	// its leave releases the grant (nobody else waits: the free marker).
	acquire("c", false)
	require.Equal(t, int64(1), release("b", btok), "b's release")
	m = next("the grant to c")
	ctok, ok := strings.CutPrefix(m, wch+"cc|1 ")
	require.True(t, ok, "release published %q, want a grant to c", m)
	require.Equal(t, int64(2), leave("c"), "c's leave after its grant")
	require.Equal(t, "- "+ctok+" 0", getStr(t, rc, keys[0]), "c's leave left the lock held")
	require.Equal(t, int64(0), leave("c"), "second leave")
	// The lock is free but b is first (its holder's lease ran out, so no
	// release granted it): c's attempt grants it to b and c queues.
	wid["b"], wid["c"] = "cb.3", "cc.2"
	require.Equal(t, int64(1), acquire("d", false)[0], "d on a free lock")
	acquire("b", false)
	acquire("c", false)
	require.NoError(t, rc.Do(ctx, rc.B().Del().Key(keys[0]).Build()).Error()) // d's lease ran out
	v = acquire("c", false)
	require.Equal(t, int64(0), v[0], "c overtook b: %v", v)
	m = next("the grant to b by c's attempt")
	require.True(t, strings.HasPrefix(m, wch+"cb|3 "), "c's attempt published %q, want a grant to b's wait 3", m)
	require.Equal(t, []string{member("c")}, lrange(t, rc, keys[1]), "queue")
	// A place not renewed lapses after its lease (1s here) and is dropped
	// when it reaches the head.
	btok = strings.Fields(getStr(t, rc, keys[0]))[1]
	require.Equal(t, int64(1), release("b", btok), "b's release")
	m = next("the grant to c")
	require.True(t, strings.HasPrefix(m, wch+"cc|2 "), "b's release published %q, want a grant to c", m)
	ctok = strings.Fields(getStr(t, rc, keys[0]))[1]
	acquire("e", false)
	require.Equal(t, []string{member("e")}, lrange(t, rc, keys[1]), "queue")
	waitFor(t, 3*time.Second, "e's place to lapse", func() bool {
		s, err := rc.Do(ctx, rc.B().Zscore().Key(keys[2]).Member(member("e")).Build()).AsInt64()
		if rueidis.IsRedisNil(err) {
			return true // the zset lapsed with its last place
		}
		require.NoError(t, err)
		now, err := rc.Do(ctx, rc.B().Time().Build()).AsStrSlice()
		require.NoError(t, err)
		sec, _ := strconv.ParseInt(now[0], 10, 64)
		return s <= sec*1000
	})
	require.Equal(t, int64(1), release("c", ctok), "c's release")
	require.Equal(t, "- "+ctok+" 0", getStr(t, rc, keys[0]), "a lapsed place was granted the lock")
	require.Empty(t, lrange(t, rc, keys[1]), "lapsed place left in the queue")
	require.Equal(t, int64(0), zcard(t, rc, keys[2]), "lapsed place left in the zset")
	select {
	case m := <-msgs:
		t.Fatalf("unexpected message %q", m)
	default:
	}
}

// Mutual exclusion across two Clients, every goroutine queueing in Redis.
func TestFairMutexHammerClients(t *testing.T) {
	prefix := hammerClients(t, 4, 25, func(c *dsync.Client) dsync.ContextLocker { return c.NewFairMutex("hammer") })
	rcv := newRueidis(t)
	keys := fairKeys(prefix, "hammer")
	require.Empty(t, lrange(t, rcv, keys[1]), "queue not empty after every waiter was served")
	require.Equal(t, int64(0), zcard(t, rcv, keys[2]), "queue not empty after every waiter was served")
}
