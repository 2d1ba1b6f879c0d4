package dsync_test

import (
	"bufio"
	"context"
	"errors"
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
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func zcard(t testing.TB, rc rueidis.Client, key string) int64 {
	t.Helper()
	n, err := rc.Do(context.Background(), rc.B().Zcard().Key(key).Build()).AsInt64()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func getStr(t testing.TB, rc rueidis.Client, key string) string {
	t.Helper()
	v, err := rc.Do(context.Background(), rc.B().Get().Key(key).Build()).ToString()
	if err != nil && !rueidis.IsRedisNil(err) {
		t.Fatal(err)
	}
	return v
}

func TestFairMutexBasic(t *testing.T) {
	c := newClient(t)
	c2 := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefixOf(t, c)))
	f := c.NewFairMutex("basic")
	ctx := dsync.WithOwner(ctxT(t))
	l1, err := f.LockContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tok1, ok := dsync.FencingToken(l1)
	if !ok {
		t.Fatal("no fencing token")
	}
	// Reentrant by owner, in this Client and through another one.
	l2, err := f.LockContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	f2 := c2.NewFairMutex("basic")
	l3, err := f2.LockContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if tok3, _ := dsync.FencingToken(l3); tok3 != tok1 {
		t.Fatalf("re-entry through another Client changed the token: %d -> %d", tok1, tok3)
	}
	if _, ok, err := f2.TryLockContext(ctxT(t)); ok || err != nil {
		t.Fatalf("TryLockContext by another owner = %v, %v; want false, nil", ok, err)
	}
	if err := f.UnlockContext(dsync.WithOwner(ctxT(t))); !errors.Is(err, dsync.ErrNotHeld) {
		t.Fatalf("foreign unlock = %v, want ErrNotHeld", err)
	}
	if err := f2.UnlockContext(l3); err != nil {
		t.Fatal(err)
	}
	if err := f.UnlockContext(l2); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := f2.TryLockContext(ctxT(t)); ok {
		t.Fatal("free after 2 of 3 releases")
	}
	if err := f.UnlockContext(l1); err != nil {
		t.Fatal(err)
	}
	if l1.Err() == nil {
		t.Fatal("lock context not cancelled by the release")
	}
	if err := f.UnlockContext(l1); !errors.Is(err, dsync.ErrNotHeld) {
		t.Fatalf("second unlock = %v, want ErrNotHeld", err)
	}
	l4, ok, err := f2.TryLockContext(ctxT(t))
	if err != nil || !ok {
		t.Fatalf("TryLockContext on a free lock = %v, %v", ok, err)
	}
	if tok4, _ := dsync.FencingToken(l4); tok4 <= tok1 {
		t.Fatalf("token %d after %d: not increasing", tok4, tok1)
	}
	f2.UnlockContext(l4)

	// sync.Locker.
	var l sync.Locker = f
	l.Lock()
	if f.TryLock() {
		t.Fatal("TryLock on a held FairMutex succeeded")
	}
	l.Unlock()
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("Unlock of an unlocked FairMutex did not panic")
			}
		}()
		l.Unlock()
	}()
	if _, err := c.NewFairMutex("").LockContext(ctxT(t)); !errors.Is(err, dsync.ErrInvalidArgument) {
		t.Fatalf("empty name: %v, want ErrInvalidArgument", err)
	}
}

// A waiter whose context ends leaves the queue at once and leaves nothing
// behind; TryLock does not jump the queue.
func TestFairMutexCancelledWaiterLeaves(t *testing.T) {
	c := newClient(t)
	rc := newRueidis(t)
	keys := fairKeys(prefixOf(t, c), "cancel")
	f := c.NewFairMutex("cancel")
	hctx, err := f.LockContext(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	before := getStr(t, rc, keys[0])
	short, cancel := context.WithTimeout(ctxT(t), 150*time.Millisecond)
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		_, err := f.LockContext(short)
		errc <- err
	}()
	waitFor(t, 2*time.Second, "the waiter to queue", func() bool { return len(lrange(t, rc, keys[1])) == 1 })
	if err := <-errc; !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait ended by its deadline returned %v", err)
	}
	if q := lrange(t, rc, keys[1]); len(q) != 0 {
		t.Fatalf("queue after a cancelled wait: %q", q)
	}
	if n := zcard(t, rc, keys[2]); n != 0 {
		t.Fatalf("%d queue places after a cancelled wait", n)
	}
	if after := getStr(t, rc, keys[0]); after != before {
		t.Fatalf("lock value changed by a cancelled wait: %q -> %q", before, after)
	}
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
	if err := f.UnlockContext(hctx); err != nil {
		t.Fatal(err)
	}
	if err := <-queued; err != nil {
		t.Fatal(err)
	}
	if q := lrange(t, rc, keys[1]); len(q) != 0 {
		t.Fatalf("queue not empty at the end: %q", q)
	}
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
	if err != nil {
		t.Fatal(err)
	}
	var stdins []*os.File
	var cmds []interface{ Wait() error }
	for i := 0; i < 2; i++ {
		cmd := startChild(t, "fairwaiter", prefix, "DSYNC_TEST_NAME="+name)
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stdin = r
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		r.Close()
		stdins = append(stdins, w)
		cmds = append(cmds, cmd)
	}
	var local sync.WaitGroup
	localErr := make(chan error, waiters)
	for i := 0; i < waiters; i++ {
		id := strconv.Itoa(i)
		if src := i % 3; src < 2 {
			if _, err := fmt.Fprintln(stdins[src], id); err != nil {
				t.Fatal(err)
			}
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
	if err := f.UnlockContext(hold); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("child: %v", err)
		}
	}
	local.Wait()
	close(localErr)
	for err := range localErr {
		t.Fatal(err)
	}
	order := lrange(t, rc, prefix+":order")
	violations := 0
	for i, id := range order {
		if id != strconv.Itoa(i) {
			violations++
		}
	}
	t.Logf("FIFO: %d waiters from 3 processes, %d violations, order %v", len(order), violations, order)
	if len(order) != waiters || violations != 0 {
		t.Fatalf("served %d of %d waiters with %d FIFO violations: %v", len(order), waiters, violations, order)
	}
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
	if err != nil {
		t.Fatal(err)
	}
	cmd := startChild(t, "fairwaiter", prefix, "DSYNC_TEST_NAME="+name, "DSYNC_TEST_LEASE="+lease.String())
	cmd.Stdin = strings.NewReader("child\n")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	waitFor(t, 5*time.Second, "the child to queue", func() bool { return len(lrange(t, rc, keys[1])) == 1 })
	got := make(chan time.Time, 1)
	go func() {
		l, err := f.LockContext(ctxT(t))
		if err != nil {
			t.Error(err)
			got <- time.Time{}
			return
		}
		got <- time.Now()
		f.UnlockContext(l)
	}()
	waitFor(t, 2*time.Second, "the local waiter to queue", func() bool { return len(lrange(t, rc, keys[1])) == 2 })
	// Sleep is the point here: a live waiter keeps its place past a lease.
	time.Sleep(lease + lease/2)
	if q := lrange(t, rc, keys[1]); len(q) != 2 {
		t.Fatalf("a live waiter lost its place: queue %q", q)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	if err := f.UnlockContext(hold); err != nil {
		t.Fatal(err)
	}
	var at time.Time
	select {
	case at = <-got:
	case <-time.After(5 * lease):
		t.Fatal("the queue stayed blocked by a dead waiter")
	}
	wait := at.Sub(killed)
	t.Logf("next waiter served %v after the head was killed (lease %v)", wait, lease)
	if wait > lease+lease/2 {
		t.Fatalf("dead waiter blocked the queue for %v, more than one lease (%v) plus slack", wait, lease)
	}
}

// The scripts, called directly, with the Redis state checked after each.
func TestFairMutexScripts(t *testing.T) {
	rc := newRueidis(t)
	ctx := ctxT(t)
	prefix := testPrefix(t)
	keys := fairKeys(prefix, "s")
	wch := keys[0] + ":w:"
	acquire := func(owner string, try bool) []int64 {
		t.Helper()
		tr := "0"
		if try {
			tr = "1"
		}
		v, err := scripts.FairAcquire.Exec(ctx, rc, keys, []string{owner, "10000", "1000", tr, wch}).AsIntSlice()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	release := func(owner, tok string) int64 {
		t.Helper()
		n, err := scripts.FairRelease.Exec(ctx, rc, keys, []string{owner, tok, "60000", wch}).AsInt64()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	// Listen on b's and c's channels: only the head may be woken.
	dc, cancel := rc.Dedicate()
	defer cancel()
	msgs := make(chan string, 16)
	wait := dc.SetPubSubHooks(rueidis.PubSubHooks{OnMessage: func(m rueidis.PubSubMessage) { msgs <- m.Channel }})
	if err := dc.Do(ctx, dc.B().Subscribe().Channel(wch+"b", wch+"c").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	defer func() { dc.Close(); <-wait }()

	a := acquire("a", false)
	if a[0] != 1 || a[1] <= 0 {
		t.Fatalf("acquire on a free lock = %v", a)
	}
	tok := strconv.FormatInt(a[1], 10)
	if v := getStr(t, rc, keys[0]); v != "a "+tok+" 1" {
		t.Fatalf("lock value %q", v)
	}
	if v := acquire("a", false); v[0] != 2 || v[1] != a[1] || getStr(t, rc, keys[0]) != "a "+tok+" 2" {
		t.Fatalf("re-entry = %v, value %q", v, getStr(t, rc, keys[0]))
	}
	if v := acquire("b", true); v[0] != 0 || len(lrange(t, rc, keys[1])) != 0 {
		t.Fatalf("a try queued or was granted: %v", v)
	}
	if v := acquire("b", false); v[0] != 0 || v[1] <= 0 || v[1] > 10000 {
		t.Fatalf("b = %v, want {0, pttl}", v)
	}
	acquire("c", false)
	acquire("b", false) // renews b's place, keeps its position
	if q := lrange(t, rc, keys[1]); strings.Join(q, ",") != "b,c" || zcard(t, rc, keys[2]) != 2 {
		t.Fatalf("queue %q", q)
	}
	if n := release("x", "0"); n != 0 {
		t.Fatalf("foreign release = %d", n)
	}
	if n := release("a", tok); n != 2 {
		t.Fatalf("first of two releases = %d", n)
	}
	if n := release("a", tok); n != 1 || getStr(t, rc, keys[0]) != "- "+tok+" 0" {
		t.Fatalf("release = %d, value %q", n, getStr(t, rc, keys[0]))
	}
	if n := release("a", tok); n != 1 {
		t.Fatalf("retried release = %d, want 1 (no-op)", n)
	}
	select {
	case ch := <-msgs:
		if ch != wch+"b" {
			t.Fatalf("release woke %q, want the head b", ch)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("release did not wake the head")
	}
	// The lock is free but b is first: c waits, and b is reminded.
	if v := acquire("c", false); v[0] != 0 {
		t.Fatalf("c overtook b: %v", v)
	}
	if ch := <-msgs; ch != wch+"b" {
		t.Fatalf("woke %q, want b", ch)
	}
	// b leaves: c is the new head and is told at once.
	if n, err := scripts.FairLeave.Exec(ctx, rc, keys[1:], []string{"b", wch, ""}).AsInt64(); err != nil || n != 1 {
		t.Fatalf("leave = %d, %v", n, err)
	}
	if ch := <-msgs; ch != wch+"c" {
		t.Fatalf("leave woke %q, want the new head c", ch)
	}
	if n, _ := scripts.FairLeave.Exec(ctx, rc, keys[1:], []string{"b", wch, ""}).AsInt64(); n != 0 {
		t.Fatal("second leave removed something")
	}
	c := acquire("c", false)
	if c[0] != 1 || c[1] <= a[1] {
		t.Fatalf("c = %v after token %d", c, a[1])
	}
	if len(lrange(t, rc, keys[1])) != 0 || zcard(t, rc, keys[2]) != 0 {
		t.Fatal("queue not empty after the last waiter got the lock")
	}
	// A place not renewed lapses after its lease (1s here) and is pruned.
	acquire("d", false)
	waitFor(t, 3*time.Second, "d's place to lapse", func() bool {
		acquire("e", true) // any call prunes
		return len(lrange(t, rc, keys[1])) == 0
	})
	if zcard(t, rc, keys[2]) != 0 {
		t.Fatal("lapsed place left in the zset")
	}
}

// Mutual exclusion across two Clients, every goroutine queueing in Redis.
func TestFairMutexHammerClients(t *testing.T) {
	prefix := hammerClients(t, 4, 25, func(c *dsync.Client) dsync.ContextLocker { return c.NewFairMutex("hammer") })
	rcv := newRueidis(t)
	keys := fairKeys(prefix, "hammer")
	if len(lrange(t, rcv, keys[1])) != 0 || zcard(t, rcv, keys[2]) != 0 {
		t.Fatal("queue not empty after every waiter was served")
	}
}
